"""The folders, docs/architecture.md and the import-linter layers name the same parts (rfcs/0340).

Each failure says what to add and where: a new package or module goes into a
layers contract in ``pyproject.toml`` (``[tool.importlinter]``), into
docs/architecture.md, and, inside a package with a map, into its ``__init__``.
"""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "agentd"
DOC = ROOT / "docs" / "architecture.md"


def _contracts() -> list[dict[str, object]]:
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())
    contracts: list[dict[str, object]] = data["tool"]["importlinter"]["contracts"]
    return contracts


def _layers() -> dict[str, set[str]]:
    """Container (dotted) -> the names its layers contract lists."""
    out: dict[str, set[str]] = {}
    for c in _contracts():
        if c.get("type") != "layers":
            continue
        names = {n.strip().strip("()") for layer in c["layers"] for n in str(layer).split("|")}  # type: ignore[attr-defined]
        for container in c.get("containers", []):  # type: ignore[attr-defined]
            out.setdefault(str(container), set()).update(names)
    return out


def _children(dotted: str) -> list[str]:
    """The direct children (modules and packages) of a package, by name."""
    folder = ROOT / dotted.replace(".", "/")
    names = [p.stem for p in folder.glob("*.py") if p.stem not in ("__init__", "__main__")]
    names += [p.name for p in folder.iterdir() if (p / "__init__.py").is_file()]
    return sorted(names)


def _packages() -> list[str]:
    return sorted(
        p.parent.relative_to(ROOT).as_posix().replace("/", ".")
        for p in PKG.rglob("__init__.py")
        if "__pycache__" not in p.parts
    )


def test_every_part_of_agentd_is_in_the_top_level_layers():
    listed = _layers().get("agentd", set())
    missing = [n for n in _children("agentd") if n not in listed]
    assert not missing, (
        f"agentd/{missing[0]} is in no layer: add {missing[0]!r} to the layers of the contract "
        '"agentd\'s layers point down" in pyproject.toml (on the line of the packages it may import '
        "and that may import it: run lint-imports), and a row to the table in docs/architecture.md; "
        f"all missing: {missing}"
    )


def test_every_module_of_a_layered_package_is_in_its_layers():
    problems = []
    for container, listed in sorted(_layers().items()):
        if container == "agentd":
            continue
        for name in _children(container):
            if name not in listed:
                problems.append(f"{container}.{name}")
        for name in sorted(listed - set(_children(container))):
            problems.append(f"{container}.{name} (listed, but there is no such module: remove it)")
    assert not problems, (
        "modules missing from their package's layers contract in pyproject.toml "
        f"(add each to the contract whose containers name its package): {problems}"
    )


def test_the_packages_that_are_layered_inside_keep_a_contract():
    layered = set(_layers())
    for pkg in ("agentd.core", "agentd.observe", "agentd.state", "agentd.supervisor"):
        subs = [p for p in _packages() if p.startswith(pkg)]
        missing = [p for p in subs if p not in layered]
        assert not missing, (
            f"{missing[0]} has no layers contract: add one to pyproject.toml "
            f'(containers = ["{missing[0]}"], its modules from the top down)'
        )


def _doc_names() -> set[str]:
    text = DOC.read_text()
    return set(re.findall(r"`([A-Za-z_][\w.]*)`", text)) | {
        m.rstrip("/").replace("/", ".") for m in re.findall(r"`(agentd/[\w/]+)`", text)
    }


def test_every_package_is_named_in_docs_architecture():
    names = _doc_names()
    missing = []
    for pkg in _packages():
        rel = pkg.removeprefix("agentd.")
        if pkg == "agentd":
            continue
        if not ({rel, rel.rsplit(".", 1)[-1], pkg} & names):
            missing.append(rel)
    assert not missing, (
        f"docs/architecture.md does not name the package {missing[0]!r}: add it (in backticks) to the "
        f"layer table or to its package's paragraph; all missing: {missing}"
    )


def test_every_top_level_part_and_every_layered_module_is_named_in_docs_architecture():
    names = _doc_names()
    missing = [f"agentd.{n}" for n in _children("agentd") if n not in names]
    for container in _layers():
        if container != "agentd":
            missing += [f"{container}.{n}" for n in _children(container) if n not in names]
    assert not missing, (
        "docs/architecture.md does not name these parts: add each, in backticks, where its package's "
        f"order is given (in the layer order of pyproject.toml): {missing}"
    )


def test_each_layered_package_opens_with_a_map_naming_its_modules():
    problems = []
    for container in _layers():
        if container == "agentd":
            continue
        init = ROOT / container.replace(".", "/") / "__init__.py"
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        for name in _children(container):
            pattern = (
                rf"\b{re.escape(container)}\.{re.escape(name)}\b|~[\w.]*\.{re.escape(name)}\b|\b{name}\.py\b"
            )
            if not re.search(pattern, doc):
                problems.append(f"{container}.{name}")
    assert not problems, (
        "a package's __init__ docstring is its map: add a line ``* :mod:`<module>`  what it holds`` (or ``name.py  what it holds``) "
        f"in layer order for each of: {problems}"
    )


def test_the_documented_parts_exist():
    """A name in the layer table that is no longer a part of agentd is a stale map."""
    text = DOC.read_text()
    table = re.findall(r"^\| \d+ \| `([\w.]+)` \|", text, re.MULTILINE)
    gone = [n for n in table if n not in _children("agentd")]
    assert table, "docs/architecture.md has no layer table (| layer | package | owns |)"
    assert not gone, f"docs/architecture.md's layer table names parts that do not exist: remove {gone}"

"""The package's metadata: every import declared with a range, one version everywhere, the licence, the changelog.

The install itself (pipx, uv, uvx in a fresh environment) is tested in
``tests/packaging/test_install.py``.
"""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import agentd

ROOT = Path(__file__).resolve().parents[2]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT = PYPROJECT["project"]
REQUIREMENTS = [Requirement(r) for r in PROJECT["dependencies"]]
DECLARED = {canonicalize_name(r.name) for r in REQUIREMENTS}

#: Modules allowed to import an optional extra's packages (lazily: only when its provider is used).
OPTIONAL_IMPORTERS = {
    "bedrock": {"agentd/models/cloud.py"},
    "vertex": {"agentd/models/cloud.py"},
    # The OTLP exporter and SDK: imported only by the tracing module, only when OTEL_* asks.
    "otel": {"agentd/observe/tracing.py"},
}
EXTRAS = {
    extra: {canonicalize_name(Requirement(r).name) for r in reqs}
    for extra, reqs in PROJECT["optional-dependencies"].items()
    if extra in OPTIONAL_IMPORTERS
}

#: Declared but never imported, and why.
NOT_IMPORTED = {
    "pydantic-monty": "brings the sandbox's runtime; its import package comes from pydantic-monty-client",
}


def _imported_top_levels() -> dict[str, set[str]]:
    """Top-level modules imported anywhere in agentd (absolute imports) -> the files importing them."""
    found: dict[str, set[str]] = {}
    for path in (ROOT / "agentd").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                found.setdefault(name.partition(".")[0], set()).add(str(path.relative_to(ROOT)))
    return found


def _third_party() -> dict[str, set[str]]:
    return {
        top: files
        for top, files in _imported_top_levels().items()
        if top not in sys.stdlib_module_names and top != "agentd"
    }


def test_the_scan_sees_the_imports_it_should():
    # Guard against a scan that finds nothing and so passes trivially.
    assert {"trio", "mcp", "mcp_types", "httpx2", "anyio", "pydantic_monty"} <= set(_third_party())


def test_every_imported_third_party_package_is_declared():
    providers = importlib.metadata.packages_distributions()
    undeclared = {}
    for top, files in sorted(_third_party().items()):
        dists = {canonicalize_name(d) for d in providers.get(top, [])}
        assert dists, f"{top!r} (imported by {sorted(files)}) is not installed: no distribution provides it"
        if dists & DECLARED:
            continue
        extras = [extra for extra, names in EXTRAS.items() if dists & names]
        if extras and all(set(files) <= OPTIONAL_IMPORTERS[extra] for extra in extras):
            continue  # an optional extra's package, imported only where that extra is used
        undeclared[top] = (sorted(dists), sorted(files)[:3])
    assert undeclared == {}, f"imported but not in [project] dependencies: {undeclared}"


def test_the_optional_extras_are_declared_with_ranges():
    extras = PROJECT["optional-dependencies"]
    for extra in ("bedrock", "vertex"):
        for req in (Requirement(r) for r in extras[extra]):
            assert req.specifier, f"{extra}: {req} has no version range"
        assert "anthropic" in {canonicalize_name(Requirement(r).name) for r in extras[extra]}


def test_every_declared_dependency_is_imported_or_explained():
    providers = importlib.metadata.packages_distributions()
    imported = {canonicalize_name(d) for top in _third_party() for d in providers.get(top, [])}
    unexplained = DECLARED - imported - set(NOT_IMPORTED)
    assert unexplained == set()


def test_every_dependency_has_a_lower_and_an_upper_bound():
    for req in REQUIREMENTS + [Requirement(r) for r in PROJECT["optional-dependencies"]["test"]]:
        ops = {spec.operator for spec in req.specifier}
        assert ">=" in ops or "==" in ops or "~=" in ops, f"{req}: no lower bound"
        if req.name in ("wheel", "setuptools"):
            continue  # build tools for the image-layout test: any new release will do
        assert "<" in ops or "==" in ops or "~=" in ops, f"{req}: no upper bound"


def test_distribution_name_is_not_the_taken_one_and_the_command_is_agentd():
    # "agentd" on the package index is an unrelated project (rfcs/0160).
    assert canonicalize_name(PROJECT["name"]) == "agentd-supervisor"
    assert PROJECT["scripts"] == {"agentd": "agentd.cli:main"}
    assert PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"] == ["agentd*"]


def test_one_version_everywhere():
    assert PROJECT["dynamic"] == ["version"]
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "agentd.__version__"}
    assert importlib.metadata.version("agentd-supervisor") == agentd.__version__


def test_license_file_is_apache_2():
    assert PROJECT["license"] == "Apache-2.0"
    assert PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License\n                           Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert len(text.splitlines()) > 190  # the full text, not a notice


def test_changelog_has_unreleased_and_the_current_version():
    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## \[([^\]]+)\]", text, re.MULTILINE)
    assert headings[:2] == ["Unreleased", agentd.__version__]
    assert re.search(
        rf"^## \[{re.escape(agentd.__version__)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", text, re.MULTILINE
    )


def test_version_flag_and_check_through_the_real_command(tmp_path):
    run = [sys.executable, "-m", "agentd"]
    result = subprocess.run([*run, "--version"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert (result.returncode, result.stdout, result.stderr) == (0, f"agentd {agentd.__version__}\n", "")
    result = subprocess.run(
        [*run, "check", "--model", "script:" + str(ROOT / "examples/scripts/hello.json"), "hi"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["agentd_version"] == agentd.__version__

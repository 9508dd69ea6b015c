#!/usr/bin/env python3
"""Move agentd's modules into the folders of rfcs/0340 and rewrite every reference.

A one-off tool, used once for the layout move of issue 28 (item 1) and kept so
that the move can be re-run on a newer main: other branches were landing new
modules and imports while the move was made. It is not part of agentd and
nothing imports it.

    python scripts/relayout.py [--root DIR] [--dry-run] [--no-format]

Run it from a clean work tree; it then:

1. ``git mv``-s every module of :data:`MAPPING` whose old file exists (a module
   already at its new place is skipped, so a second run moves nothing), and
   creates each new package's ``__init__.py`` (:data:`NEW_PACKAGES`, a fixed
   one-line docstring, replaced by the hand-written map afterwards);
2. rewrites the references in :data:`REWRITE_ROOTS`: dotted names
   (``agentd.errors.ConfigError``, ``python -m agentd.vocabulary``,
   ``"agentd.telemetry.X"`` patch targets), ``from agentd import errors`` and
   ``from agentd.supervisor import reactor`` forms (split by new parent when
   needed), and paths (``agentd/errors.py``, ``agentd/supervisor/reactor.py``);
3. sorts the imports and formats the Python files it changed (``ruff``);
4. reports: mapping entries whose module is absent, modules at the top of
   ``agentd/`` and ``agentd/supervisor/`` that the mapping does not place (add
   them to MAPPING or KEEP), and every line that still names an old module
   or path after the rewrite (a form this script does not understand: fix
   those by hand).

It is idempotent: the rewrite only touches names that are old modules, and no
new name begins with an old one (no new package reuses a moved module's name),
so a rewritten name is never rewritten again. Records under ``rfcs/`` are
history and are left as they are.

Exit status: 0 when nothing is left to report, 1 when something is (the
report says what), 2 on a usage error or a conflict (old and new both exist).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

#: Old dotted module -> new dotted module. The leaf name never changes (so
#: ``from P import leaf`` only changes its P). Entries whose old module is
#: absent are skipped and listed (e.g. modules of a branch not merged yet).
MAPPING: dict[str, str] = {
    # core: the shared vocabulary every part speaks; imports nothing above it.
    "agentd.exitcodes": "agentd.core.exitcodes",
    "agentd.limits": "agentd.core.limits",
    "agentd.jsonvalue": "agentd.core.jsonvalue",
    "agentd.safetext": "agentd.core.safetext",
    "agentd.redact": "agentd.core.redact",
    "agentd.durations": "agentd.core.durations",
    "agentd.extras": "agentd.core.extras",
    "agentd.errors": "agentd.core.errors",
    "agentd.prelaunch": "agentd.core.prelaunch",
    # observe: what agentd records and shows about a run.
    "agentd.vocabulary": "agentd.observe.vocabulary",
    "agentd.histograms": "agentd.observe.histograms",
    "agentd.output": "agentd.observe.output",
    "agentd.telemetry": "agentd.observe.telemetry",
    "agentd.counters": "agentd.observe.counters",
    "agentd.timeline": "agentd.observe.timeline",
    "agentd.tracing": "agentd.observe.tracing",
    "agentd.sdnotify": "agentd.observe.sdnotify",
    "agentd.metrics": "agentd.observe.metrics",
    "agentd.health": "agentd.observe.health",
    "agentd.streamjson": "agentd.observe.streamjson",
    "agentd.humanlog": "agentd.observe.humanlog",  # from a branch landing later
    "agentd.errorline": "agentd.observe.errorline",  # from a branch landing later
    "agentd.activity": "agentd.observe.activity",  # the status branch: the recent-activity ring
    "agentd.statuspage": "agentd.observe.statuspage",  # the status branch: the HTML page on /
    # state: the file lock joins the files it guards.
    "agentd.filelock": "agentd.state.filelock",
    # the conversation as model messages: only the agent reads it, and it
    # imports models (state sits below models).
    "agentd.state.transcript": "agentd.agent.transcript",
    # supervisor: the reactor loop and its parts.
    "agentd.supervisor.budget": "agentd.supervisor.loop.budget",
    "agentd.supervisor.governor": "agentd.supervisor.loop.governor",
    "agentd.supervisor.agents": "agentd.supervisor.loop.agents",
    "agentd.supervisor.seams": "agentd.supervisor.loop.seams",
    "agentd.supervisor.runstatus": "agentd.supervisor.loop.runstatus",
    "agentd.supervisor.backpressure": "agentd.supervisor.loop.backpressure",
    "agentd.supervisor.readiness": "agentd.supervisor.loop.readiness",
    "agentd.supervisor.spawner": "agentd.supervisor.loop.spawner",
    "agentd.supervisor.notices": "agentd.supervisor.loop.notices",
    "agentd.supervisor.delivery": "agentd.supervisor.loop.delivery",
    "agentd.supervisor.drain": "agentd.supervisor.loop.drain",
    "agentd.supervisor.selftools": "agentd.supervisor.loop.selftools",
    "agentd.supervisor.usage": "agentd.supervisor.loop.usage",
    "agentd.supervisor.turns": "agentd.supervisor.loop.turns",
    "agentd.supervisor.reactor": "agentd.supervisor.loop.reactor",
    # supervisor: subscriptions and routes.
    "agentd.supervisor.subscriptions": "agentd.supervisor.routing.subscriptions",
    "agentd.supervisor.unmatched": "agentd.supervisor.routing.unmatched",
    "agentd.supervisor.sessionroutes": "agentd.supervisor.routing.sessionroutes",
    "agentd.supervisor.routes": "agentd.supervisor.routing.routes",
    "agentd.supervisor.declared": "agentd.supervisor.routing.declared",
    # supervisor: the child processes (zygote client, tree, control channel).
    "agentd.supervisor.tree": "agentd.supervisor.children.tree",
    "agentd.supervisor.channel": "agentd.supervisor.children.channel",
    # supervisor: the tool policy the hub applies.
    "agentd.toolpolicy": "agentd.supervisor.toolpolicy",
}

#: Modules that stay where they are on purpose (not reported as unmapped).
KEEP: frozenset[str] = frozenset(
    {
        "agentd.__init__",
        "agentd.__main__",
        "agentd.events",  # between triggers/selfmcp and observe: rfcs/0340
        "agentd.supervisor.__init__",
        "agentd.supervisor.app",
        "agentd.supervisor.hub",
        "agentd.supervisor.checkconnect",
        "agentd.supervisor.statusview",  # the status branch: reads the reactor, the hub; above them
    }
)

#: Packages the move creates: path -> the placeholder ``__init__`` (fixed text,
#: so that the hand-written maps committed after the move apply on a re-run).
NEW_PACKAGES: dict[str, str] = {
    "agentd/core/__init__.py": '"""The shared vocabulary of agentd."""\n',
    "agentd/observe/__init__.py": '"""What agentd records and shows about a run."""\n',
    "agentd/supervisor/loop/__init__.py": '"""The reactor loop and its parts."""\n',
    "agentd/supervisor/routing/__init__.py": '"""Subscriptions and routes."""\n',
    "agentd/supervisor/children/__init__.py": '"""The child processes."""\n',
}

#: Where references are rewritten (files and folders under the root).
REWRITE_ROOTS: tuple[str, ...] = (
    "agentd",
    "tests",
    "bench",
    "scripts",
    "docs",
    "deploy",
    "examples",
    "README.md",
    "pyproject.toml",
    "Containerfile",
    ".ci",
)
TEXT_SUFFIXES = frozenset(
    {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".txt", ".cfg", ".ini", ".sh", ".j2", ".tpl", ""}
)
SKIP_PARTS = frozenset({"__pycache__", ".git", "node_modules", ".venv", ".mypy_cache", ".ruff_cache"})
THIS_FILE = "scripts/relayout.py"
#: Lines the leftover check would flag that are right as they are.
KNOWN_GOOD = ("walk_packages(agentd.__path__, 'agentd.')",)


def mod_to_path(mod: str) -> str:
    return mod.replace(".", "/") + ".py"


def run(cmd: list[str], root: Path, dry: bool) -> None:
    if dry:
        print("would run:", " ".join(cmd))
        return
    subprocess.run(cmd, cwd=root, check=True)


def move(root: Path, dry: bool) -> tuple[dict[str, str], list[str]]:
    """Step 1: the moves. Returns the mapping entries in effect and the absent ones."""
    effective: dict[str, str] = {}
    absent: list[str] = []
    for pkg_init, text in NEW_PACKAGES.items():
        path = root / pkg_init
        if not path.exists():
            if dry:
                print("would create", pkg_init)
            else:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text)
                run(["git", "add", pkg_init], root, dry)
    for old, new in MAPPING.items():
        old_p, new_p = root / mod_to_path(old), root / mod_to_path(new)
        if old_p.exists() and new_p.exists():
            sys.exit(f"relayout: both {mod_to_path(old)} and {mod_to_path(new)} exist; resolve by hand")
        if old_p.exists():
            run(["git", "mv", mod_to_path(old), mod_to_path(new)], root, dry)
            effective[old] = new
        elif new_p.exists():
            effective[old] = new
        else:
            absent.append(old)
    return effective, absent


def files_to_rewrite(root: Path) -> list[Path]:
    out: list[Path] = []
    for name in REWRITE_ROOTS:
        base = root / name
        if base.is_file():
            out.append(base)
        elif base.is_dir():
            for p in sorted(base.rglob("*")):
                if not p.is_file() or SKIP_PARTS.intersection(p.parts):
                    continue
                if p.suffix not in TEXT_SUFFIXES:
                    continue
                if p.relative_to(root).as_posix() == THIS_FILE:
                    continue
                out.append(p)
    return out


_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_DOTTED = re.compile(rf"(?<![\w.]){re.escape('agentd')}(?:\.{_NAME})+")
_FROM_IMPORT = re.compile(
    rf"^(?P<indent>[ \t]*)from (?P<pkg>agentd(?:\.{_NAME})*) import "
    rf"(?:\((?P<paren>[^)]*)\)|(?P<plain>[^\n#(]+?))(?P<comment>[ \t]*#[^\n]*)?$",
    re.MULTILINE,
)


def rewrite_dotted(text: str, mapping: dict[str, str]) -> str:
    """``agentd.old.mod[.attr]`` -> ``agentd.new.mod[.attr]`` (longest old prefix wins)."""

    def sub(m: re.Match[str]) -> str:
        token = m.group(0)
        parts = token.split(".")
        for n in range(len(parts), 1, -1):
            prefix = ".".join(parts[:n])
            if prefix in mapping:
                return ".".join([mapping[prefix], *parts[n:]])
        return token

    return _DOTTED.sub(sub, text)


def rewrite_from_imports(text: str, mapping: dict[str, str]) -> str:
    """``from agentd[.pkg] import a, b as c`` where ``pkg.a`` moved -> one line per new parent."""

    def sub(m: re.Match[str]) -> str:
        pkg = m.group("pkg")
        body = m.group("paren") if m.group("paren") is not None else m.group("plain")
        items = [i.strip() for i in re.sub(r"#[^\n]*", "", body).replace("\n", " ").split(",")]
        items = [i for i in items if i]
        if not any(f"{pkg}.{i.split(' as ')[0].strip()}" in mapping for i in items):
            return m.group(0)
        groups: dict[str, list[str]] = {}
        for item in items:
            leaf = item.split(" as ")[0].strip()
            target = mapping.get(f"{pkg}.{leaf}")
            parent = target.rsplit(".", 1)[0] if target else pkg
            groups.setdefault(parent, []).append(item)
        indent, comment = m.group("indent"), (m.group("comment") or "")
        lines = [f"{indent}from {parent} import {', '.join(names)}" for parent, names in groups.items()]
        lines[0] += comment
        return "\n".join(lines)

    return _FROM_IMPORT.sub(sub, text)


def rewrite_paths(text: str, mapping: dict[str, str]) -> str:
    """``agentd/old/mod.py`` -> ``agentd/new/mod.py``."""
    for old, new in mapping.items():
        text = re.sub(rf"(?<![\w/.-]){re.escape(mod_to_path(old))}(?![\w])", mod_to_path(new), text)
    return text


def rewrite(root: Path, mapping: dict[str, str], dry: bool) -> list[Path]:
    changed: list[Path] = []
    for path in files_to_rewrite(root):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite_paths(rewrite_dotted(rewrite_from_imports(text, mapping), mapping), mapping)
        if new != text:
            changed.append(path)
            if dry:
                print("would rewrite", path.relative_to(root))
            else:
                path.write_text(new)
    return changed


def leftovers(root: Path, mapping: dict[str, str]) -> list[str]:
    """Lines that still name an old module or path (a form this script does not rewrite)."""
    olds = sorted(mapping, key=len, reverse=True)
    dotted = re.compile(r"(?<![\w.])(?:" + "|".join(re.escape(o) for o in olds) + r")(?![\w])")
    paths = re.compile(r"(?<![\w/.-])(?:" + "|".join(re.escape(mod_to_path(o)) for o in olds) + r")(?![\w])")
    dynamic = re.compile(r"""["']agentd\.["']|f["']agentd\.\{|["']agentd/["']\s*[+/]""")
    out: list[str] = []
    for path in files_to_rewrite(root):
        try:
            lines = path.read_text().splitlines()
        except UnicodeDecodeError:
            continue
        for no, line in enumerate(lines, 1):
            if any(good in line for good in KNOWN_GOOD):
                continue
            if dotted.search(line) or paths.search(line) or dynamic.search(line):
                out.append(f"{path.relative_to(root)}:{no}: {line.strip()}")
    return out


def unmapped(root: Path) -> list[str]:
    """Modules at the top of agentd/ and agentd/supervisor/ that the mapping does not place."""
    out: list[str] = []
    for folder in ("agentd", "agentd/supervisor"):
        for p in sorted((root / folder).glob("*.py")):
            mod = p.relative_to(root).with_suffix("").as_posix().replace("/", ".")
            if mod not in MAPPING and mod not in KEEP and mod not in MAPPING.values():
                out.append(mod)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    parser.add_argument("--no-format", action="store_true", help="do not run ruff on the changed files")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if not (root / "agentd" / "__init__.py").is_file():
        print(
            f"relayout: --root {str(root)!r} has no agentd/__init__.py; pass the repository's root",
            file=sys.stderr,
        )
        return 2
    mapping, absent = move(root, args.dry_run)
    changed = rewrite(root, mapping, args.dry_run)
    py = [str(p.relative_to(root)) for p in changed if p.suffix == ".py" and p.exists()]
    if py and not args.no_format and not args.dry_run:
        subprocess.run(["ruff", "check", "--quiet", "--select", "I", "--fix", *py], cwd=root, check=False)
        subprocess.run(["ruff", "format", "--quiet", *py], cwd=root, check=False)
    print(f"relayout: {len(mapping)} modules in place, {len(changed)} files rewritten")
    problems = 0
    if absent:
        print("mapping entries whose module does not exist (skipped):")
        for a in absent:
            print("  ", a)
    left = unmapped(root)
    if left:
        problems += len(left)
        print("modules the mapping does not place (add them to MAPPING or KEEP, then re-run):")
        for mod in left:
            print("  ", mod)
    if not args.dry_run:
        rest = leftovers(root, mapping)
        if rest:
            problems += len(rest)
            print("lines that still name an old module or path (rewrite by hand):")
            for line in rest:
                print("  ", line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

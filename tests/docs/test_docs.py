"""The README stays short and the docs stay connected (rfcs/0305).

* The README fits its budget and keeps what a newcomer needs from it: the
  install that works today, the two set-up commands, three quick starts.
* Every relative link in the README and docs/*.md points at a file that
  exists, and an anchor at a heading that exists.
* Every page in docs/ is listed on the docs index (docs/README.md).
* The extractor of the commands the docs show (tests/support/doccommands.py)
  finds what a reader would type and nothing else; the commands themselves
  run in tests/docs/test_docs_commands.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.support.doccommands import REPO, commands_in, doc_files, parse_line

README_BUDGET = 200
"""Lines: a README a newcomer reads to the end (issue 27). Everything else goes in docs/."""

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    in_fence = False
    anchors: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_fence = not in_fence
        elif not in_fence and line.startswith("#"):
            anchors.add(_slug(line.lstrip("#")))
    return anchors


def _links(path: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)
    text = re.sub(r"`[^`\n]*`", "", text)  # code spans hold no links
    return _LINK.findall(text)


def test_the_readme_fits_its_budget_and_keeps_what_a_newcomer_needs():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    lines = readme.count("\n")
    assert lines <= README_BUDGET, (
        f"README.md has {lines} lines, over its budget of {README_BUDGET}: move the detail to the "
        "page of docs/ for its task (docs/README.md lists them) and link it"
    )
    # The install works today: from a clone or the git URL; the index name only "once published".
    assert "pipx install ." in readme
    assert 'pipx install "git+$REPO"' in readme
    assert 'uvx --from "git+$REPO" agentd' in readme
    flat = " ".join(readme.split())
    for found in re.finditer(r"install agentd-supervisor", flat):
        before = flat[max(0, found.start() - 100) : found.start()]
        context = flat[max(0, found.start() - 100) : found.end()]
        assert "once" in before.lower(), f"the package-index name is not published yet: {context!r}"
        assert "published" in before, f"the package-index name is not published yet: {context!r}"
    # The two set-up commands, then the three quick starts.
    assert re.search(r"^scripts/demo\b", readme, re.MULTILINE)
    assert re.search(r"^scripts/test\b", readme, re.MULTILINE)
    quick = re.findall(r"^## Quick start \d: (.+)$", readme, re.MULTILINE)
    assert [q.split(",")[0].split(":")[0] for q in quick] == [
        "once",
        "a reactive daemon",
        "a CronJob on Kubernetes",
    ]


@pytest.mark.parametrize("path", doc_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_point_at_files_and_headings_that_exist(path: Path) -> None:
    broken = []
    for target in _links(path):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading with that anchor in {dest.relative_to(REPO)}")
    assert not broken, f"{path.relative_to(REPO)}: {broken}"


def test_every_page_in_docs_is_on_the_index():
    index = (REPO / "docs" / "README.md").read_text(encoding="utf-8")
    listed = {target.partition("#")[0] for target in _LINK.findall(index)}
    pages = {p.name for p in (REPO / "docs").glob("*.md")} - {"README.md"}
    missing = sorted(pages - listed)
    assert not missing, f"docs/README.md does not list {missing}: add a row under the task each page serves"


# --------------------------------------------------------------------------- the extractor


@pytest.mark.parametrize(
    ("line", "argv", "env"),
    [
        ("agentd --version", ("--version",), ()),
        (".venv/bin/agentd check --config x.toml", ("check", "--config", "x.toml"), ()),
        ("python -m agentd serve memo", ("serve", "memo"), ()),
        (
            "OPENAI_BASE_URL=http://localhost:11434/v1 agentd --model openai:llama3 hi",
            ("--model", "openai:llama3", "hi"),
            (("OPENAI_BASE_URL", "http://localhost:11434/v1"),),
        ),
        (
            "agentd --model script:h.json hi 2>&1 >/dev/null | head -1   # stderr piped",
            ("--model", "script:h.json", "hi"),
            (),
        ),
        (
            "agentd --mcp-stdio 'memo=agentd serve memo --file /tmp/n.json' \"two words\"",
            ("--mcp-stdio", "memo=agentd serve memo --file /tmp/n.json", "two words"),
            (),
        ),
        ("agentd check --config a.toml && echo ok", ("check", "--config", "a.toml"), ()),
    ],
)
def test_the_extractor_reads_a_command_as_the_shell_would(line, argv, env):
    command = parse_line("x.md:1", line)
    assert command is not None
    assert (command.argv, command.env) == (argv, env)


@pytest.mark.parametrize(
    "line",
    [
        "pipx install .",
        "uvx --from . agentd --version",
        "kubectl apply -k .",
        "echo agentd",
        "agentdx --help",
    ],
)
def test_the_extractor_leaves_other_commands_alone(line):
    assert parse_line("x.md:1", line) is None


def test_comments_carry_the_expected_exit_and_what_a_command_needs():
    bad = parse_line("x.md:1", "agentd check --config broken.toml   # exits 2: the setting and the fix")
    assert bad is not None
    assert (bad.exit_code, bad.needs) == (2, None)
    keyed = parse_line("x.md:1", "agentd --model bedrock:claude hi   # needs: AWS credentials")
    assert keyed is not None
    assert (keyed.exit_code, keyed.needs) == (0, "AWS credentials")
    quoted = parse_line("x.md:1", "agentd 'a # b'")
    assert quoted is not None
    assert (quoted.argv, quoted.needs) == (("a # b",), None)


def test_the_extractor_reads_shell_blocks_whole_and_text_blocks_by_prompt(tmp_path: Path) -> None:
    page = tmp_path / "docs" / "page.md"
    page.parent.mkdir()
    page.write_text(
        "Prose: agentd --not-a-command\n"
        "```sh\n"
        "agentd --mode reactive --config a.toml \\\n"
        "    --subscribe 'memo://notes'\n"
        "export X=1\n"
        "```\n"
        "```text\n"
        "$ agentd --version\n"
        "agentd 0.1.0\n"
        "```\n"
        "```toml\n"
        'command = "agentd"\n'
        "```\n"
    )
    found = commands_in(page, root=tmp_path)
    assert [(c.source, c.argv) for c in found] == [
        ("docs/page.md:3", ("--mode", "reactive", "--config", "a.toml", "--subscribe", "memo://notes")),
        ("docs/page.md:8", ("--version",)),
    ]


def test_install_hints_name_commands_that_work_before_a_release() -> None:
    """agentd's own messages never send a reader to the package index, where it is not yet."""
    from agentd.core.extras import install_hint

    for extra in ("bedrock", "vertex", "otel"):
        hint = install_hint(extra)
        assert f"pipx install --force '.[{extra}]'" in hint, hint
        assert " -m pip install '" in hint, f"the extra's requirements are read from the metadata: {hint}"
    offenders = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "agentd").rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"install '?agentd-supervisor\[", line)
    ]
    assert not offenders, f"install the extra through agentd.core.extras.install_hint instead: {offenders}"

"""Agent definitions (rfcs/0370): every source, their precedence, Claude Code's files and every warning pinned.

Each test runs with ``HOME`` and the working directory in its own ``tmp_path``:
no test reads the real ``~/.claude``.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest

from agentd import cli
from agentd.config import (
    DEFAULT_MAX_AGENTS,
    DEFAULT_MAX_CHILDREN,
    DEFAULT_MAX_DEPTH,
    AgentDefinition,
    ConfigErrors,
    Settings,
    agent_notes,
    agent_warnings,
    effective_config,
)
from agentd.config._agents import MAX_AGENT_FILE_BYTES, MAX_AGENT_FILES
from agentd.core.errors import ConfigError
from tests.support.settings import load


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``HOME`` is ``tmp_path/home``, the working directory ``tmp_path/project``; the files are read."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("AGENTD_CLAUDE_AGENTS", raising=False)  # the suite turns them off (conftest.py)
    (tmp_path / "home").mkdir()
    (tmp_path / "project").mkdir()
    monkeypatch.chdir(tmp_path / "project")
    return tmp_path / "home"


def _user_file(home: Path, name: str, text: str) -> Path:
    folder = home / ".claude" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def _project_file(name: str, text: str) -> Path:
    folder = Path.cwd() / ".claude" / "agents"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


def _one_warning(s: Settings, pattern: str) -> str:
    found = [w for w in agent_warnings(s) if re.search(pattern, w)]
    assert len(found) == 1, agent_warnings(s)
    return found[0]


REVIEWER = """\
---
name: reviewer
description: Reviews a diff
tools: memo__memo_get, read_resource, mcp__files__read_file, mcp__search
---

You review code.
"""


# -- agentd's own sources ---------------------------------------------------------------


def test_a_toml_table_is_a_definition(home: Path, tmp_path: Path) -> None:
    (tmp_path / "prompt.md").write_text("Review with care.")
    toml = """
[agents.reviewer]
description = "Reviews a diff"
system = "@prompt.md"
tools = ["memo__*", "read_resource"]
disallowed_tools = ["memo__memo_delete"]
max_steps = "30"
max_tokens = 200000
max_usd = "$1.50"
deadline = "5m"
"""
    s = load(tmp_path, toml=toml)
    assert s.agents == {
        "reviewer": AgentDefinition(
            name="reviewer",
            description="Reviews a diff",
            system="Review with care.",  # @FILE, relative to the config file's folder
            tools=("memo__*", "read_resource"),
            disallowed_tools=("memo__memo_delete",),
            max_steps=30,
            max_tokens=200000,
            max_usd=1.5,
            deadline=300.0,
            source=f"{tmp_path / 'agentd.toml'}: [agents.reviewer]",
        )
    }
    assert agent_warnings(s) == ()
    assert agent_notes(s) == ()


def test_agents_json_takes_claude_codes_shape(home: Path, tmp_path: Path) -> None:
    flag = {
        "reviewer": {
            "description": "Reviews a diff",
            "prompt": "@not a file: Claude Code's prompt is text",
            "tools": ["memo__*", "mcp__files__read_file"],
            "disallowedTools": ["memo__memo_delete"],
            "model": "inherit",
        },
        "scout": {"description": "Finds things", "system": "Be quick.", "max_steps": 5, "deadline": 90},
    }
    s = load(tmp_path, agents=json.dumps(flag))
    reviewer, scout = s.agents["reviewer"], s.agents["scout"]
    assert reviewer.system == "@not a file: Claude Code's prompt is text"
    assert reviewer.tools == ("memo__*", "files__read_file")
    assert reviewer.disallowed_tools == ("memo__memo_delete",)
    assert (reviewer.model, reviewer.source) == (None, "--agents")
    assert (scout.system, scout.max_steps, scout.deadline) == ("Be quick.", 5, 90.0)
    assert agent_warnings(s) == ()


def test_agentd_agents_is_the_same_json(home: Path, tmp_path: Path) -> None:
    env = {"AGENTD_AGENTS": json.dumps({"scout": {"description": "Finds things"}})}
    s = load(tmp_path, env=env)
    assert s.agents["scout"].source == "AGENTD_AGENTS"
    # Empty is unset, as for every AGENTD_ variable.
    assert load(tmp_path, env={"AGENTD_AGENTS": ""}).agents == {}


def test_precedence_is_flag_env_file_project_user_and_each_replacement_is_a_note(
    home: Path, tmp_path: Path
) -> None:
    for name in ("a", "b", "c", "d", "e"):
        _user_file(home, f"{name}.md", f"---\nname: {name}\ndescription: user {name}\n---\n")
    for name in ("a", "b", "c", "d"):
        _project_file(f"{name}.md", f"---\nname: {name}\ndescription: project {name}\n---\n")
    toml = "".join(f'[agents.{n}]\ndescription = "file {n}"\n' for n in ("a", "b", "c"))
    env = {"AGENTD_AGENTS": json.dumps({n: {"description": f"env {n}"} for n in ("a", "b")})}
    s = load(tmp_path, toml=toml, env=env, agents=json.dumps({"a": {"description": "flag a"}}))
    assert {n: d.description for n, d in s.agents.items()} == {
        "a": "flag a",
        "b": "env b",
        "c": "file c",
        "d": "project d",
        "e": "user e",
    }
    assert list(s.agents) == ["a", "b", "c", "d", "e"]
    config = tmp_path / "agentd.toml"
    assert agent_notes(s) == (
        "agent 'a': the definition in .claude/agents/a.md replaces the one in ~/.claude/agents/a.md",
        "agent 'b': the definition in .claude/agents/b.md replaces the one in ~/.claude/agents/b.md",
        "agent 'c': the definition in .claude/agents/c.md replaces the one in ~/.claude/agents/c.md",
        "agent 'd': the definition in .claude/agents/d.md replaces the one in ~/.claude/agents/d.md",
        f"agent 'a': the definition in {config}: [agents.a] replaces the one in .claude/agents/a.md",
        f"agent 'b': the definition in {config}: [agents.b] replaces the one in .claude/agents/b.md",
        f"agent 'c': the definition in {config}: [agents.c] replaces the one in .claude/agents/c.md",
        f"agent 'a': the definition in AGENTD_AGENTS replaces the one in {config}: [agents.a]",
        f"agent 'b': the definition in AGENTD_AGENTS replaces the one in {config}: [agents.b]",
        "agent 'a': the definition in --agents replaces the one in AGENTD_AGENTS",
    )


@pytest.mark.parametrize(
    ("toml", "env", "flags", "match"),
    [
        (
            '[agents.x]\ndescription = "d"\nmax_steps = 0\n',
            {},
            {},
            r"agentd.toml: agents.x.max_steps: 0 is not valid: must be a whole number ≥ 1$",
        ),
        (
            '[agents.x]\ndescription = "d"\ndisallowedTools = ["a__b"]\n',
            {},
            {},
            r"agentd.toml: agents.x.disallowedTools: \['a__b'\] is not valid: unknown setting; did you mean "
            r"'disallowed_tools'\? remove it or check the spelling \(known: description, system, tools,",
        ),
        (
            '[agents.x]\ndescription = "d"\nprompt = "p"\n',
            {},
            {},
            r"agentd.toml: agents.x.prompt: 'p' is not valid: unknown setting; did you mean 'system'\?",
        ),
        (
            '[agents.x]\ndescription = "d"\nmax_usd = 0\n',
            {},
            {},
            r"agentd.toml: agents.x.max_usd: 0 is not valid: must be an amount in US dollars above 0",
        ),
        (
            '[agents.x]\ndescription = "d"\ndeadline = "soon"\n',
            {},
            {},
            r"agentd.toml: agents.x.deadline: 'soon' is not valid:",
        ),
        (
            '[agents.x]\ndescription = "d"\nname = "y"\n',
            {},
            {},
            r"agentd.toml: agents.x.name: 'y' is not valid: the agent's name is its key \('x'\); remove it",
        ),
        (
            '[agents."bad name"]\ndescription = "d"\n',
            {},
            {},
            r"agentd.toml: agents.bad name: 'bad name' is not valid: an agent name is 1-64 letters",
        ),
        (
            '[agents.x]\nsystem = "s"\n',
            {},
            {},
            r"agentd.toml: agents.x.description: None is not valid: required: say when to use this agent",
        ),
        (
            '[agents.x]\ndescription = "  "\n',
            {},
            {},
            r"agentd.toml: agents.x.description: '  ' is not valid: say when to use this agent",
        ),
        (
            '[agents.x]\ndescription = "d"\ntools = "memo__*;x"\n',
            {},
            {},
            r"agentd.toml: agents.x.tools: \('memo__\*;x',\) is not valid: 'memo__\*;x' is not a tool glob",
        ),
        (
            'agents = "reviewer"\n',
            {},
            {},
            r"agentd.toml: agents: 'reviewer' is not valid: expected an object of agent definitions by name",
        ),
        (
            "",
            {},
            {"agents": '{"x": {"description": "d",}}'},
            r"^--agents: .* is not valid: not valid JSON \(.*\); write '\{\"reviewer\"",
        ),
        (
            "",
            {},
            {"agents": '["reviewer"]'},
            r"^--agents: \['reviewer'\] is not valid: expected an object of agent definitions by name",
        ),
        (
            "",
            {},
            {"agents": '{"x": "reviews"}'},
            r"^--agents.x: 'reviews' is not valid: a definition is a table/object",
        ),
        (
            "",
            {},
            {"agents": '{"x": {"description": "d"}, "x": {"description": "e"}}'},
            r"^--agents: 'x' is not valid: this key is given twice; keep one",
        ),
        (
            "",
            {},
            {"agents": '{"x": {"description": "d", "max_steps": "²"}}'},
            r"^--agents.x.max_steps: '²' is not valid: must be a whole number ≥ 1",
        ),
        (
            "",
            {},
            {"agents": '{"x": {"description": "d", "prompt": "p", "system": "s"}}'},
            r"^--agents.x.system: 's' is not valid: prompt and system say the same; give one",
        ),
        (
            "",
            {},
            {"agents": '{"x": {"description": "d", "descripton": "e"}}'},
            r"^--agents.x.descripton: 'e' is not valid: unknown setting",
        ),
        (
            "",
            {},
            {"agents": '{"x": {"description": "d", "tools": 3}}'},
            r"^--agents.x.tools: 3 is not valid: write tool names or globs as a list",
        ),
        (
            "",
            {"AGENTD_AGENTS": '{"x": {"description": "d", "max_tokens": -1}}'},
            {},
            r"^AGENTD_AGENTS \(agents.x.max_tokens\): -1 is not valid: must be a whole number ≥ 1",
        ),
    ],
)
def test_an_invalid_definition_in_agentds_own_config_is_exit_2_naming_the_setting(
    home: Path, tmp_path: Path, toml: str, env: dict[str, str], flags: dict[str, str], match: str
) -> None:
    with pytest.raises(ConfigError, match=match) as info:
        load(tmp_path, toml=toml or None, env=env, **flags)
    assert info.value.exit_code == 2


def test_several_problems_are_reported_together(home: Path, tmp_path: Path) -> None:
    toml = '[agents.x]\ndescription = "d"\nmax_steps = 0\nmax_tokens = "many"\n[agents.y]\ncolor = "red"\n'
    with pytest.raises(ConfigErrors) as info:
        load(tmp_path, toml=toml)
    assert [p.setting.split(": ")[-1] for p in info.value.problems] == [
        "agents.x.max_steps",
        "agents.x.max_tokens",
        "agents.y.color",
        "agents.y.description",
    ]


def test_a_model_is_checked_like_a_route_model(home: Path, tmp_path: Path) -> None:
    script = tmp_path / "model.json"  # written by load()
    s = load(tmp_path, agents=json.dumps({"x": {"description": "d", "model": f"script:{script}"}}))
    assert s.agents["x"].model == f"script:{script}"
    with pytest.raises(ConfigError, match=r"^--agents.x.model: 'gpt-4o' is not valid: write openai:MODEL"):
        load(tmp_path, agents=json.dumps({"x": {"description": "d", "model": "gpt-4o"}}))
    with pytest.raises(
        ConfigError, match=r"agentd.toml: agents.x.model: 'openai:gpt-4o' is not valid: .*OPENAI_API_KEY"
    ):
        load(tmp_path, toml='[agents.x]\ndescription = "d"\nmodel = "openai:gpt-4o"\n')
    s = load(
        tmp_path,
        toml='[agents.x]\ndescription = "d"\nmodel = "openai:gpt-4o"\n',
        env={"OPENAI_API_KEY": "sk-test"},
    )
    assert s.agents["x"].model == "openai:gpt-4o"


def test_claude_code_vocabulary_in_agentds_own_config_is_a_warning(home: Path, tmp_path: Path) -> None:
    flag = {
        "x": {
            "description": "d",
            "tools": ["Read", "Bash(git:*)", "memo__*"],
            "model": "opus",
            "permissionMode": "plan",
        }
    }
    s = load(tmp_path, agents=json.dumps(flag))
    assert s.agents["x"].tools == ("memo__*",)
    assert s.agents["x"].model is None
    assert agent_warnings(s) == (
        "--agents.x.tools: agentd has no tool named 'Read', 'Bash(git:*)' (Claude Code's built-in tools, "
        "such as Read and Bash, are not agentd's); dropped — agentd offers MCP tools as SERVER__TOOL "
        "(memo__memo_get, memo__*; Claude Code's mcp__SERVER__TOOL is read as SERVER__TOOL) and its own by "
        "name (read_resource, subscribe, …)",
        "--agents.x.model: 'opus' is a Claude Code alias agentd cannot resolve; the agent runs its parent's "
        "model — fix: name one as PROVIDER:MODEL, e.g. model: anthropic:claude-sonnet-4-5",
        "--agents.x.permissionMode: a Claude Code field agentd does not use; ignored",
    )


# -- Claude Code's files ----------------------------------------------------------------


def test_project_files_win_over_the_users(home: Path, tmp_path: Path) -> None:
    _user_file(home, "reviewer.md", REVIEWER)
    _project_file("reviewer.md", REVIEWER.replace("Reviews a diff", "Reviews this project's diffs"))
    _user_file(home, "other.md", "---\nname: other\ndescription: Another\n---\nBody.\n")
    s = load(tmp_path)
    assert s.agents["reviewer"].description == "Reviews this project's diffs"
    assert s.agents["reviewer"].source == ".claude/agents/reviewer.md"
    assert s.agents["other"].source == "~/.claude/agents/other.md"
    assert agent_notes(s) == (
        "agent 'reviewer': the definition in .claude/agents/reviewer.md replaces the one in "
        "~/.claude/agents/reviewer.md",
    )


def test_a_file_is_front_matter_and_a_body_and_mcp_names_are_agentds(home: Path, tmp_path: Path) -> None:
    _user_file(home, "reviewer.md", REVIEWER)
    _user_file(
        home,
        "listed.md",
        "---\nname: listed\ndescription: >\n  Folded\n  text\ntools:\n  - memo__*\n  - mcp__files\n"
        "disallowedTools: memo__memo_delete, mcp__files__write_file\nmodel: inherit\n---\n",
    )
    s = load(tmp_path)
    reviewer, listed = s.agents["reviewer"], s.agents["listed"]
    assert reviewer.system == "You review code."
    # mcp__SERVER__TOOL is SERVER__TOOL; mcp__SERVER is every tool of SERVER.
    assert reviewer.tools == ("memo__memo_get", "read_resource", "files__read_file", "search__*")
    assert (listed.description, listed.system, listed.model) == ("Folded text", None, None)
    assert listed.tools == ("memo__*", "files__*")
    assert listed.disallowed_tools == ("memo__memo_delete", "files__write_file")
    assert agent_warnings(s) == ()
    assert listed.offers("memo__memo_get")
    assert not listed.offers("memo__memo_delete")
    assert not listed.offers("search__query")
    assert AgentDefinition(name="all", description="d", source="x").offers("anything")


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "---\nname: r\ndescription: d\ntools: Read, Grep\n---\n",
            r"^~/.claude/agents/r.md: tools: agentd has no tool named 'Read', 'Grep' \(Claude Code's built-in "
            r"tools, such as Read and Bash, are not agentd's\); dropped — agentd offers MCP tools as "
            r"SERVER__TOOL .*; this agent is offered no tools until you list some$",
        ),
        (
            "---\nname: r\ndescription: d\ndisallowedTools: [Bash, memo_get]\n---\n",
            r"^~/.claude/agents/r.md: disallowedTools: agentd has no tool named 'Bash', 'memo_get' .*"
            r"\(read_resource, subscribe, …\)$",
        ),
        (
            "---\nname: r\ndescription: d\npermissionMode: acceptEdits\n---\n",
            r"^~/.claude/agents/r.md: permissionMode: a Claude Code field agentd does not use; ignored$",
        ),
        (
            "---\nname: r\ndescription: d\nhooks: {}\n---\n",
            r"^~/.claude/agents/r.md: hooks: a Claude Code field agentd does not use; ignored$",
        ),
        (
            "---\nname: r\ndescription: d\nfavourite: blue\n---\n",
            r"^~/.claude/agents/r.md: favourite: not a field agentd or Claude Code knows; ignored$",
        ),
        (
            "---\nname: r\ndescription: d\nmodel: haiku\n---\n",
            r"^~/.claude/agents/r.md: model: 'haiku' is a Claude Code alias agentd cannot resolve; the agent "
            r"runs its parent's model — fix: name one as PROVIDER:MODEL, e.g. model: anthropic:claude-sonnet-4-5$",
        ),
        (
            "---\nname: r\ndescription: d\nmodel: claude-opus-4-1\n---\n",
            r"^~/.claude/agents/r.md: model: 'claude-opus-4-1' cannot be used \(write openai:MODEL .*\); the "
            r"agent runs its parent's model — fix: name one as PROVIDER:MODEL",
        ),
        (
            "---\ndescription: d\n---\n",
            r"^~/.claude/agents/r.md: name: missing; the agent is named 'r' after the file — fix: add name: r$",
        ),
    ],
)
def test_what_agentd_cannot_use_of_a_file_is_named_in_a_warning(
    home: Path, tmp_path: Path, text: str, match: str
) -> None:
    _user_file(home, "r.md", text)
    s = load(tmp_path)
    assert "r" in s.agents  # the definition is used, without what agentd cannot use
    _one_warning(s, match)
    assert s.agents["r"].model is None


@pytest.mark.parametrize(
    ("text", "match"),
    [
        (
            "---\nname: [broken\n---\n",
            r"^~/.claude/agents/r.md: its front matter is not valid YAML \(expected ',' or '\]', but got "
            r"'<stream end>' at line 3, column 1\); the file is skipped$",
        ),
        (
            "---\n- a\n- b\n---\n",
            r"^~/.claude/agents/r.md: its front matter is a YAML list, not a mapping of name, description, …; "
            r"the file is skipped$",
        ),
        ("# Notes\nNo front matter here.\n", r"^~/.claude/agents/r.md: it does not start with a '---' line"),
        (
            "---\nname: r\ndescription: d\n",
            r"^~/.claude/agents/r.md: its front matter has no closing '---' line",
        ),
        (
            "---\nname: r\n---\nBody.\n",
            r"^~/.claude/agents/r.md: description: None is not valid: required: say when to use this agent "
            r".*; the file is skipped$",
        ),
        (
            "---\nname: Bad Name!\ndescription: d\n---\n",
            r"^~/.claude/agents/r.md: name: 'Bad Name!' is not valid: an agent name is 1-64 letters",
        ),
        (
            "---\nname: r\ndescription: [a, b]\n---\n",
            r"^~/.claude/agents/r.md: description: \['a', 'b'\] is not valid: expected text here; the file is skipped$",
        ),
        (
            "---\nname: r\ndescription: d\ntools: {a: b}\n---\n",
            r"^~/.claude/agents/r.md: tools: \{'a': 'b'\} is not valid: write tool names or globs as a list",
        ),
        (
            "---\nname: r\ncreated: 2024-13-45\ndescription: d\n---\n",
            r"^~/.claude/agents/r.md: its front matter is not valid YAML \(month must be in 1..12\)",
        ),
    ],
)
def test_a_broken_file_in_claudes_directories_is_skipped_with_a_warning(
    home: Path, tmp_path: Path, text: str, match: str
) -> None:
    _user_file(home, "r.md", text)
    _user_file(home, "good.md", "---\nname: good\ndescription: d\n---\n")
    s = load(tmp_path)  # never an error: the file was written for Claude Code
    assert list(s.agents) == ["good"]
    _one_warning(s, match)


def test_what_is_read_is_bounded(home: Path, tmp_path: Path) -> None:
    big = _user_file(home, "big.md", "---\nname: big\ndescription: d\n---\n" + "x" * MAX_AGENT_FILE_BYTES)
    (home / ".claude" / "agents" / "dir.md").mkdir()
    os.mkfifo(home / ".claude" / "agents" / "fifo.md")  # reading it would wait for a writer
    (home / ".claude" / "agents" / "link.md").symlink_to(home / ".claude" / "agents" / "real.txt")
    (home / ".claude" / "agents" / "real.txt").write_text("---\nname: linked\ndescription: d\n---\n")
    (home / ".claude" / "agents" / ".hidden.md").write_text("not read")
    (home / ".claude" / "agents" / "notes.txt").write_text("not read")
    s = load(tmp_path)
    assert list(s.agents) == ["linked"]  # a link to a regular file is read
    assert agent_warnings(s) == (
        f"~/.claude/agents/big.md: larger than {MAX_AGENT_FILE_BYTES} bytes, too large for an agent "
        "definition; the file is skipped",
        "~/.claude/agents/dir.md: it is a directory, not a regular file; the file is skipped",
        "~/.claude/agents/fifo.md: it is a FIFO (named pipe), not a regular file; the file is skipped",
    )
    assert big.stat().st_size > MAX_AGENT_FILE_BYTES


def test_at_most_so_many_files_of_a_directory_are_read(home: Path, tmp_path: Path) -> None:
    for i in range(MAX_AGENT_FILES + 2):
        _project_file(f"a{i:04d}.md", f"---\nname: a{i:04d}\ndescription: d\n---\n")
    s = load(tmp_path)
    assert len(s.agents) == MAX_AGENT_FILES
    assert f"a{MAX_AGENT_FILES - 1:04d}" in s.agents
    assert agent_warnings(s) == (
        f".claude/agents: {MAX_AGENT_FILES + 2} .md files; only the first {MAX_AGENT_FILES} by name are "
        "read — fix: move the others elsewhere",
    )


def test_one_name_twice_in_a_directory_keeps_the_first_file(home: Path, tmp_path: Path) -> None:
    _project_file("a.md", "---\nname: same\ndescription: first\n---\n")
    _project_file("b.md", "---\nname: same\ndescription: second\n---\n")
    s = load(tmp_path)
    assert s.agents["same"].description == "first"
    assert agent_warnings(s) == (
        ".claude/agents/b.md: agent 'same' is already defined by .claude/agents/a.md in the same "
        "directory; this file is skipped — fix: give each file its own name",
    )


def test_run_in_the_home_directory_the_files_are_read_once(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _user_file(home, "reviewer.md", REVIEWER)
    monkeypatch.chdir(home)
    s = load(tmp_path)
    assert s.agents["reviewer"].source == "~/.claude/agents/reviewer.md"
    assert agent_notes(s) == ()


@pytest.mark.parametrize(
    ("toml", "env", "flags"),
    [
        ("claude_agents = false\n", {}, {}),
        (None, {"AGENTD_CLAUDE_AGENTS": "false"}, {}),
        ("claude_agents = true\n", {"AGENTD_CLAUDE_AGENTS": "true"}, {"claude_agents": False}),
    ],
)
def test_claude_agents_false_reads_no_file(
    home: Path, tmp_path: Path, toml: str | None, env: dict[str, str], flags: dict[str, object]
) -> None:
    _user_file(home, "reviewer.md", "---\nname: [broken\n---\n")
    _project_file("reviewer.md", REVIEWER)
    s = load(tmp_path, toml=toml, env=env, **flags)
    assert (s.claude_agents, s.agents, agent_warnings(s)) == (False, {}, ())


# -- the caps ---------------------------------------------------------------------------


def test_the_caps_default_and_go_through_the_layers(home: Path, tmp_path: Path) -> None:
    s = load(tmp_path)
    assert (s.max_depth, s.max_children, s.max_agents) == (2, 8, 64)
    assert (DEFAULT_MAX_DEPTH, DEFAULT_MAX_CHILDREN, DEFAULT_MAX_AGENTS) == (2, 8, 64)
    s = load(tmp_path, toml="max_depth = 1\nmax_children = 3\nmax_agents = 10\n")
    assert (s.max_depth, s.max_children, s.max_agents) == (1, 3, 10)
    s = load(
        tmp_path,
        toml="max_depth = 1\n",
        env={"AGENTD_MAX_DEPTH": "3", "AGENTD_MAX_CHILDREN": "4", "AGENTD_MAX_AGENTS": "5"},
        max_agents="6",
    )
    assert (s.max_depth, s.max_children, s.max_agents) == (3, 4, 6)
    assert load(tmp_path, max_depth="0").max_depth == 0  # no agent starts agents


@pytest.mark.parametrize(
    ("flags", "match"),
    [
        (
            {"max_depth": "²"},
            r"^--max-depth: '²' is not valid: give a whole number ≥ 0 \(default 2; 0: no agent",
        ),
        ({"max_depth": "-1"}, r"^--max-depth: '-1' is not valid: give a whole number ≥ 0"),
        ({"max_depth": "1.5"}, r"^--max-depth: '1.5' is not valid: give a whole number ≥ 0"),
        (
            {"max_children": "0"},
            r"^--max-children: '0' is not valid: give a whole number of children one agent may have running, "
            r"1 or more \(default 8\); past it a model's agent_start is refused with a tool error$",
        ),
        ({"max_children": "²"}, r"^--max-children: '²' is not valid: give a whole number of children"),
        (
            {"max_agents": "0"},
            r"^--max-agents: '0' is not valid: give a whole number of agents started by agents, in all, "
            r"1 or more \(default 64\)",
        ),
        ({"max_agents": "-3"}, r"^--max-agents: '-3' is not valid: give a whole number of agents"),
        ({"max_agents": True}, r"^--max-agents: True is not valid: give a whole number of agents"),
    ],
)
def test_the_caps_refuse_what_is_not_a_count(
    home: Path, tmp_path: Path, flags: dict[str, object], match: str
) -> None:
    with pytest.raises(ConfigError, match=match):
        load(tmp_path, **flags)


def test_the_caps_are_spelled_as_the_environment_wrote_them(home: Path, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"^AGENTD_MAX_DEPTH: '２' is not valid: give a whole number ≥ 0"):
        load(tmp_path, env={"AGENTD_MAX_DEPTH": "２"})  # a full-width digit is no number either
    with pytest.raises(ConfigError, match=r"agentd.toml: max_children: 0 is not valid"):
        load(tmp_path, toml="max_children = 0\n")


# -- what agentd check shows ------------------------------------------------------------


def test_effective_config_lists_the_definitions_small(home: Path, tmp_path: Path) -> None:
    long = "Use it for reviews. " * 40
    _user_file(
        home, "reviewer.md", f"---\nname: reviewer\ndescription: {long}\ntools: memo__*\n---\nSecret sauce.\n"
    )
    shown = effective_config(load(tmp_path), env={})
    assert shown["agents"] == {
        "reviewer": {
            "source": "~/.claude/agents/reviewer.md",
            "description": long.strip()[:199] + "…",
            "model": None,
            "tools": ["memo__*"],
            "disallowed_tools": [],
        }
    }
    assert "Secret sauce." not in json.dumps(shown)  # the prompt is not printed


def test_agentd_check_prints_the_warnings_and_notes(
    home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _user_file(home, "reviewer.md", "---\nname: reviewer\ndescription: d\ncolor: red\n---\n")
    _project_file("reviewer.md", "---\nname: reviewer\ndescription: e\n---\n")
    assert cli.main(["check", "--agents", '{"scout": {"description": "finds"}}']) == 0
    out, err = capsys.readouterr()
    assert (
        "agentd: warning: ~/.claude/agents/reviewer.md: color: a Claude Code field agentd does not use; ignored\n"
        in err
    )
    assert (
        "agentd: note: agent 'reviewer': the definition in .claude/agents/reviewer.md replaces the one in "
        "~/.claude/agents/reviewer.md\n" in err
    )
    assert sorted(json.loads(out)["agents"]) == ["reviewer", "scout"]
    assert cli.main(["check", "--no-claude-agents", "--agents", "{"]) == 2
    assert "agentd: error: --agents: '{' is not valid: not valid JSON" in capsys.readouterr().err

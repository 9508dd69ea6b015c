"""agentd installed the way users install it: ``pipx install .``, ``uv tool install .``, ``uvx --from .``,
and from the git URL without a clone (``pipx install "git+…"``, ``uvx --from "git+…" agentd``).

Each install runs in a fresh environment (a new HOME, empty caches and tool
directories, PATH without the project's venv) from a clean copy of the
source, with pipx and uv installed from the package index into a throwaway
venv; the dependencies come from the package index, as for a user. The
installed command is then used as the README's quick start uses it: a
version, a check, and a run with an OpenAI-compatible provider (the loopback
fake) and an ``mcpServers`` file whose server is started by name from PATH.
Slow (a fresh install resolves every dependency); CI runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

import agentd
from tests.fakes.provider_server import openai_reply, provider_server_thread
from tests.support.tools import copy_source, fresh_env, install_tools, uv_version

INSTALL_TIMEOUT_S = 600
"""A cold install downloads every dependency (a few seconds here); the bound
only stops a hung download."""

pytestmark = [
    pytest.mark.slow,
    # A test's fixture installs pipx and uv, the test installs agentd: two
    # installs, minutes on a busy machine (setup 51 s + call 69 s at load 5
    # overran the suite's 120 s). A hang is still caught, by this bound.
    pytest.mark.timeout(2 * INSTALL_TIMEOUT_S),
]
RUN_TIMEOUT_S = 60
"""One run of the installed command; the bound only stops a hang."""

VERSION_LINE = f"agentd {agentd.__version__}"


@dataclass
class Fresh:
    root: Path
    source: Path
    tools: Path
    git_url: str
    """``git+file://…`` of a git repository holding the same source: the README's
    install without a clone (``pipx install "git+$REPO"``), minus the network."""


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Fresh:
    root = tmp_path_factory.mktemp("fresh")
    tools = install_tools(root / "tools", "pipx", f"uv=={uv_version()}")
    repo = copy_source(root / "agentd.git")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", "-C", str(repo)]
    for step in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "agentd"]):
        _run([*git, *step], {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}, root)
    return Fresh(
        root=root, source=copy_source(root / "agentd-clone"), tools=tools, git_url=f"git+{repo.as_uri()}"
    )


def _run(cmd: list[str], env: dict[str, str], cwd: Path, timeout: float = RUN_TIMEOUT_S) -> str:
    result = subprocess.run(cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{cmd}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    return result.stdout


def _quick_start(agentd_bin: Path, env: dict[str, str], work: Path) -> None:
    """What the README's quick start does with only the command and an API key (and an mcpServers file)."""
    assert _run([str(agentd_bin), "--version"], env, work).strip() == VERSION_LINE
    keyed = {**env, "OPENAI_API_KEY": "sk-test-install"}
    checked = json.loads(
        _run([str(agentd_bin), "check", "--model", "openai:gpt-4.1-mini", "hi"], keyed, work)
    )
    assert checked["agentd_version"] == agentd.__version__

    notes = work / "notes.json"
    # An mcpServers file as Claude Desktop users have it; "agentd" is found on PATH.
    (work / "mcp.json").write_text(
        json.dumps(
            {"mcpServers": {"memo": {"command": "agentd", "args": ["serve", "memo", "--file", str(notes)]}}}
        )
    )
    replies = [
        openai_reply(tool_calls=[("c1", "memo__memo_set", '{"key": "greeting", "value": "hello"}')]),
        openai_reply("Saved the greeting."),
    ]
    with provider_server_thread(replies) as provider:
        out = _run(
            [
                str(agentd_bin),
                "--model",
                "openai:gpt-4.1-mini",
                "--mcp-config",
                "mcp.json",
                "save a greeting",
            ],
            {**keyed, "OPENAI_BASE_URL": provider.url("/v1")},
            work,
        )
        assert out.strip() == "Saved the greeting."
        first = provider.requests[0].json
        assert first["model"] == "gpt-4.1-mini"
        assert "memo__memo_set" in [t["function"]["name"] for t in first["tools"]]
        assert provider.requests[0].headers["authorization"] == "Bearer sk-test-install"
    assert json.loads(notes.read_text())["greeting"] == "hello"


def _imports_everything(python: Path, env: dict[str, str], cwd: Path) -> None:
    """Every module of the installed package imports with only the declared dependencies."""
    code = (
        "import importlib, pkgutil, agentd\n"
        "assert agentd.__file__.startswith(__import__('sys').prefix), agentd.__file__\n"
        "for m in pkgutil.walk_packages(agentd.__path__, 'agentd.'):\n"
        "    if not m.name.endswith('__main__'):\n"
        "        importlib.import_module(m.name)\n"
    )
    _run([str(python), "-c", code], env, cwd)


def test_pipx_install(fresh: Fresh, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    env = fresh_env(tmp_path, [bin_dir, fresh.tools])
    env.update(
        PIPX_HOME=str(tmp_path / "pipx"), PIPX_BIN_DIR=str(bin_dir), PIPX_MAN_DIR=str(tmp_path / "man")
    )
    _run([str(fresh.tools / "pipx"), "install", str(fresh.source)], env, tmp_path, INSTALL_TIMEOUT_S)
    listed = json.loads(_run([str(fresh.tools / "pipx"), "list", "--json"], env, tmp_path))
    assert list(listed["venvs"]) == ["agentd-supervisor"]
    work = tmp_path / "work"
    work.mkdir()
    _imports_everything(tmp_path / "pipx" / "venvs" / "agentd-supervisor" / "bin" / "python", env, work)
    _quick_start(bin_dir / "agentd", env, work)
    # Without a clone: `pipx install "git+$REPO"` (the dependencies now come from pip's cache).
    _run([str(fresh.tools / "pipx"), "uninstall", "agentd-supervisor"], env, tmp_path)
    _run([str(fresh.tools / "pipx"), "install", fresh.git_url], env, tmp_path, INSTALL_TIMEOUT_S)
    assert _run([str(bin_dir / "agentd"), "--version"], env, work).strip() == VERSION_LINE


def test_uv_tool_install(fresh: Fresh, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    env = fresh_env(tmp_path, [bin_dir, fresh.tools])
    env.update(UV_TOOL_DIR=str(tmp_path / "uv-tools"), UV_TOOL_BIN_DIR=str(bin_dir))
    _run([str(fresh.tools / "uv"), "tool", "install", str(fresh.source)], env, tmp_path, INSTALL_TIMEOUT_S)
    assert "agentd-supervisor v" + agentd.__version__ in _run(
        [str(fresh.tools / "uv"), "tool", "list"], env, tmp_path
    )
    work = tmp_path / "work"
    work.mkdir()
    _imports_everything(tmp_path / "uv-tools" / "agentd-supervisor" / "bin" / "python", env, work)
    _quick_start(bin_dir / "agentd", env, work)


def test_uvx_from_a_clone(fresh: Fresh, tmp_path: Path) -> None:
    env = fresh_env(tmp_path, [fresh.tools])
    # The clone is the working directory, as in `cd agentd && uvx --from . agentd --version`.
    out = _run(
        [str(fresh.tools / "uvx"), "--from", ".", "agentd", "--version"], env, fresh.source, INSTALL_TIMEOUT_S
    )
    assert out.strip() == VERSION_LINE
    # Without a clone: `uvx --from "git+$REPO" agentd` (the dependencies now come from uv's cache).
    out = _run(
        [str(fresh.tools / "uvx"), "--from", fresh.git_url, "agentd", "--version"],
        env,
        fresh.root,
        INSTALL_TIMEOUT_S,
    )
    assert out.strip() == VERSION_LINE

"""Servers started before agentd's imports (agentd.core.prelaunch), and the command's fast exit."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from mcp.client import stdio as sdk_stdio

from agentd.core.prelaunch import (
    INHERITED_ENV_VARS,
    PASSED_ENV,
    SERVER_PREFORK_ENV,
    forkable,
    launch,
    server_environment,
)


def test_a_prelaunched_server_gets_the_environment_the_sdk_would_give_it() -> None:
    # The list is the MCP SDK's (POSIX): this fails when the SDK changes it.
    assert list(INHERITED_ENV_VARS) == list(sdk_stdio.DEFAULT_INHERITED_ENV_VARS)
    inherited = {k: v for k, v in server_environment({"X": "1"}).items() if k not in PASSED_ENV}
    assert inherited == sdk_stdio.get_default_environment() | {"X": "1"}
    assert "SHELL" not in server_environment(None, {"SHELL": "() { :; }", "HOME": "/h"})


def test_a_command_that_cannot_start_is_left_to_the_transport_to_report() -> None:
    assert launch("/nonexistent/agentd-test-server", [], env=None, cwd=None) is None


async def test_an_adopted_process_has_trio_streams_and_any_number_of_waiters() -> None:
    early = launch(
        sys.executable, ["-c", "import sys; sys.stdout.write(sys.stdin.read().upper())"], env=None, cwd=None
    )
    assert early is not None
    assert early.matches(sys.executable, ["-c", "import sys; sys.stdout.write(sys.stdin.read().upper())"])
    assert not early.matches(sys.executable, [])
    proc = early.adopt()
    await proc.stdin.send_all(b"hello")
    await proc.stdin.aclose()
    out = b""
    while chunk := await proc.stdout.receive_some(1024):
        out += chunk
    codes: list[int] = []

    async def waiter() -> None:
        codes.append(await proc.wait())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        nursery.start_soon(waiter)
    assert out == b"HELLO"
    assert codes == [0, 0]
    assert proc.returncode == 0
    early.discard()  # adopted: nothing to do


def test_a_process_never_adopted_is_killed_with_its_group() -> None:
    early = launch(sys.executable, ["-c", "import time; time.sleep(60)"], env=None, cwd=None)
    assert early is not None
    early.discard()
    assert early._popen.returncode is not None  # reaped
    early.discard()  # twice is harmless


def test_exit_process_runs_atexit_handlers_flushes_and_keeps_the_code() -> None:
    code = (
        "import atexit, sys\n"
        "from agentd.cli import exit_process\n"
        "atexit.register(lambda: print('atexit ran'))\n"
        "print('buffered', end=' ')\n"
        "sys.stderr.write('err')\n"
        "exit_process(3)\n"
        "print('not reached')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 3
    assert done.stdout == "buffered atexit ran\n"
    assert done.stderr == "err"


def test_the_command_exits_with_its_code() -> None:
    env = {**os.environ, "AGENTD_MODE": "bogus"}
    done = subprocess.run(
        [sys.executable, "-m", "agentd", "x"], capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode == 2
    assert "AGENTD_MODE" in done.stderr or "mode" in done.stderr


@pytest.mark.parametrize(
    ("command", "args", "env", "expected"),
    [
        (sys.executable, ["-m", "agentd", "serve", "memo", "--file", "x.json"], None, True),
        (sys.executable, ["-m", "agentd.servers", "inbox", "--agent", "a"], {"TOKEN": "t"}, True),
        # Another interpreter (another venv, another version) is not this one.
        ("python3", ["-m", "agentd", "serve", "memo"], None, False),
        ("agentd", ["serve", "memo"], None, False),  # the settings turn this into the first row
        # agentd itself, not one of its servers.
        (sys.executable, ["-m", "agentd", "--mode", "once"], None, False),
        (sys.executable, ["-m", "agentd"], None, False),
        (sys.executable, ["-m", "agentd.serversx", "memo"], None, False),
        (sys.executable, ["-c", "import agentd", "serve"], None, False),
        # PYTHON* variables act when an interpreter starts: only an exec honours them.
        (sys.executable, ["-m", "agentd", "serve", "memo"], {"PYTHONPATH": "/x"}, False),
        # A server on a network port holds nothing of the supervisor's (decision 21): exec'd.
        (sys.executable, ["-m", "agentd", "serve", "webhook", "--source", "g=github"], None, False),
        (sys.executable, ["-m", "agentd.servers", "webhook"], None, False),
        (sys.executable, ["-m", "agentd", "serve", "memo", "--http", "127.0.0.1:0"], None, False),
        (sys.executable, ["-m", "agentd", "serve", "memo", "--http=127.0.0.1:0"], None, False),
        (sys.executable, ["-m", "agentd", "serve", "memo", "--file", "--http"], None, False),
        (sys.executable, ["-m", "agentd", "serve", "memo", "--file", "webhook"], None, True),
    ],
)
def test_only_agentds_own_servers_on_this_interpreter_are_forked(
    command: str, args: list[str], env: dict[str, str] | None, expected: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(SERVER_PREFORK_ENV, raising=False)
    assert forkable(command, args, env, None) is expected


def test_a_missing_working_directory_or_the_switch_leaves_the_server_to_exec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["-m", "agentd", "serve", "memo"]
    monkeypatch.delenv(SERVER_PREFORK_ENV, raising=False)
    assert forkable(sys.executable, args, None, str(tmp_path))
    # The exec'd start reports a missing folder with its usual message.
    assert not forkable(sys.executable, args, None, str(tmp_path / "missing"))
    monkeypatch.setenv(SERVER_PREFORK_ENV, "0")
    assert not forkable(sys.executable, args, None, None)

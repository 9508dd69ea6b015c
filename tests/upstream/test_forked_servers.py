"""agentd's own stdio servers are forked from the supervisor, not exec'd (rfcs/0366).

Through the real ``agentd`` command in reactive mode with the bundled memo
server (``python -m agentd serve memo``, what ``command = "agentd"``
becomes): the connection says ``process: forked``; the server is the
supervisor's child in a session of its own, in its configured working
directory, with the command line an exec'd server would show and the
environment an exec'd server would get (none of the supervisor's
credentials, in ``os.environ`` or in ``/proc/PID/environ``), holding none of
the supervisor's descriptors; it serves the route's changes; SIGKILLed, it is
reaped and started again by exec, and the next change is served. A server
whose ``env`` sets a ``PYTHON*`` variable, or a run with
``AGENTD_SERVER_PREFORK=0``, gets an exec'd server as before. A supervisor
SIGKILLed while its forked server runs leaves nothing behind
(``tests/children/test_zygote_fork.py`` kills one at its first line too).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import psutil
import pytest
import trio

from agentd.core.exitcodes import ExitCode
from agentd.core.prelaunch import INHERITED_ENV_VARS, PASSED_ENV
from tests.support.agentd_proc import Agentd, run_agentd, script
from tests.support.leftovers import EXIT_BOUND, TAG, leftover_processes, tagged_env, wait_gone
from tests.support.memo import memo_toml
from tests.support.routing import FAST_BACKOFF, memo_change_handled

pytestmark = pytest.mark.process

#: In the supervisor's environment only: a forked server must not show it anywhere.
SECRET = "sk-forked-server-must-not-see-this"


def config(tmp_path: Path, server: str = "") -> tuple[list[str], Path]:
    model = script(tmp_path, [{"text": "handled"}])
    path, memo = memo_toml(tmp_path, model, server=server)
    (tmp_path / "state").mkdir(mode=0o700)
    return [
        "--config",
        str(path),
        "--state-dir",
        str(tmp_path / "state"),
        "--health-addr",
        "127.0.0.1:0",
    ], memo


def the_server(a: Agentd, memo: Path) -> psutil.Process:
    """The live memo server under agentd (its command line names the memo file)."""
    for child in psutil.Process(a.proc.pid).children():
        if str(memo) in child.cmdline() and child.status() != psutil.STATUS_ZOMBIE:
            return child
    raise AssertionError(f"no memo server under agentd: {a.tail()}")


async def test_agentds_own_server_is_forked_looks_execd_and_holds_nothing_of_the_supervisor(
    tmp_path: Path,
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    args, memo = config(tmp_path, server=f"cwd = {json.dumps(str(work))}")
    env = tagged_env(tmp_path, OPENAI_API_KEY=SECRET, **FAST_BACKOFF)
    async with run_agentd(args, env=env) as a:
        connected = await a.wait_event("upstream.connected")
        await a.wait_event("ready.changed", lambda e: e["ready"])
        assert connected["process"] == "forked", connected
        server = the_server(a, memo)
        assert server.ppid() == a.proc.pid
        # The command line an exec'd server shows (ps, pkill -f), its session, its folder.
        shown = [part for part in server.cmdline() if part]
        assert shown[1:] == ["-m", "agentd", "serve", "memo", "--file", str(memo)], shown
        assert os.getsid(server.pid) == server.pid
        assert server.cwd() == str(work)
        # The environment an exec'd server gets: none of the supervisor's, in either view.
        assert set(server.environ()) <= {*INHERITED_ENV_VARS, *PASSED_ENV}, server.environ()
        block = await trio.Path(f"/proc/{server.pid}/environ").read_bytes()
        assert SECRET.encode() not in block
        assert TAG.encode() not in block
        # None of the supervisor's descriptors: the state lock, the health port, the zygote's socket.
        held = [os.readlink(f"/proc/{server.pid}/fd/{fd}") for fd in os.listdir(f"/proc/{server.pid}/fd")]
        assert not [t for t in held if t.startswith(str(tmp_path / "state"))], held
        assert not server.net_connections(kind="inet")
        # It serves: a change of its resource reaches an agent.
        await memo_change_handled(a, memo, "first")

        # SIGKILLed: reaped, started again (by exec this time), and the next change is served.
        server.kill()
        again = await a.wait_event("upstream.connected", count=2)
        assert again["process"] == "exec", again
        assert not wait_gone([server.pid], EXIT_BOUND)  # reaped: not a zombie left in the table
        await memo_change_handled(a, memo, "second")
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == ExitCode.OK, a.tail()
    assert not leftover_processes(str(tmp_path))


@pytest.mark.parametrize("why", ["python_env", "switched_off"])
async def test_a_server_with_python_settings_or_with_the_fork_off_is_execd(tmp_path: Path, why: str) -> None:
    extra = 'env = { PYTHONDONTWRITEBYTECODE = "1" }' if why == "python_env" else ""
    args, memo = config(tmp_path, server=extra)
    env = tagged_env(tmp_path, **({"AGENTD_SERVER_PREFORK": "0"} if why == "switched_off" else {}))
    async with run_agentd(args, env=env) as a:
        connected = await a.wait_event("upstream.connected")
        await a.wait_event("ready.changed", lambda e: e["ready"])
        assert connected["process"] == "early", connected  # launched before agentd's imports, as before
        server = the_server(a, memo)
        assert server.cmdline()[1:5] == ["-m", "agentd", "serve", "memo"]
        if why == "python_env":
            assert server.environ()["PYTHONDONTWRITEBYTECODE"] == "1"
        await memo_change_handled(a, memo, "first")
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == ExitCode.OK, a.tail()


async def test_a_supervisor_sigkilled_leaves_no_forked_server_behind(tmp_path: Path) -> None:
    args, memo = config(tmp_path)
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        connected = await a.wait_event("upstream.connected")
        assert connected["process"] == "forked"
        server = the_server(a, memo)
        a.signal(signal.SIGKILL)
        assert await a.wait_exit() == -signal.SIGKILL
    # Its stdin's EOF ends it, as it ends an exec'd server.
    assert not wait_gone([server.pid], EXIT_BOUND)
    assert not leftover_processes(str(tmp_path))

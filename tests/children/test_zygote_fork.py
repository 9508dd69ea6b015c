"""The first zygote is forked from the supervisor before trio starts (rfcs/0365).

Through the real ``agentd`` command in reactive mode (the bundled memo
server, a spawn route): the zygote says ``forked``, names itself, keeps
nothing of the supervisor's but its control socket and stdio (no server
pipe, no listening socket, no lock), lives in a session of its own, keeps
its environment readable, and forks the agents; with the fork switched off
(``AGENTD_ZYGOTE_PREFORK=0``) it is a fresh interpreter as before; a
supervisor SIGKILLed at once (the zygote still warming up) or later leaves no
process behind. A replacement zygote is a fresh interpreter:
``tests/children/test_spawn_faults.py`` kills and stops the forked one.
"""

from __future__ import annotations

import os
import signal
import stat
from pathlib import Path

import psutil
import pytest

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import run_agentd, script
from tests.support.files import edit
from tests.support.leftovers import EXIT_BOUND, TAG, leftover_processes, tagged_env, wait_gone
from tests.support.routing import memo_change_handled, memo_server

pytestmark = pytest.mark.process


def args(tmp_path: Path, memo: Path) -> list[str]:
    model = script(tmp_path, [{"text": "handled {instruction}"}])
    return [
        "--mode", "reactive", "--model", model, "--mcp-stdio", memo_server(memo),
        "--subscribe", "memo:memo://notes", "--route", "memo://notes=spawn:1",
        "--health-addr", "127.0.0.1:0", "--state-dir", str(tmp_path / "state"), "react",
    ]  # fmt: skip


@pytest.fixture
def memo(tmp_path: Path) -> Path:
    path = tmp_path / "notes.json"
    edit(path, {"todo": "milk"})
    (tmp_path / "state").mkdir(mode=0o700)
    return path


def descriptors(pid: int) -> dict[int, str]:
    """The open descriptors of ``pid``: what each points at (``socket:[…]``, ``pipe:[…]``, a path)."""
    out = {}
    for name in os.listdir(f"/proc/{pid}/fd"):
        try:
            out[int(name)] = os.readlink(f"/proc/{pid}/fd/{name}")
        except FileNotFoundError:
            continue
    return out


def inodes(pid: int, kind: str) -> set[str]:
    return {target for target in descriptors(pid).values() if target.startswith(kind)}


async def test_the_first_zygote_is_forked_named_and_holds_nothing_of_the_supervisor(
    tmp_path: Path, memo: Path
) -> None:
    async with run_agentd(args(tmp_path, memo), env=tagged_env(tmp_path)) as a:
        ready = await a.wait_event("zygote.ready")
        await a.wait_event("ready.changed", lambda e: e["ready"])
        assert ready["forked"] is True
        assert ready["replaced"] is False
        zygote = psutil.Process(ready["pid"])
        assert zygote.ppid() == a.proc.pid
        assert (
            os.getsid(zygote.pid) == zygote.pid
        )  # a session of its own: a terminal's Ctrl-C is the supervisor's
        title = " ".join(zygote.cmdline()).strip()
        assert title == f"agentd.agent.zygote (forked from agentd pid {a.proc.pid})"
        assert "notes.json" not in title  # not the supervisor's command line (pkill -f would match it)
        assert zygote.name() == "agentd-zygote"
        # Its environment is intact (tests and operators find agentd's processes by it).
        assert zygote.environ()[TAG] == str(tmp_path)
        # Nothing the supervisor holds: the memo server's pipes, the health port, the state lock.
        fds = descriptors(zygote.pid)
        supervisor_pipes = inodes(a.proc.pid, "pipe:")
        server = next(p for p in psutil.Process(a.proc.pid).children() if "memo" in " ".join(p.cmdline()))
        assert not inodes(server.pid, "pipe:") & set(fds.values())
        assert not zygote.net_connections(kind="inet")
        assert not [t for t in fds.values() if t.startswith(str(tmp_path))], fds
        # stdin and stdout are agentd's (as a fresh zygote's would be); stderr is a pipe the supervisor reads.
        assert stat.S_ISFIFO(os.stat(f"/proc/{zygote.pid}/fd/2").st_mode)
        assert fds[2] in supervisor_pipes
        # Agents fork from it.
        first = await memo_change_handled(a, memo, "first")
        assert first["zygote"] is True
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == ExitCode.OK, a.tail()
    assert not wait_gone([zygote.pid], EXIT_BOUND)
    assert "handled" in a.out


async def test_with_the_fork_switched_off_the_zygote_is_a_fresh_interpreter(
    tmp_path: Path, memo: Path
) -> None:
    env = tagged_env(tmp_path, AGENTD_ZYGOTE_PREFORK="0")
    async with run_agentd(args(tmp_path, memo), env=env) as a:
        ready = await a.wait_event("zygote.ready")
        assert ready["forked"] is False
        cmdline = psutil.Process(ready["pid"]).cmdline()
        assert cmdline[1:4] == ["-P", "-m", "agentd.agent.zygote"]
        assert (await memo_change_handled(a, memo, "first"))["zygote"] is True
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == ExitCode.OK, a.tail()


@pytest.mark.parametrize("when", ["supervisor.start", "zygote.ready"])
async def test_a_supervisor_sigkilled_leaves_no_zygote_spare_or_server_behind(
    tmp_path: Path, memo: Path, when: str
) -> None:
    """``supervisor.start`` is the first telemetry line: the zygote was forked just before and is
    still warming up (or about to fork its spare); ``zygote.ready``: it serves, a spare waits."""
    async with run_agentd(args(tmp_path, memo), env=tagged_env(tmp_path)) as a:
        await a.wait_event(when)
        tree = [p.pid for p in psutil.Process(a.proc.pid).children(recursive=True)]
        a.signal(signal.SIGKILL)
        assert await a.wait_exit() == -signal.SIGKILL
    assert tree  # the zygote at least (forked before the first telemetry line)
    assert not wait_gone(tree, EXIT_BOUND)
    assert not leftover_processes(str(tmp_path))

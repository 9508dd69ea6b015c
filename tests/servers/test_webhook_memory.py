"""The webhook server holds no secret of the supervisor's, in its memory either (fault catalog WH16, issue 37 item 7).

agentd runs the published example with a fake model API key planted in its
own environment. The webhook server listens on a network port, so it is
exec'd with only what its ``env`` names (ARCHITECTURE decision 21,
rfcs/0375), never forked from the supervisor: the test reads the running
server's whole memory (``/proc/PID/mem``, region by region from
``/proc/PID/maps``) and does not find the key, while the same search finds
it in the supervisor's memory, and the server's own webhook secret in the
server's (the search works). Was: forked, the server
held a copy of the supervisor's heap, key included.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path

import psutil
import pytest

from tests.support.agentd_proc import REPO, run_agentd
from tests.support.leftovers import AllowedFiles
from tests.support.webhooks import GITHUB_SECRET, example_env, free_port

pytestmark = pytest.mark.fault

EXAMPLE = REPO / "examples" / "webhooks" / "github-issues.toml"
CONNECT_BOUND = 60.0
CHUNK = 1 << 20


@pytest.fixture(autouse=True)
def _webhook_files(allow_files: AllowedFiles) -> None:
    allow_files("state.json", "lock", "seg-*.jsonl", "bin/agentd")


def holds(pid: int, needle: bytes) -> bool:
    """Whether ``needle`` is anywhere in the readable memory of process ``pid``."""
    fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)
    try:
        with open(f"/proc/{pid}/maps") as maps:
            regions = maps.read().splitlines()
        for line in regions:
            fields = line.split()
            if "r" not in fields[1] or (len(fields) > 5 and fields[5] in ("[vvar]", "[vsyscall]")):
                continue
            start, end = (int(x, 16) for x in fields[0].split("-"))
            at = start
            while at < end:
                size = min(CHUNK + len(needle), end - at)
                try:
                    data = os.pread(fd, size, at)
                except OSError:
                    break  # a page that cannot be read (guard pages, a region just unmapped)
                if needle in data:
                    return True
                at += CHUNK
        return False
    finally:
        os.close(fd)


def _readable(pid: int) -> bool:
    with contextlib.suppress(OSError):
        os.close(os.open(f"/proc/{pid}/mem", os.O_RDONLY))
        return True
    return False


async def test_wh16_the_webhook_server_holds_no_model_key_of_the_supervisor(tmp_path: Path) -> None:
    key = f"sk-planted-{secrets.token_hex(16)}"
    port = free_port()
    env = {**example_env(tmp_path, port), "OPENAI_API_KEY": key, "ANTHROPIC_API_KEY": key}
    async with run_agentd(["--config", str(EXAMPLE)], env=env) as a:
        connected = await a.wait_event(
            "upstream.connected", lambda e: e["server"] == "webhook", timeout=CONNECT_BOUND
        )
        assert connected["process"] != "forked", connected  # exec'd: launched early, or at connect
        servers = [
            p
            for p in psutil.Process(a.proc.pid).children()
            if "webhook" in p.cmdline() and "serve" in p.cmdline()
        ]
        assert len(servers) == 1, [p.cmdline() for p in psutil.Process(a.proc.pid).children()]
        server = servers[0].pid
        if not _readable(server):
            pytest.skip("reading another process's memory needs ptrace rights (root, or ptrace_scope 0)")
        assert key not in "\0".join(servers[0].environ().values())
        # The search works: it finds the key where it is, and the server's own secret in the server.
        assert holds(a.proc.pid, key.encode())
        assert holds(server, GITHUB_SECRET.encode())
        assert not holds(server, key.encode())
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0, a.tail()

"""Three sharded replicas (``--shard i/3``) against one real MCP server over Streamable HTTP.

Each replica has its own loopback model provider, so every change handled is
counted where it was handled (at the provider), by replica. The SDK-written
notes server serves 60 notes on a spawn route and 3 on continue routes; the
test changes them with the server's own ``set_note`` tool, through an MCP
client of its own.
"""

from __future__ import annotations

import json
import re
import signal
from collections import Counter
from pathlib import Path

import pytest
import trio
from mcp import Client

from agentd.state.shard import owner
from tests.fakes.provider_server import RecordedRequest, Reply, openai_reply, provider_server
from tests.support.agentd_proc import Agentd, run_agentd
from tests.support.processes import listening, start_notes_server

pytestmark = pytest.mark.slow

SPAWNED = [f"u{i:02d}" for i in range(60)]
SESSIONS = ["c0", "c1", "c2"]
REPLICAS = 3
#: Bound for every phase: a few hundred agent turns on a busy 2-core machine.
PHASE = 120.0
_URI = re.compile(r"note://([a-z0-9]+)")


class Handled:
    """Which notes each replica's model was asked about (the last user message of each request)."""

    def __init__(self) -> None:
        self.by_replica: list[Counter[str]] = [Counter() for _ in range(REPLICAS)]
        self._changed = trio.Event()

    def responder(self, replica: int):
        def answer(request: RecordedRequest) -> Reply:
            last = request.json["messages"][-1]["content"]
            for name in set(_URI.findall(last)):
                self.by_replica[replica][name] += 1
            self._changed.set()
            self._changed = trio.Event()
            return openai_reply("NO_REPLY")

        return answer

    def total(self, name: str) -> int:
        return sum(c[name] for c in self.by_replica)

    async def wait(self, names: list[str], count: int) -> None:
        with trio.fail_after(PHASE):
            while any(self.total(n) < count for n in names):
                await self._changed.wait()


def _owner(name: str) -> int:
    key = f"session:s{name[1]}" if name in SESSIONS else f"uri:note://{name}"
    return owner(key, REPLICAS)


async def _set_all(url: str, names: list[str], text: str) -> None:
    async with Client(url) as client:
        for name in names:
            await client.call_tool("set_note", {"name": name, "text": text})


async def test_three_replicas_handle_every_change_once_and_a_restarted_one_catches_up(tmp_path: Path) -> None:
    state = tmp_path / "notes.json"
    state.write_text(json.dumps({n: "v0" for n in [*SPAWNED, *SESSIONS]}))
    listener, port = listening(backlog=256)
    url = f"http://127.0.0.1:{port}/mcp"
    server = await start_notes_server(listener, state, quiet=True)
    routes = "".join(
        f'[[routes]]\nname = "s{i}"\nmatch = "note://c{i}"\ndisposition = "continue"\nsession = "s{i}"\n'
        'debounce = "50ms"\n'
        for i in range(3)
    )
    toml = tmp_path / "agentd.toml"
    toml.write_text(
        'subscribe = ["web:note://*"]\n' + routes + '[[routes]]\nname = "changes"\nmatch = "note://u*"\n'
        'disposition = "spawn"\nmax_inflight = 8\ndebounce = "50ms"\n'
    )
    handled = Handled()

    def args(i: int) -> list[str]:
        return [
            "--mode", "reactive", "--config", str(toml), "--mcp-http", f"web={url}",
            "--shard", f"{i}/{REPLICAS}", "--state-dir", str(tmp_path / f"state-{i}"),
            "--model", "openai:gpt-4o-mini", "--verbose", "handle the change",
        ]  # fmt: skip

    everything = [*SPAWNED, *SESSIONS]
    try:
        async with (
            provider_server(handler=handled.responder(0)) as p0,
            provider_server(handler=handled.responder(1)) as p1,
            provider_server(handler=handled.responder(2)) as p2,
        ):
            providers = [p0, p1, p2]

            def env(i: int) -> dict[str, str]:
                return {"OPENAI_BASE_URL": providers[i].url("/v1"), "OPENAI_API_KEY": "sk-test"}

            async with run_agentd(args(0), env=env(0)) as r0, run_agentd(args(2), env=env(2)) as r2:
                replicas: list[Agentd] = [r0, r0, r2]
                async with run_agentd(args(1), env=env(1)) as r1:
                    replicas[1] = r1
                    # Start-up: each replica re-reads what it owns, once.
                    await handled.wait(everything, 1)
                    await _set_all(url, everything, "v1")
                    await handled.wait(everything, 2)
                    # Replica 1 dies; everything changes while it is down.
                    r1.proc.send_signal(signal.SIGKILL)
                    await r1.wait_exit(PHASE)
                    await _set_all(url, everything, "v2")
                    others = [n for n in everything if _owner(n) != 1]
                    await handled.wait(others, 3)
                    mine = [n for n in everything if _owner(n) == 1]
                    assert mine
                    assert all(handled.total(n) == 2 for n in mine)  # nobody else took them
                async with run_agentd(args(1), env=env(1)) as back:
                    await handled.wait(mine, 3)  # its start-up re-read finds what changed
                    restored = back.find("journal.restored")
                    for r in (back, r0, r2):
                        r.signal(signal.SIGTERM)
                    for r in (back, r0, r2):
                        assert await r.wait_exit(PHASE) == 0, r.tail()
    finally:
        server.kill()
        await server.wait()
        listener.close()
    for name in everything:
        counts = [handled.by_replica[i][name] for i in range(REPLICAS)]
        # Exactly three times (start-up, v1, v2), and only ever by its owner.
        assert counts[_owner(name)] == 3, (name, counts)
        assert sum(counts) == 3, (name, counts)
    # Replica 1's continue session came back from its journal.
    assert {e["session"] for e in restored} == {f"s{n[1]}" for n in SESSIONS if _owner(n) == 1}
    assert all(r.find("shard.assigned") for r in (r0, r2))

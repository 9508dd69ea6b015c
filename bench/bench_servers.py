"""`agentd serve inbox` (and memo) against the floor of a bare inotify + stdio loop, side by side.

Run: ``.venv/bin/python bench/bench_servers.py`` (about 1-2 minutes; ``--quick`` for fewer rounds).

**Floor: a bare inotify + stdio loop** (``BARE_LOOP`` below, its own process): a
blocking ``select`` on an inotify descriptor watching the inbox directory; on
each wake it reads what was appended, writes one
``notifications/resources/updated`` and one ``notifications/claude/channel``
per new line (the line as the content) to stdout. No MCP session, no parsing
of the lines, no state: the least any server can do to push an appended line.

**agentd**: ``agentd serve inbox`` over stdio, its client initialized with
Claude Code's capabilities plus ``experimental["claude/channel"]`` and
subscribed to ``inbox://AGENT`` (so it gets both notifications).

Both are read by the same raw JSON-lines reader in this process; every time
is ``time.perf_counter()`` here, from just before the ``write`` of the line to
the moment the notification's line is read.

1. **Latency**, append one line -> ``resources/updated``, and -> the channel
   notification carrying that line: p50 / p99 over ``N`` appends, bare and
   agentd measured alternately (paired, so load hits both alike).
2. **Burst**: 10,000 lines in one ``write``; messages per second *delivered
   at the client* (channel notifications received, one per line), until the
   last one arrives. Also, for agentd, a log reader's rate: it reads
   ``inbox://AGENT`` on each ``resources/updated`` and acknowledges what it
   read (the window is 256, so it pages), until all 10,000 were read.
3. **memo**: ``memo_set`` -> ``subscriptions/listen`` event, against the SDK's
   own notify (a minimal ``MCPServer`` whose tool publishes).

Goals: channel latency within 2x the bare loop's; burst delivery within 2x.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import psutil
import trio
from mcp import Client, StdioServerParameters

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _util import ENV, PY, REPO, fmt, machine_note, pct, table

STEP_TIMEOUT = 30.0  # any single awaited step; a normal one takes milliseconds
BURST = 10_000
#: Claude Code's declaration plus the channel capability: a client that reads the log (it subscribes)
#: and also wants the channel (with --channel auto a subscriber that does not declare it gets no channel).
CLIENT_CAPS = {"roots": {"listChanged": True}, "experimental": {"claude/channel": {}}}

BARE_LOOP = r"""
import os, select, sys
sys.path.insert(0, sys.argv[2])
import orjson
from agentd.servers._inotify import IN_MODIFY, Inotify
directory, name = os.path.split(sys.argv[1])
ino = Inotify()
ino.add_watch(directory, IN_MODIFY)
out = sys.stdout.fileno()
uri = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": {"uri": "inbox://bare"}}) + b"\n"
pos, rest = 0, b""
os.write(out, b'{"ready": true}\n')
while True:
    select.select([ino.fd], [], [])
    if not any(ev.name == name for ev in ino.read_nowait()):
        continue
    with open(sys.argv[1], "rb") as f:
        f.seek(pos)
        data = f.read()
    pos += len(data)
    *lines, rest = (rest + data).split(b"\n")
    batch = [uri] + [
        b'{"jsonrpc":"2.0","method":"notifications/claude/channel","params":{"content":'
        + orjson.dumps(line.decode()) + b"}}\n"
        for line in lines
    ]
    view = memoryview(b"".join(batch))
    while view:
        view = view[os.write(out, view):]
"""

BARE_SDK = """
import trio
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
bus = InMemorySubscriptionBus()
app = MCPServer("bare", subscriptions=bus)
@app.resource("bare://x")
def x() -> str:
    return "{}"
@app.tool()
async def poke() -> str:
    await bus.publish(ResourceUpdated(uri="bare://x"))
    return "ok"
async def main():
    low = app._lowlevel_server
    async with stdio_server() as (r, w):
        await low.run(r, w, low.create_initialization_options())
trio.run(main)
"""


# ----------------------------------------------------------------------------- a raw JSON-lines peer


@dataclass
class Peer:
    """A process on the other end of a pipe, its stdout lines parsed and timestamped as they arrive."""

    proc: trio.Process
    lines: list[tuple[float, dict[str, Any]]] = field(default_factory=list)
    _changed: trio.Event = field(default_factory=trio.Event)
    _next_id: int = 0
    _answers: dict[int, dict[str, Any]] = field(default_factory=dict)

    async def pump(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        while chunk := await self.proc.stdout.receive_some(1 << 20):
            now = time.perf_counter()
            *done, buf = (buf + chunk).split(b"\n")
            for raw in done:
                if raw.strip():
                    msg = orjson.loads(raw)
                    if "id" in msg and "method" not in msg:
                        self._answers[msg["id"]] = msg
                    else:
                        self.lines.append((now, msg))
            self._changed.set()
            self._changed = trio.Event()

    async def wait(self, predicate: Callable[[], bool]) -> None:
        with trio.fail_after(STEP_TIMEOUT):
            while not predicate():
                await self._changed.wait()

    async def send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        await self.proc.stdin.send_all(orjson.dumps(msg) + b"\n")

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self._next_id += 1
        rid = self._next_id
        await self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        await self.wait(lambda: rid in self._answers)
        answer = self._answers.pop(rid)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    def count(self, method: str, since: int = 0) -> int:
        return sum(1 for _, m in self.lines[since:] if m.get("method") == method)

    def first(
        self, method: str, since: int, where: Callable[[dict[str, Any]], bool] = lambda m: True
    ) -> float:
        for t, m in self.lines[since:]:
            if m.get("method") == method and where(m):
                return t
        raise LookupError(method)


async def open_peer(nursery: trio.Nursery, argv: list[str]) -> Peer:
    proc = await trio.lowlevel.open_process(
        argv, cwd=str(REPO), env=ENV, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    peer = Peer(proc)
    nursery.start_soon(peer.pump)
    return peer


def append(path: Path, data: bytes) -> float:
    """One write on O_APPEND, as inbox writers do; returns the time just before it."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        t0 = time.perf_counter()
        os.write(fd, data)
    finally:
        os.close(fd)
    return t0


# ----------------------------------------------------------------------------- the two pushers


@dataclass
class Target:
    name: str
    peer: Peer
    path: Path
    content_of: Callable[[dict[str, Any]], str]
    """The channel notification's line id (bare: the raw line; agentd: meta.id)."""


async def start_bare(nursery: trio.Nursery, box: Path) -> Target:
    path = box / "bare.inbox"
    path.touch()
    peer = await open_peer(nursery, [PY, "-c", BARE_LOOP, str(path), str(REPO)])
    await peer.wait(lambda: any(m.get("ready") for _, m in peer.lines))
    return Target("bare loop", peer, path, lambda m: json.loads(m["params"]["content"])["id"])


async def start_inbox(nursery: trio.Nursery, box: Path, agent: str) -> Target:
    peer = await open_peer(
        nursery, [PY, "-m", "agentd.servers", "inbox", "--agent", agent, "--dir", str(box)]
    )
    await peer.request(
        "initialize",
        {
            "protocolVersion": "2025-11-25",
            "capabilities": CLIENT_CAPS,
            "clientInfo": {"name": "claude-code", "version": "2"},
        },
    )
    await peer.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
    await peer.request("resources/subscribe", {"uri": f"inbox://{agent}"})
    return Target("agentd serve inbox", peer, box / f"{agent}.inbox", lambda m: m["params"]["meta"]["id"])


CHANNEL = "notifications/claude/channel"
UPDATED = "notifications/resources/updated"


async def one_append(target: Target, i: int) -> tuple[float, float]:
    """(ms to resources/updated, ms to the channel notification) for one appended line."""
    peer = target.peer
    since = len(peer.lines)
    msg_id = f"m{i}"
    t0 = append(target.path, json.dumps({"id": msg_id, "from": "bench", "text": "hello"}).encode() + b"\n")
    await peer.wait(lambda: any(
        m.get("method") == CHANNEL and target.content_of(m) == msg_id for _, m in peer.lines[since:]
    ) and peer.count(UPDATED, since) > 0)  # fmt: skip
    t_upd = peer.first(UPDATED, since)
    t_ch = peer.first(CHANNEL, since, lambda m: target.content_of(m) == msg_id)
    return (t_upd - t0) * 1000, (t_ch - t0) * 1000


async def burst(target: Target, start: int) -> tuple[float, int]:
    """10,000 lines in one write; (messages/s delivered at the client, peak RSS of the pusher in MiB)."""
    peer = target.peer
    since = len(peer.lines)
    payload = b"".join(
        json.dumps(
            {"id": f"b{start + i}", "from": "bench", "urgent": i % 10 == 0, "text": "hello " * 5}
        ).encode()
        + b"\n"
        for i in range(BURST)
    )
    t0 = append(target.path, payload)
    await peer.wait(lambda: peer.count(CHANNEL, since) >= BURST)
    t_last = [t for t, m in peer.lines[since:] if m.get("method") == CHANNEL][BURST - 1]
    rss = psutil.Process(peer.proc.pid).memory_info().rss // (1024 * 1024)
    return BURST / (t_last - t0), rss


async def reader_burst(box: Path, nursery: trio.Nursery) -> float:
    """agentd, a log reader: read inbox://AGENT on each update, acknowledge what it read, until 10,000 read."""
    target = await start_inbox(nursery, box, "reader")
    peer = target.peer
    payload = b"".join(
        json.dumps({"id": f"r{i}", "from": "bench", "text": "hello " * 5}).encode() + b"\n"
        for i in range(BURST)
    )
    seen: set[str] = set()
    t0 = append(target.path, payload)
    while len(seen) < BURST:
        before = peer.count(UPDATED)
        result = await peer.request("resources/read", {"uri": "inbox://reader"})
        events = orjson.loads(result["contents"][0]["text"])["events"]
        seen |= {e["id"] for e in events if e["type"] == "MESSAGE"}
        if events:
            await peer.request(
                "tools/call", {"name": "ack", "arguments": {"seqs": [e["seq"] for e in events]}}
            )
        if len(seen) < BURST:
            await peer.wait(lambda before=before: peer.count(UPDATED) > before)
    return BURST / (time.perf_counter() - t0)


# ----------------------------------------------------------------------------- memo vs the SDK's notify


async def memo_vs_sdk(rounds: int, tmp: Path) -> dict[str, list[float]]:
    async def measure(
        params: StdioServerParameters, uri: str, trigger: Callable[[Client, int], Any]
    ) -> list[float]:
        out: list[float] = []
        async with Client(params) as client, client.listen(resource_subscriptions=[uri]) as sub:
            it = sub.__aiter__()
            for i in range(rounds + 10):
                t0 = time.perf_counter()
                async with trio.open_nursery() as n:
                    n.start_soon(trigger, client, i)
                    with trio.fail_after(STEP_TIMEOUT):
                        await it.__anext__()
                    dt = time.perf_counter() - t0
                if i >= 10:
                    out.append(dt * 1000)
        return out

    async def poke(client: Client, i: int) -> None:
        await client.call_tool("poke", {})

    async def memo_set(client: Client, i: int) -> None:
        await client.call_tool("memo_set", {"key": "k", "value": i})

    bare = StdioServerParameters(command=PY, args=["-c", BARE_SDK], env=ENV, cwd=str(REPO))
    memo = StdioServerParameters(
        command=PY,
        args=["-m", "agentd.servers", "memo", "--file", str(tmp / "notes.json")],
        env=ENV,
        cwd=str(REPO),
    )
    return {
        "SDK notify (tool -> listen event)": await measure(bare, "bare://x", poke),
        "memo_set -> listen event": await measure(memo, "memo://notes", memo_set),
    }


# ----------------------------------------------------------------------------- main


async def main(rounds: int) -> None:
    print(
        f"bench_servers: {machine_note()}; {rounds} appends per path, bursts of {BURST:,} lines", flush=True
    )
    lat: dict[str, dict[str, list[float]]] = {
        "bare loop": {"updated": [], "channel": []},
        "agentd serve inbox": {"updated": [], "channel": []},
    }
    rates: dict[str, tuple[float, int]] = {}
    with tempfile.TemporaryDirectory() as tmp_text:
        tmp = Path(tmp_text)
        async with trio.open_nursery() as nursery:
            bare_box, inbox_box = tmp / "bare", tmp / "inbox"
            bare_box.mkdir()
            inbox_box.mkdir()
            targets = [await start_bare(nursery, bare_box), await start_inbox(nursery, inbox_box, "bench")]
            for i in range(rounds + 20):
                for target in targets if i % 2 == 0 else targets[::-1]:  # paired, alternating order
                    upd, ch = await one_append(target, i)
                    if i >= 20:  # warm-up
                        lat[target.name]["updated"].append(upd)
                        lat[target.name]["channel"].append(ch)
            for target in targets:
                rates[target.name] = await burst(target, 0)
            reader_rate = await reader_burst(tmp / "inbox", nursery)
            for target in targets:
                target.peer.proc.terminate()
            nursery.cancel_scope.cancel()
        memo = await memo_vs_sdk(rounds, tmp)

    base = lat["bare loop"]
    rows = []
    for name, xs in lat.items():
        rows.append(
            [
                name,
                fmt(pct(xs["updated"], 0.5), 3),
                fmt(pct(xs["updated"], 0.99), 3),
                fmt(pct(xs["channel"], 0.5), 3),
                fmt(pct(xs["channel"], 0.99), 3),
                fmt(pct(xs["channel"], 0.5) / pct(base["channel"], 0.5)),
                fmt(pct(xs["channel"], 0.99) / pct(base["channel"], 0.99)),
            ]
        )
    table(
        "append -> notification (ms; goal: channel within 2x the bare loop)",
        ["pusher", "updated p50", "updated p99", "channel p50", "channel p99", "p50 / bare", "p99 / bare"],
        rows,
    )
    bare_rate = rates["bare loop"][0]
    table(
        f"burst of {BURST:,} lines in one write: delivered at the client (goal: within 2x the bare loop)",
        ["path", "messages/s", "x bare", "pusher RSS after (MiB)"],
        [
            ["bare loop, channel lines", f"{bare_rate:,.0f}", "1.00", str(rates["bare loop"][1])],
            [
                "agentd serve inbox, channel notifications",
                f"{rates['agentd serve inbox'][0]:,.0f}",
                fmt(bare_rate / rates["agentd serve inbox"][0]),
                str(rates["agentd serve inbox"][1]),
            ],
            [
                "agentd serve inbox, log reader (read + ack pages of 256)",
                f"{reader_rate:,.0f}",
                fmt(bare_rate / reader_rate),
                "-",
            ],
        ],
    )
    sdk = memo["SDK notify (tool -> listen event)"]
    table(
        "memo: change -> listen event (ms)",
        ["path", "p50", "p99", "p50 / SDK"],
        [
            [name, fmt(pct(xs, 0.5), 3), fmt(pct(xs, 0.99), 3), fmt(pct(xs, 0.5) / pct(sdk, 0.5))]
            for name, xs in memo.items()
        ],
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="50 appends per path instead of 300")
    args = parser.parse_args()
    trio.run(main, 50 if args.quick else 300)

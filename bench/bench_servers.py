"""Change -> notification latency of the memo and inbox servers vs the SDK's bare notify; inbox drain rate.

Run: ``/work/venv/bin/python bench/bench_servers.py`` (about 20-40 s).

* bare:  a minimal MCPServer whose tool publishes ResourceUpdated; latency from
         call_tool start to the listen event (the SDK floor for a tool-driven push).
* memo:  memo_set -> listen event (the same path plus atomic write + fsync).
* inbox: append one line to the inbox file -> listen event (inotify + drain + push).
* drain: 10,000 lines appended in one write -> the batch read back; messages/s.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import trio
from mcp import Client, StdioServerParameters

REPO = str(Path(__file__).resolve().parents[1])
N = 200
BURST = 10_000
ENV = {**os.environ, "PYTHONPATH": REPO}

BARE = """
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


def append_bytes(path: Path, data: bytes) -> None:
    """One write on O_APPEND, as inbox writers do (sync on purpose: the timed change)."""
    with open(path, "ab") as f:
        f.write(data)


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p * len(xs)))]


async def measure(params: StdioServerParameters, uri: str, trigger) -> list[float]:
    out: list[float] = []
    async with Client(params) as client, client.listen(resource_subscriptions=[uri]) as sub:
        it = sub.__aiter__()
        for i in range(N + 10):
            t0 = time.perf_counter()
            async with trio.open_nursery() as n:
                n.start_soon(trigger, client, i)
                with trio.fail_after(10):
                    await it.__anext__()
                dt = time.perf_counter() - t0
            if i >= 10:  # warm-up
                out.append(dt * 1000)
    return out


async def main() -> None:
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        bare = StdioServerParameters(command=sys.executable, args=["-c", BARE], env=ENV, cwd=REPO)

        async def poke(client, i):
            await client.call_tool("poke", {})

        results["bare SDK notify"] = await measure(bare, "bare://x", poke)

        memo = StdioServerParameters(
            command=sys.executable,
            args=["-m", "agentd.servers", "memo", "--file", f"{tmp}/notes.json"],
            env=ENV,
            cwd=REPO,
        )

        async def memo_set(client, i):
            await client.call_tool("memo_set", {"key": "k", "value": i})

        results["memo memo_set"] = await measure(memo, "memo://notes", memo_set)

        inbox_dir = Path(tmp) / "inbox"
        inbox_dir.mkdir()
        inbox = StdioServerParameters(
            command=sys.executable,
            args=["-m", "agentd.servers", "inbox", "--agent", "bench", "--dir", str(inbox_dir)],
            env=ENV,
            cwd=REPO,
        )
        path = inbox_dir / "bench.inbox"

        async def append(client, i):
            append_bytes(path, json.dumps({"id": f"m{i}", "from": "x", "text": "hello"}).encode() + b"\n")

        results["inbox append"] = await measure(inbox, "inbox://bench", append)

        # Drain throughput: a 10,000-line burst in one write.
        burst_dir = Path(tmp) / "burst"
        burst_dir.mkdir()
        burst = StdioServerParameters(
            command=sys.executable,
            args=["-m", "agentd.servers", "inbox", "--agent", "b", "--dir", str(burst_dir)],
            env=ENV,
            cwd=REPO,
        )
        payload = b"".join(
            json.dumps({"id": f"m{i}", "from": "x", "urgent": i % 10 == 0, "text": "hello " * 5}).encode()
            + b"\n"
            for i in range(BURST)
        )
        async with Client(burst) as client, client.listen(resource_subscriptions=["inbox://b/status"]) as sub:
            await client.read_resource("inbox://b/status")
            t0 = time.perf_counter()
            append_bytes(burst_dir / "b.inbox", payload)
            delivered = 0
            with trio.fail_after(60):
                async for _ in sub:
                    (c,) = (await client.read_resource("inbox://b/status")).contents
                    delivered = json.loads(c.text)["delivered"]
                    if delivered >= BURST:
                        break
            dt = time.perf_counter() - t0
    base = statistics.median(results["bare SDK notify"])
    print(f"{'path':<18} {'p50 ms':>8} {'p95 ms':>8} {'p50/bare':>9}   (n={N})")
    for name, xs in results.items():
        print(f"{name:<18} {pct(xs, 0.5):8.3f} {pct(xs, 0.95):8.3f} {pct(xs, 0.5) / base:9.2f}")
    print(
        f"inbox drain: {BURST} lines in {dt * 1000:.1f} ms -> {BURST / dt:,.0f} messages/s (append -> status shows all)"
    )


if __name__ == "__main__":
    trio.run(main)

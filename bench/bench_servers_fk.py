"""Change -> notification latency of `agentd serve files` and `agentd serve kube`.

One command, well under a minute:

    PYTHONPATH=. /work/venv/bin/python bench/bench_servers_fk.py

Each server runs as a real stdio subprocess; the SDK client holds one
`subscriptions/listen` stream. A "change" is made outside MCP and the clock
runs until the ResourceUpdated event is yielded to the client:

* bare  - a minimal SDK MCPServer that publishes ResourceUpdated for every
          line it reads from a FIFO (the floor: pipe + SDK push, no source logic);
* kube  - a watch event written to the fake kubectl's FIFO (kubectl -w stdout ->
          incremental JSON parser -> tracker -> ring -> push);
* files - a file written under --root (inotify -> 20 ms coalescing window ->
          lstat diff -> ring -> push).

Prints p50/p95 per source and the ratio to bare.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import trio
from mcp import Client, StdioServerParameters

REPO = Path(__file__).resolve().parents[1]
FAKES = REPO / "tests" / "fakes"
ROUNDS = {"bare": 200, "kube": 200, "files": 60}
PUSH_TIMEOUT = 10.0  # a push slower than this is a failure, not a data point

BARE_SERVER = textwrap.dedent(
    """
    import os, sys, trio
    from mcp.server.mcpserver import MCPServer
    from mcp.server.subscriptions import InMemorySubscriptionBus, ResourceUpdated
    from mcp.server.stdio import stdio_server
    bus = InMemorySubscriptionBus()
    mcp = MCPServer("bare", subscriptions=bus)

    @mcp.resource("bare://x")
    def x() -> str:
        return "{}"

    async def pump(path):
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        while True:
            await trio.lowlevel.wait_readable(fd)
            data = os.read(fd, 65536)
            for _ in range(data.count(b"\\n")):
                await bus.publish(ResourceUpdated(uri="bare://x"))

    async def main():
        low = mcp._lowlevel_server
        async with trio.open_nursery() as n:
            n.start_soon(pump, sys.argv[1])
            async with stdio_server() as (r, w):
                await low.run(r, w, low.create_initialization_options())
            n.cancel_scope.cancel()

    trio.run(main)
    """
)


def pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100)[int(q) - 1] if len(values) > 1 else values[0]


async def measure(params: StdioServerParameters, uri: str, rounds: int, change) -> list[float]:
    out: list[float] = []
    async with Client(params) as client, client.listen(resource_subscriptions=[uri]) as sub:
        await client.read_resource(uri)  # waits for the change source to be running
        events = sub.__aiter__()
        for i in range(rounds + 5):
            t0 = time.perf_counter()
            change(i)
            with trio.fail_after(PUSH_TIMEOUT):
                await events.__anext__()
            if i >= 5:  # warm-up
                out.append((time.perf_counter() - t0) * 1000)
    return out


async def main() -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    results: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        tmpd = Path(tmp)
        # bare
        fifo = tmpd / "bare.fifo"
        os.mkfifo(fifo)
        bare_fd = os.open(fifo, os.O_RDWR)
        bare = StdioServerParameters(command=sys.executable, args=["-c", BARE_SERVER, str(fifo)], env=env)
        results["bare"] = await measure(bare, "bare://x", ROUNDS["bare"], lambda i: os.write(bare_fd, b"x\n"))
        # kube
        (tmpd / "pods.json").write_text("[]")
        os.mkfifo(tmpd / "pods.watch")
        kube_fd = os.open(tmpd / "pods.watch", os.O_RDWR)
        kenv = {**env, "KUBECTL_FAKE_DIR": tmp, "KUBECTL_FAKE_PYTHON": sys.executable}
        kube = StdioServerParameters(
            command=sys.executable,
            args=["-m", "agentd.servers", "kube", "--kubectl", str(FAKES / "kubectl")],
            env=kenv,
        )

        def kube_change(i: int) -> None:
            ev = {
                "type": "ADDED",
                "object": {"metadata": {"name": f"p{i}", "uid": f"u{i}", "resourceVersion": "1"}},
            }
            os.write(kube_fd, (json.dumps(ev) + "\n").encode())

        results["kube"] = await measure(
            kube, "kube-events://watch/pods?namespace=*", ROUNDS["kube"], kube_change
        )
        # files
        root = tmpd / "root"
        root.mkdir()
        files = StdioServerParameters(
            command=sys.executable, args=["-m", "agentd.servers", "files", "--root", str(root)], env=env
        )

        def file_change(i: int) -> None:
            (root / f"f{i}.txt").write_text("x")

        results["files"] = await measure(files, "file-events://.", ROUNDS["files"], file_change)
        os.close(bare_fd)
        os.close(kube_fd)
    base = statistics.median(results["bare"])
    print(f"{'source':<6} {'n':>4} {'p50 ms':>8} {'p95 ms':>8} {'p50/bare':>9}")
    for name, values in results.items():
        p50, p95 = statistics.median(values), pct(values, 95)
        print(f"{name:<6} {len(values):>4} {p50:>8.2f} {p95:>8.2f} {p50 / base:>9.1f}")


if __name__ == "__main__":
    trio.run(main)

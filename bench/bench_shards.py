"""Sharded replicas and session journals: what they cost, against floors measured in the same run.

Three parts, one run (``python bench/bench_shards.py [--quick]``):

1. **Journal cost per turn**: :meth:`agentd.state.sessions.SessionJournals.commit`
   of a typical turn (user delivery, assistant tool call, a 2 KiB tool result,
   the answer) as the supervisor runs it (record encoding, a worker-thread
   hop, append, ``fsync``), against a bare ``write`` + ``fsync`` of the same
   bytes to a file in the same directory. Runs alternate.
2. **Routing throughput**: the reactor's routing step for 100,000 updates
   over 1,000 URIs (``Router.first_match`` + ``Router.ingest``), unsharded
   and with the ``--shard`` check of a replica of 3 (which routes every update
   and keeps its third); floor: a dict lookup per update.
3. **Event to agent**: ``set_note`` on a real MCP server (Streamable HTTP) →
   the owning replica's model request at a loopback provider, with 1 agentd
   and with 3 sharded agentd on the same server; floor: an SDK client in this
   process listening on the same URIs (push → event yielded), paired per push.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio
from _util import PY, REPO, fmt, machine_note, p50, pct, table

sys.path.insert(1, str(REPO))

from agentd.observe.telemetry import Telemetry
from agentd.selfmcp.protocol import MessageFrame, ToolCallFrame
from agentd.state import journal as jf
from agentd.state.sessions import SessionJournals
from agentd.state.shard import Shard, handles
from agentd.triggers.router import Continue, QueuedEvent, Router, RouteSpec, Spawn
from tests.support.processes import listening, start_notes_server

# ------------------------------------------------------------------------------------ 1. journal


def _turn(i: int) -> tuple[MessageFrame, ...]:
    return (
        MessageFrame(role="user", content=f"These resources changed:\n- note://n{i} on web (updated)"),
        MessageFrame(
            role="assistant",
            tool_calls=(
                ToolCallFrame(id=f"c{i}", name="read_resource", raw_arguments='{"uri":"note://n1"}'),
            ),
        ),
        MessageFrame(role="tool", content="x" * 2048, tool_call_id=f"c{i}"),
        MessageFrame(role="assistant", content="Handled: the note now says x. Nothing else to do."),
    )


async def journal_cost(n: int, tmp: Path) -> list[list[object]]:
    journals = SessionJournals(
        tmp / "sessions",
        Telemetry(stream=None),
        max_tokens=10_000_000,
        lookup=lambda agent: ("bench", ()),
    )
    journals.scan()
    bare = os.open(tmp / "bare.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    record = jf.encode(jf.TurnRecord(messages=_turn(0)))
    ours: list[float] = []
    floor: list[float] = []
    floor_thread: list[float] = []

    def bare_append() -> None:
        os.write(bare, record)
        os.fsync(bare)

    await journals.commit("a1", _turn(0))  # creates the file
    for i in range(n):
        t = time.perf_counter()
        await journals.commit("a1", _turn(i))
        ours.append(time.perf_counter() - t)
        t = time.perf_counter()
        bare_append()
        floor.append(time.perf_counter() - t)
        t = time.perf_counter()
        await trio.to_thread.run_sync(bare_append)
        floor_thread.append(time.perf_counter() - t)
    os.close(bare)
    journals.close()
    base = p50(floor)
    ms = 1000
    return [
        ["journal commit (encode + thread + append + fsync)", n, fmt(p50(ours) * ms, 3), fmt(pct(ours, 0.95) * ms, 3), fmt(p50(ours) / base)],
        ["floor: bare append + fsync, same bytes", n, fmt(base * ms, 3), fmt(pct(floor, 0.95) * ms, 3), "1.00"],
        ["bare append + fsync in a worker thread", n, fmt(p50(floor_thread) * ms, 3), fmt(pct(floor_thread, 0.95) * ms, 3), fmt(p50(floor_thread) / base)],
    ]  # fmt: skip


# ------------------------------------------------------------------------------------ 2. routing


def routing_throughput(n: int) -> list[list[object]]:
    uris = [f"note://u{i}" for i in range(1000)]

    def router() -> Router:
        r = Router()
        r.add_route(RouteSpec(match="note://s*", disposition=Continue(session="ops"), route_id="ops"))
        r.add_route(
            RouteSpec(
                match="note://u*", disposition=Spawn(max_inflight=10**6), route_id="changes", queue_cap=2000
            )
        )
        return r

    def run(shard: Shard | None) -> tuple[float, int]:
        r = router()
        kept = 0
        t = time.perf_counter()
        for i in range(n):
            uri = uris[i % 1000]
            if shard is not None:
                route = r.first_match(uri)
                if route is not None and not handles(shard, route, uri):
                    continue
            r.ingest(QueuedEvent(uri=uri, server="web", etag=None, kind="updated", first_seen=0.0), 0.0)
            kept += 1
        return time.perf_counter() - t, kept

    table_ = {u: i for i, u in enumerate(uris)}
    t = time.perf_counter()
    s = 0
    for i in range(n):
        s += table_[uris[i % 1000]]
    floor = time.perf_counter() - t
    one, kept1 = run(None)
    three, kept3 = run(Shard(0, 3))
    return [
        ["1 shard (no check)", n, kept1, fmt(n / one / 1000, 1), fmt(one / floor)],
        [
            "replica 0 of 3 (first_match + rendezvous check)",
            n,
            kept3,
            fmt(n / three / 1000, 1),
            fmt(three / floor),
        ],
        ["floor: dict lookup per update", n, n, fmt(n / floor / 1000, 1), "1.00"],
    ]


# ------------------------------------------------------------------------------ 3. event to agent


async def event_to_agent(replicas: int, samples: int, tmp: Path) -> tuple[list[float], list[float]]:
    from mcp import Client

    from tests.fakes.provider_server import RecordedRequest, Reply, openai_reply, provider_server

    names = [f"u{i:02d}" for i in range(samples)]
    state = tmp / f"notes-{replicas}.json"
    state.write_text(json.dumps(dict.fromkeys(names, "v0")))
    listener, port = listening(backlog=256)
    url = f"http://127.0.0.1:{port}/mcp"
    server = await start_notes_server(listener, state, quiet=True)
    toml = tmp / f"agentd-{replicas}.toml"
    toml.write_text(
        'subscribe = ["web:note://*"]\n[[routes]]\nname = "changes"\nmatch = "note://u*"\n'
        'disposition = "spawn"\ndebounce = "0s"\nreread_on_start = false\n'
    )
    arrived: dict[str, float] = {}
    wake = trio.Event()
    pattern = re.compile(r"note://(u[0-9]+)")

    def answer(request: RecordedRequest) -> Reply:
        nonlocal wake
        m = pattern.search(request.json["messages"][-1]["content"])
        if m:
            arrived.setdefault(m.group(1), time.perf_counter())
            wake.set()
            wake = trio.Event()
        return openai_reply("NO_REPLY")

    procs: list[trio.Process] = []
    ours: list[float] = []
    floor: list[float] = []
    try:
        async with provider_server(handler=answer) as fake:
            env = {
                **os.environ,
                "PYTHONPATH": str(REPO),
                "OPENAI_BASE_URL": fake.url("/v1"),
                "OPENAI_API_KEY": "sk",
            }
            for i in range(replicas):
                args = ["--mode", "reactive", "--config", str(toml), "--mcp-http", f"web={url}",
                        "--model", "openai:gpt-4o-mini", "handle it"]  # fmt: skip
                if replicas > 1:
                    args += ["--shard", f"{i}/{replicas}"]
                procs.append(
                    await trio.lowlevel.open_process(
                        [PY, "-m", "agentd", *args],
                        env=env,
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE,
                    )
                )
            # Ready when each replica said its subscriptions are established (readiness flips true).
            for p in procs:
                assert p.stderr is not None
                buf = b""
                with trio.fail_after(60):
                    while b'"ready":true' not in buf:
                        chunk = await p.stderr.receive_some(65536)
                        if not chunk:
                            raise RuntimeError(buf.decode(errors="replace")[-2000:])
                        buf += chunk
                await trio.lowlevel.checkpoint()
            async with (
                Client(url) as writer,
                Client(url) as watcher,
                watcher.listen(resource_subscriptions=[f"note://{n}" for n in names]) as sub,
            ):
                events = sub.__aiter__()
                for k, name in enumerate(names):
                    t = time.perf_counter()
                    await writer.call_tool("set_note", {"name": name, "text": f"v{k}"})
                    with trio.fail_after(30):
                        await events.__anext__()
                    floor.append(time.perf_counter() - t)
                    with trio.fail_after(30):
                        while name not in arrived:
                            await wake.wait()
                    ours.append(arrived[name] - t)
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            with trio.move_on_after(30):
                await p.wait()
            if p.returncode is None:
                p.kill()
        server.kill()
        await server.wait()
        listener.close()
    return ours, floor


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    ns = parser.parse_args()
    n_journal = 50 if ns.quick else 300
    samples = 10 if ns.quick else 30
    print(machine_note())
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        table(
            "Journal cost per turn (ms)",
            ["what", "n", "p50", "p95", "× floor"],
            await journal_cost(n_journal, tmp),
        )
        table(
            "Routing throughput (thousand updates/s)",
            ["what", "updates", "handled here", "k/s", "time × floor"],
            routing_throughput(20_000 if ns.quick else 100_000),
        )
        rows = []
        for replicas in (1, 3):
            ours, floor = await event_to_agent(replicas, samples, tmp)
            ms = 1000
            rows.append(
                [
                    f"{replicas} replica(s): set_note → model request",
                    len(ours),
                    fmt(p50(ours) * ms),
                    fmt(pct(ours, 0.95) * ms),
                    fmt(p50(ours) / p50(floor)),
                ]
            )
            rows.append(["  floor (same run): set_note → SDK listener event", len(floor), fmt(p50(floor) * ms), fmt(pct(floor, 0.95) * ms), "1.00"])  # fmt: skip
        table("Event to agent (ms, paired per push)", ["what", "n", "p50", "p95", "× floor"], rows)


if __name__ == "__main__":
    trio.run(main)

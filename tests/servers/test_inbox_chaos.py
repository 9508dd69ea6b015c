"""Inbox chaos: writers append while the server is SIGKILLed and restarted at random; nothing is lost.

For each write rate (20, 100, 400 lines/s) two inboxes run side by side, each
with three writers appending (one ``write`` per line on ``O_APPEND``; some
urgent, some blank lines in between) and its own ``agentd serve inbox``
process, SIGKILLed at random (0.3-2 s after it was started, or 0.05-0.8 s after it answered its client: while it starts, drains, pushes or records acknowledgements) and restarted after 0-0.4 s:

* **reader**: a log reader (handshake era, subscribed to ``inbox://AGENT``)
  that reads the log on connect and on every ``resources/updated``, and
  acknowledges what it read with ``ack(seqs=[...])``;
* **channel**: a Claude Code channel client (it declares exactly what Claude
  Code declares: ``roots``; it does not subscribe) that records every
  ``notifications/claude/channel`` and acknowledges each message it got, as
  the server's instructions ask the model to.

Writing lasts ``WRITE_S`` seconds per rate (240 / 1,200 / 4,800 lines per
inbox: sized so the three rates take about a minute together on a 2-core
box), longer if a server was not yet killed ``MIN_KILLS`` times (a loaded
machine starts servers slowly); then the last server stays up until every
line is delivered and acknowledged. Asserted, per run: **0 lost** (every written id delivered
at least once), and every duplicate is *bounded*: a message is delivered
again only by a server that started before that message's acknowledgement
completed (pushed or read, not yet acknowledged), with the same id. The
figures are printed as a table.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import pytest
import trio

from tests.support.rawmcp import RawClient, ServerGone, raw_server

pytestmark = [
    pytest.mark.fault,
    pytest.mark.slow,
    pytest.mark.timeout(600),
]  # 68 s at load 5; 600 s catches a hang

RATES = (20, 100, 400)
WRITE_S = 12.0
"""Seconds of writing per rate (lines per inbox = rate x WRITE_S)."""
WRITERS = 3
KILL_AFTER_START_S = (0.3, 2.0)
"""Half the kills come this long after the server was started (uniform random): often while it imports,
takes the lock or drains the backlog."""
KILL_AFTER_READY_S = (0.05, 0.8)
"""The other half come this long after it answered its client's initialize: while it pushes, serves
reads or records acknowledgements."""
MIN_KILLS = 3
"""Writing goes on past WRITE_S until each server was killed this often (on a busy machine a start takes
seconds), at most until WRITE_CAP_S."""
WRITE_CAP_S = 40.0
DOWN_S = (0.0, 0.4)
"""Then it stays down this long (writers keep appending) before it is started again."""
FINISH_BOUND_S = 90.0
"""After the writers stop, everything must be delivered and acknowledged within this (normally ~1 s)."""
CHANNEL = "notifications/claude/channel"
UPDATED = "notifications/resources/updated"

Kind = Literal["reader", "channel"]


@dataclass
class Ledger:
    """What one inbox's consumer saw, per server incarnation."""

    written: set[str] = field(default_factory=set)
    delivered: dict[str, list[int]] = field(default_factory=dict)
    """id -> the incarnations that delivered it (once per incarnation)."""
    acked_in: dict[str, int] = field(default_factory=dict)
    """id -> the incarnation in which its acknowledgement first completed."""
    kills: int = 0
    incarnation: int = 0
    writers_done: bool = False
    bad_acks: list[str] = field(default_factory=list)
    uri: str = ""
    client: RawClient | None = None
    """The consumer's connection now (woken when the writers finish: its wait depends on that)."""

    def finish_writing(self) -> None:
        self.writers_done = True
        if self.client is not None:
            self.client.wake()

    def deliver(self, msg_id: str) -> None:
        seen = self.delivered.setdefault(msg_id, [])
        if not seen or seen[-1] != self.incarnation:
            seen.append(self.incarnation)

    def acked(self, msg_id: str) -> None:
        self.acked_in.setdefault(msg_id, self.incarnation)

    def complete(self) -> bool:
        """Every line written was delivered (the consumer then checks that nothing is pending any more).

        Acknowledgements need not be *seen* complete: one sent just before a SIGKILL may have been
        applied and persisted without its answer reaching the consumer.
        """
        return self.writers_done and self.written <= self.delivered.keys()

    def lost(self) -> set[str]:
        return self.written - self.delivered.keys()

    def duplicates(self) -> tuple[int, list[str]]:
        """(deliveries beyond the first, those not explained by a crash before the acknowledgement)."""
        extra, unexplained = 0, []
        for msg_id, incarnations in self.delivered.items():
            extra += len(incarnations) - 1
            acked = self.acked_in.get(msg_id)
            for again in incarnations[1:]:
                if acked is not None and acked < again:
                    unexplained.append(
                        f"{msg_id} delivered in incarnation {again} after its ack completed in {acked}"
                    )
        return extra, unexplained


def argv(box: Path, agent: str) -> list[str]:
    return [sys.executable, "-m", "agentd.servers", "inbox", "--agent", agent, "--dir", str(box)]


async def writer(box: Path, agent: str, w: int, rate: float, ledger: Ledger, rng: random.Random) -> None:
    fd = os.open(box / f"{agent}.inbox", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        start = trio.current_time()
        n = 0
        while (elapsed := trio.current_time() - start) < WRITE_S or (
            ledger.kills < MIN_KILLS and elapsed < WRITE_CAP_S
        ):
            n += 1
            msg_id = f"w{w}-{n}"
            urgent = "true" if rng.random() < 0.1 else "false"
            blank = b"\n" if rng.random() < 0.05 else b""
            line = f'{{"id": "{msg_id}", "from": "chaos", "urgent": {urgent}, "text": "line {n} of writer {w}"}}\n'
            ledger.written.add(msg_id)
            os.write(fd, blank + line.encode())  # one write per line, as the inbox contract asks
            await trio.sleep_until(start + n / rate)  # pacing: the rate, not a wait for a condition
    finally:
        os.close(fd)


async def consume_reader(client: RawClient, ledger: Ledger, ready: trio.Event) -> None:
    uri = ledger.uri
    await client.initialize(capabilities={}, name="chaos-reader")
    ready.set()
    await client.request("resources/subscribe", {"uri": uri})
    acked: set[int] = set()
    while True:
        before = len(client.of(UPDATED))
        was_complete = ledger.complete()
        body = await client.read_json(uri)
        pending = body["pending"]
        for e in body["events"]:
            if e["type"] == "MESSAGE":
                ledger.deliver(e["id"])
        todo = [e for e in body["events"] if e["seq"] not in acked]
        if todo:
            pending = await ack(client, todo, ledger)
            acked |= {e["seq"] for e in todo}
        if ledger.complete() and pending == 0:
            return
        # Woken by an update, or by the writers finishing after this read already saw their last lines
        # (no update follows then: the last read and acknowledgement are re-checked once).
        await client.wait_until(
            lambda before=before, was_complete=was_complete: (
                len(client.of(UPDATED)) > before or (ledger.complete() and not was_complete)
            ),
            timeout=FINISH_BOUND_S,
        )


async def consume_channel(client: RawClient, ledger: Ledger, ready: trio.Event) -> None:
    await client.initialize()  # Claude Code's capabilities: roots only
    ready.set()
    done = 0
    pending = -1
    while True:
        await client.wait_until(
            lambda done=done: len(client.of(CHANNEL)) > done or ledger.complete(), timeout=FINISH_BOUND_S
        )
        notes = client.of(CHANNEL)[done:]
        done += len(notes)
        todo = []
        for note in notes:
            meta = note.params["meta"]
            if meta.get("type") == "GAP":
                continue
            if meta.get("type") != "ERROR":
                ledger.deliver(meta["id"])
            todo.append({"seq": int(meta["seq"]), "id": meta["id"], "type": meta.get("type", "MESSAGE")})
        if todo:
            pending = await ack(client, todo, ledger)
        if ledger.complete():
            if pending != 0:
                pending = (await client.read_json(f"{ledger.uri}/status"))["pending"]
            if pending == 0:
                return


async def ack(client: RawClient, events: list[dict[str, Any]], ledger: Ledger) -> int:
    """Acknowledge ``events`` by seq; returns how many events are still pending on the server."""
    result = await client.call_tool("ack", {"seqs": [e["seq"] for e in events]})
    if result.get("isError"):
        ledger.bad_acks.append(result["content"][0]["text"])
        return -1
    for e in events:  # the call returned: the acknowledgement is durable
        if e.get("type", "MESSAGE") == "MESSAGE":
            ledger.acked(e["id"])
    return int(result["structuredContent"]["pending"])


async def run_inbox(kind: Kind, box: Path, agent: str, ledger: Ledger, rng: random.Random) -> None:
    """Start, consume, SIGKILL at random, restart; until everything is delivered and acknowledged."""
    ledger.uri = f"inbox://{agent}"
    while True:
        ledger.incarnation += 1
        killed = False
        async with raw_server(argv(box, agent)) as client:
            ledger.client = client

            ready = trio.Event()

            async def chaos(client: RawClient = client, ready: trio.Event = ready) -> None:
                nonlocal killed
                # The chaos schedule (sleeps here pace the faults; they do not wait for a condition).
                if rng.random() < 0.5:
                    await trio.sleep(rng.uniform(*KILL_AFTER_START_S))
                else:
                    await ready.wait()
                    await trio.sleep(rng.uniform(*KILL_AFTER_READY_S))
                if not ledger.writers_done:
                    client.proc.send_signal(signal.SIGKILL)
                    killed = True
                    ledger.kills += 1

            async with trio.open_nursery() as nursery:
                nursery.start_soon(chaos)
                try:
                    if kind == "reader":
                        await consume_reader(client, ledger, ready)
                    else:
                        await consume_channel(client, ledger, ready)
                    nursery.cancel_scope.cancel()
                    return
                except ServerGone:
                    nursery.cancel_scope.cancel()
                    if not killed:
                        raise
        await trio.sleep(rng.uniform(*DOWN_S))  # down time: writers keep appending


async def test_inbox_delivers_every_line_across_random_sigkills(
    tmp_path: Path, allow_files: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = []
    failures = []
    for rate in RATES:
        rng = random.Random(rate)
        ledgers: dict[Kind, Ledger] = {"reader": Ledger(), "channel": Ledger()}
        started = time.monotonic()
        async with trio.open_nursery() as nursery:
            for kind, ledger in ledgers.items():
                box = tmp_path / f"{kind}-{rate}"
                box.mkdir()
                allow_files(f"{box.name}/*")
                agent = f"{kind}{rate}"
                nursery.start_soon(run_inbox, kind, box, agent, ledger, random.Random(rng.random()))

                async def write_all(
                    box: Path = box, agent: str = agent, ledger: Ledger = ledger, rate: int = rate
                ) -> None:
                    async with trio.open_nursery() as writers:
                        for w in range(WRITERS):
                            writers.start_soon(
                                writer, box, agent, w, rate / WRITERS, ledger, random.Random(w)
                            )
                    ledger.finish_writing()

                nursery.start_soon(write_all)
        elapsed = time.monotonic() - started
        row = [f"{rate}/s", str(len(ledgers["reader"].written))]
        for kind, ledger in ledgers.items():
            extra, unexplained = ledger.duplicates()
            lost = ledger.lost()
            row += [str(ledger.kills), f"{len(lost)} / {extra} ({len(unexplained)})"]
            if lost:
                failures.append(f"{rate}/s {kind}: lost {len(lost)}: {sorted(lost)[:10]}")
            failures += [f"{rate}/s {kind}: {u}" for u in unexplained[:10]]
            failures += [f"{rate}/s {kind}: ack refused: {b}" for b in ledger.bad_acks[:5]]
        row.append(f"{elapsed:.1f} s")
        rows.append(row)
    header = [
        "rate", "lines", "reader kills", "reader lost / dup (unbounded)",
        "channel kills", "channel lost / dup (unbounded)", "time",
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    table = "\n".join(
        "| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in [header, *rows]
    )
    with capsys.disabled():
        print(
            f"\ninbox chaos (SIGKILL {KILL_AFTER_START_S[0]}-{KILL_AFTER_START_S[1]} s after a start, or "
            f"{KILL_AFTER_READY_S[0]}-{KILL_AFTER_READY_S[1]} s after it answered):\n{table}"
        )
    assert not failures, "\n".join(failures)

"""A burst of signed deliveries through the published example (fault catalog WH17, issue 37 item 1).

``examples/webhooks/github-issues.toml`` as shipped (one agent per delivery,
a spawn route over ``webhook://github/event/*`` with ``max_inflight = 4``,
its script model reading and acknowledging each delivery) takes deliveries
from 16 senders at once, far past its route's queue: every delivery is
answered 200, handled by exactly one agent (each agent's ``webhook__ack`` is
counted), none is left pending in the store, and agentd never restarts its
server. Was: with 350 deliveries, 90 were dropped (``coalesce_cap``) and
stayed pending until agentd restarted; the router now defers them
(rfcs/0372). This test then found a delivery listed twice (pushed out of the
server's newest-first list by newer arrivals, listed again while its agent
ran: a second agent); the list now shows the oldest pending (rfcs/0374).

1,000 deliveries run in the suite (about 100 s on a loaded two-core machine: an agent per
delivery, four at a time); 5,000 (the issue's figure) are ``slow``. The example keeps up to
10,000 deliveries (``--retain-count``): a burst past the retention would drop the oldest
pending ones with a GAP before an agent read them.
"""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.servers.webhook.sources import Credential, SourceSpec
from agentd.servers.webhook.store import DeliveryStore
from tests.support.agentd_proc import REPO, Agentd, run_agentd
from tests.support.leftovers import AllowedFiles
from tests.support.webhooks import (
    GITHUB_SECRET,
    dumps,
    example_env,
    free_port,
    github_headers,
    github_issue_labeled,
    post,
)

pytestmark = pytest.mark.fault

EXAMPLE = REPO / "examples" / "webhooks" / "github-issues.toml"
SENDERS = 16
CONNECT_BOUND = 60.0
PER_AGENT_BOUND = 0.5
"""Seconds per delivery allowed for the whole burst to be handled, plus CONNECT_BOUND: a hang guard
(measured: about 0.04 s per delivery on a loaded two-core machine), never a speed assertion."""


@pytest.fixture(autouse=True)
def _webhook_files(allow_files: AllowedFiles) -> None:
    allow_files("seg-*.jsonl", "state.json", "lock", "bin/agentd")


async def _until(a: Agentd, what: str, count: int, pred: Any, timeout: float) -> list[dict[str, Any]]:
    """The events named ``what`` (matching ``pred``) once there are ``count``: each event looked at
    once (a burst's telemetry is tens of thousands of lines), woken by each read, bounded."""
    seen: list[dict[str, Any]] = []
    at = 0
    with trio.fail_after(timeout):
        while len(seen) < count:
            changed = a._changed
            for event in a.events[at:]:
                if event.get("event") == what and pred(event):
                    seen.append(event)
            at = len(a.events)
            if len(seen) >= count:
                break
            if a.stderr_closed:
                raise AssertionError(f"agentd exited with {len(seen)} of {count} {what}:\n{a.tail()}")
            await changed.wait()
    return seen


def _bound(deliveries: int) -> float:
    """The whole test's hang guard: start-up, the burst handled, the drain."""
    return 3 * CONNECT_BOUND + PER_AGENT_BOUND * deliveries


@pytest.mark.parametrize(
    "deliveries",
    [
        pytest.param(1000, marks=pytest.mark.timeout(_bound(1000))),
        pytest.param(5000, marks=[pytest.mark.slow, pytest.mark.timeout(_bound(5000))]),
    ],
    ids=["1000", "5000"],
)
async def test_wh17_a_burst_from_16_senders_is_handled_once_each_with_none_left_pending(
    tmp_path: Path, deliveries: int
) -> None:
    port = free_port()
    answered: list[str] = []
    started = time.monotonic()
    async with run_agentd(["--config", str(EXAMPLE)], env=example_env(tmp_path, port)) as a:
        await _until(a, "upstream.connected", 1, lambda e: e["server"] == "webhook", CONNECT_BOUND)
        connected = time.monotonic()

        async def sender(k: int) -> None:
            for n in range(k, deliveries, SENDERS):
                body = dumps({**github_issue_labeled(number=n), "sender": k})
                reply = await post(port, "/hooks/github", body, github_headers(body, f"b-{n}"))
                assert reply.json() == {"ok": True, "id": f"b-{n}", "duplicate": False}, reply.body
                answered.append(f"b-{n}")

        async with trio.open_nursery() as nursery:
            for k in range(SENDERS):
                nursery.start_soon(sender, k)
        sent = time.monotonic()
        acks = await _until(
            a,
            "tool.call",
            deliveries,
            lambda e: e["tool"] == "ack",
            CONNECT_BOUND + PER_AGENT_BOUND * deliveries,
        )
        handled = time.monotonic()
        await _until(a, "subagent.exit", deliveries, lambda e: True, CONNECT_BOUND)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0, a.tail()
    print(
        f"WH17: {deliveries} deliveries from {SENDERS} senders: answered 200 in {sent - connected:.1f} s, "
        f"all handled {handled - connected:.1f} s after the first POST ({handled - started:.1f} s with start-up)"
    )
    assert len(answered) == deliveries
    assert all(e["server"] == "webhook" and e["error"] is None for e in acks)
    delivered = [uri for e in a.find("route.deliver") for uri in e["uris"]]
    expected = {f"webhook://github/event/b-{n}" for n in range(deliveries)}
    twice = {uri for uri in delivered if delivered.count(uri) > 1} if len(delivered) != deliveries else set()
    why = [
        e
        for e in a.events
        if e.get("uri") in twice or (isinstance(e.get("uris"), list) and set(e["uris"]) & twice)
    ]
    assert len(delivered) == deliveries, f"a delivery reached no agent, or two: {twice}\n" + "\n".join(
        map(str, why)
    )
    assert set(delivered) == expected
    assert len(a.find("subagent.spawn")) == deliveries
    assert len(acks) == deliveries
    assert not a.find("server.state", lambda e: e.get("state") == "restarting")
    assert not a.find("route.dropped")
    # None left pending: the store, read back as the next server would.
    spec = SourceSpec(
        "github", "github", secret=Credential((GITHUB_SECRET.encode(),), "$GITHUB_WEBHOOK_SECRET")
    )
    store = DeliveryStore(spec, str(tmp_path / "deliveries" / "github"), retain_count=deliveries)
    store.open()
    try:
        assert store.log.pending_count() == 0
        assert store.counters.evicted_unacknowledged == 0
    finally:
        store.close()

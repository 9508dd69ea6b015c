"""Re-opening subscriptions on a server that ends them: the flap counting of :class:`Upstream`.

A real MCP server (``tests/mcpservers/watch_server.py``) acknowledges each
``subscriptions/listen`` and ends it at once (``--listen flap``), or after a
while (``--flap-after``). Only the backoff waits are shortened; every stream is
a real one over stdio. Nothing sleeps: tests await the upstream's events.
"""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.events import ResourceChanged, SubscriptionStateChanged
from agentd.upstream import Upstream
from tests.mcpservers.helpers import Events, running_upstream
from tests.support.telemetry import RecordingTelemetry
from tests.support.watch import watch_spec

pytestmark = pytest.mark.process  # its servers run as child processes (tests/support helpers)

#: Resubscribe waits for these tests (the schedule's shape is the pure policy's test).
FAST = (0.01, 0.02, 0.04)

#: Bound on one awaited event.
WAIT = 15.0


def flapping(
    tmp_path: Path, *flags: str, attempts: int, **options: Any
) -> AbstractAsyncContextManager[tuple[Upstream, Events]]:
    """A running upstream to a watch server whose subscriptions end soon after they open."""
    spec = watch_spec("flappy", tmp_path / "ctl", "--listen", "flap", *flags)
    return running_upstream(
        spec,
        telemetry=RecordingTelemetry(),
        resubscribe_backoff=FAST,
        resubscribe_attempts=attempts,
        **options,
    )


async def test_a_server_that_ends_every_subscription_at_once_is_given_up_after_the_attempts(
    tmp_path: Path,
) -> None:
    send, recv = trio.open_memory_channel[object](1000)
    events = Events(recv)
    telemetry = RecordingTelemetry()
    spec = watch_spec("flappy", tmp_path / "ctl", "--listen", "flap")
    up = Upstream(spec, send, telemetry, resubscribe_backoff=FAST, resubscribe_attempts=3)
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        await up.subscribe("state://doc")
        failed = await events.next(SubscriptionStateChanged, within=WAIT, state="failed")
        # A failed subscription is not re-opened on the live connection: the next
        # thing on the channel is what this test posts itself.
        send.send_nowait("marker")
        assert await events.next(str, within=WAIT) == "marker"
        nursery.cancel_scope.cancel()
    assert (failed.uris, failed.attempt) == (frozenset({"state://doc"}), 3)
    states = [(e.state, e.attempt) for e in events.of(SubscriptionStateChanged)]
    assert states == [
        ("established", 0),
        ("lost", 0),
        ("resubscribing", 1),
        ("established", 1),
        ("lost", 0),
        ("resubscribing", 2),
        ("established", 2),
        ("lost", 0),
        ("resubscribing", 3),
        ("established", 3),
        ("lost", 0),
        ("failed", 3),
    ]
    # One synthetic re-read per re-establishment, none for the first: 3 in all, then nothing.
    assert events.of(ResourceChanged) == [ResourceChanged("flappy", "state://doc", "synthetic")] * 3
    lost = telemetry.find("subscription.lost")
    assert len(lost) == 4
    assert all(e["counted_as_failure"] and e["updates"] == 0 for e in lost)
    [gave_up] = telemetry.find("subscription.failed")
    assert gave_up["attempts"] == 3


async def test_zero_attempts_gives_up_at_the_first_loss(tmp_path: Path) -> None:
    async with flapping(tmp_path, attempts=0) as (up, events):
        await up.subscribe("state://doc")
        failed = await events.next(SubscriptionStateChanged, within=WAIT, state="failed")
    assert failed.attempt == 0
    assert [e.state for e in events.of(SubscriptionStateChanged)] == ["established", "lost", "failed"]
    assert events.of(ResourceChanged) == []


async def test_a_stream_that_stayed_up_long_enough_resets_the_count(tmp_path: Path) -> None:
    """Streams that live past ``stable_subscription`` are healthy: every re-open is attempt 1."""
    async with flapping(tmp_path, "--flap-after", "0.3", attempts=2, stable_subscription=0.1) as (up, events):
        await up.subscribe("state://doc")
        for _ in range(4):
            await events.next(SubscriptionStateChanged, within=WAIT, state="resubscribing")
    attempts = [e.attempt for e in events.of(SubscriptionStateChanged) if e.state == "resubscribing"]
    assert attempts == [1, 1, 1, 1]
    assert all(e.state != "failed" for e in events.of(SubscriptionStateChanged))


async def test_subscribing_again_after_giving_up_tries_again(tmp_path: Path) -> None:
    async with flapping(tmp_path, attempts=1) as (up, events):
        await up.subscribe("state://doc")
        await events.next(SubscriptionStateChanged, within=WAIT, state="failed")
        await up.subscribe("state://doc")  # a new watch asks for it: a fresh first attempt
        await events.next(SubscriptionStateChanged, within=WAIT, state="failed")
    established = [e for e in events.of(SubscriptionStateChanged) if e.state == "established"]
    assert [e.attempt for e in established] == [0, 1, 0, 1]


async def test_list_changed_streams_that_end_at_once_are_given_up_too(tmp_path: Path) -> None:
    telemetry = RecordingTelemetry()
    spec = watch_spec("flappy", tmp_path / "ctl", "--flap-catalog")
    async with running_upstream(spec, telemetry=telemetry, resubscribe_backoff=FAST) as (up, _events):
        with trio.fail_after(WAIT):
            while not telemetry.find("upstream.catalog_stream_failed"):
                # Each lost stream asks for a catalog refresh: wait for the next one.
                await up.wait_tools_changed(up.tools_version)
        # The connection itself stays up and serves calls.
        result = await up.call_tool("get_key", {"key": "x"})
    assert not result.is_error
    [failed] = telemetry.find("upstream.catalog_stream_failed")
    assert failed["attempts"] == 5

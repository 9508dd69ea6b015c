"""WatchStage: read → events → filter → dedupe → debounced notice, with exact virtual times."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import trio
import trio.testing

from agentd.watches.limits import WatchLimits
from agentd.watches.sandbox import FilterPool, WatchFilter
from agentd.watches.stage import WatchStage


def bid(phase: str, rv: str) -> dict:
    return {
        "metadata": {"name": "bid-1", "namespace": "m", "uid": "u1", "resourceVersion": rv},
        "status": {"phase": phase},
    }


def log(*events: dict) -> bytes:
    return orjson.dumps({"events": list(events)})


@pytest.fixture
def mock_clock():
    return trio.testing.MockClock(autojump_threshold=0)


async def test_state_burst_becomes_one_notice_at_exact_time(mock_clock):
    stage = WatchStage("notes", "memo://notes", shape="state")
    await stage.process_read('{"todo": "a"}', trio.current_time())
    assert stage.deadline() is None  # the baseline read delivers nothing
    start = trio.current_time()
    await stage.process_read('{"todo": "b", "owner": "ann"}', trio.current_time())
    await trio.sleep(2)
    await stage.process_read('{"todo": "b", "owner": "ann"}', trio.current_time())  # no change
    await stage.process_read('{"todo": "c", "owner": "ann"}', trio.current_time())
    assert stage.deadline() == start + 5
    await trio.sleep_until(stage.deadline())
    flushed = stage.flush(trio.current_time())
    assert flushed is not None
    notice, text = flushed
    assert trio.current_time() - start == 5
    assert notice.lines == ("MODIFIED todo (a→b)", "ADDED owner", "MODIFIED todo (b→c)")
    assert text.startswith('<watch-event name="notes" uri="memo://notes">\nMODIFIED todo (a→b)\n')
    assert stage.baseline() == {"shape": "state", "kind": "json", "value": {"todo": "c", "owner": "ann"}}


async def test_event_log_dedupe_noop_and_malformed_read(mock_clock):
    stage = WatchStage("bids", "kcp-events://bids", shape="event-log")
    await stage.process_read(log({"seq": 1, "type": "ADDED", "object": bid("Deciding", "1")}), 0.0)
    r = await stage.process_read(
        log(
            {"seq": 2, "type": "MODIFIED", "object": bid("Published", "2"), "old": bid("Deciding", "1")},
            {"seq": 3, "type": "MODIFIED", "object": bid("Published", "3"), "old": bid("Published", "2")},
        ),
        0.0,
    )
    assert [e["seq"] for e in r.events] == [2]  # seq 3 was a no-op
    assert r.kept == ["MODIFIED m/bid-1 (status.phase: Deciding→Published)"]
    bad = await stage.process_read(b"oops", 1.0)
    assert bad.error is not None
    assert "is not JSON" in bad.error
    assert bad.kept[0].startswith("ERROR in watch 'bids': watch read of 'kcp-events://bids'")
    flushed = stage.flush(4.0)
    assert flushed is not None
    assert len(flushed[0].lines) == 2


@pytest.fixture(scope="module")
def pool():
    with FilterPool(max_sessions=2) as p:
        yield p


async def test_filter_lines_dedupe_and_errors(pool):
    limits = WatchLimits(filter_time_secs=0.5)
    f = WatchFilter(
        'if event["type"] == "BOOM":\n    raise ValueError("bad")\n'
        'event["object"]["status"]["phase"] if event["type"] != "DELETED" else None',
        pool=pool,
        limits=limits,
    )
    stage = WatchStage(
        "bids",
        "u",
        shape="event-log",
        filter=f,
        limits=limits,
        baseline={"shape": "event-log", "last_seq": 0},
    )
    r = await stage.process_read(
        log(
            {"seq": 1, "type": "ADDED", "object": bid("Won", "1")},
            {"seq": 2, "type": "MODIFIED", "object": bid("Won", "2")},  # same line, same object: deduped
            {"seq": 3, "type": "DELETED", "object": bid("Won", "3")},  # filter drops
            {"seq": 4, "type": "BOOM", "object": bid("Won", "4")},
        ),
        10.0,
    )
    assert [o.kind for o in r.outcomes] == ["lines", "lines", "dropped", "error"]
    assert r.kept[0] == "Won"
    assert r.kept[1].startswith("ERROR in watch 'bids': on_event failed at line 2")
    assert "ValueError: bad" in r.kept[1]
    assert stage.deadline() == 13.0
    await f.aclose()


#: The design's own example filter: it reads ``event["object"]``, which GAP and ERROR events lack.
DESIGN_EXAMPLE = """
m = event["object"]["metadata"]
f'{event["type"].lower()} {m["namespace"]}/{m["name"]}' if event["type"] in ("ADDED", "DELETED") else None
"""


def event_log_stage(pool: Any, source: str, *, last_seq: int) -> tuple[WatchFilter, WatchStage]:
    """Watch ``cm`` of an event-log resource read up to ``last_seq``, through the filter ``source`` (0.5 s)."""
    f = WatchFilter(source, pool=pool, limits=WatchLimits(filter_time_secs=0.5))
    baseline = {"shape": "event-log", "last_seq": last_seq}
    return f, WatchStage("cm", "u", shape="event-log", filter=f, baseline=baseline)


async def test_gap_and_in_band_error_reach_the_notice_when_the_filter_fails_on_them(pool):
    """A read jumping from seq 1 to 7 plus an in-band ERROR, through a filter that breaks on both."""
    f, stage = event_log_stage(pool, DESIGN_EXAMPLE, last_seq=1)
    r = await stage.process_read(
        log(
            {"seq": 7, "type": "ADDED", "object": bid("Won", "7")},
            {"seq": 8, "type": "ERROR", "message": "watch of configmaps expired"},
        ),
        0.0,
    )
    assert [e["type"] for e in r.events] == ["GAP", "ADDED", "ERROR"]
    assert [o.kind for o in r.outcomes] == ["error", "lines", "error"]
    flushed = stage.flush(0.0, force=True)
    assert flushed is not None
    lines = flushed[0].lines
    assert lines == (
        "GAP: missed 5 events (seq 2..6): the server's ring moved on before they were read",
        "ERROR in watch 'cm': on_event failed at line 2, column 5: KeyError: object ×2",
        "added m/bid-1",
        "ERROR: watch of configmaps expired",
    )
    await f.aclose()


async def test_a_filter_that_drops_everything_cannot_drop_gap_or_error_but_may_add_lines(pool):
    f, stage = event_log_stage(
        pool, 'f"note: {event[\'type\']}" if event["type"] == "GAP" else None', last_seq=0
    )
    r = await stage.process_read(
        log(
            {"seq": 1, "type": "ADDED", "object": bid("Won", "1")},
            {"seq": 3, "type": "ERROR", "message": "source down"},
        ),
        0.0,
    )
    assert [o.kind for o in r.outcomes] == ["dropped", "lines", "dropped"]
    flushed = stage.flush(0.0, force=True)
    assert flushed is not None
    assert flushed[0].lines == (
        "GAP: missed 1 events (seq 2..2): the server's log has no events with these numbers",
        "note: GAP",
        "ERROR: source down",
    )
    await f.aclose()

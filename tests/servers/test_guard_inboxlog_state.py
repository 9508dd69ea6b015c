"""Mutation guards for servers/_inboxlog.py: the InboxLog state machine: feed, gaps, acks, refills, restarts and snapshots (scripts/mutate)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from agentd.servers import _inboxlog
from agentd.servers._inboxlog import INLINE_LINE_BYTES, SEQ_RESERVE, InboxLog, cursor_from_json, walk
from tests.support.inboxlog import URI, drain, line


def reloaded(log: InboxLog, data: bytes) -> InboxLog:
    """A new log from the old one's cursor file (JSON round trip), after the start-up drain."""
    cursor, ledger = cursor_from_json(orjson.loads(orjson.dumps(log.snapshot())))
    fresh = InboxLog(log.agent, log.uri, cursor, ledger, window=log.window_size)
    drain(fresh, data)
    return fresh


def walk_all(log: InboxLog, data: bytes) -> Any:
    start, seq, stop, _below = log.refill_request()
    return walk(
        lambda o, n: data[o : o + n],
        start=start,
        seq=seq,
        stop_offset=stop,
        notes=log.cursor.notes,
        agent=log.agent,
        uri=log.uri,
    )


def records(log: InboxLog, change: Callable[[], object]) -> None:
    """``change`` must reach the cursor file: the version the writers wait for rises past every earlier one."""
    before = log.version
    change()
    assert log.version > before


# ------------------------------------------------------------------ construction


def test_a_window_of_one_shows_one_message_and_zero_is_refused_by_name() -> None:
    log = InboxLog("bob", URI, window=1)
    drain(log, line(id="a") + line(id="b"))
    assert [e.id for e in log.window()] == ["b"]
    with pytest.raises(ValueError, match=r"^window must be at least 1, got 0$"):
        InboxLog("bob", URI, window=0)


def test_the_gap_names_where_each_hidden_message_is_read() -> None:
    log = InboxLog("bob", URI, window=1)
    drain(log, line(id="a") + line(id="b"))
    gap = orjson.loads(log.body())["gap"]
    assert gap["message"].endswith("each is readable by id at inbox://bob/message/{id}")
    other = InboxLog("bob", URI, window=1, item_uri="webhook://x/delivery/{id}", noun="delivery")
    drain(other, line(id="a") + line(id="b"))
    message = orjson.loads(other.body())["gap"]["message"]
    assert message.startswith(
        "1 older pending delivery(s) (seq 1..1) are not shown; they stay on disk and come"
    )
    assert message.endswith("each is readable by id at webhook://x/delivery/{id}")


def test_memory_holds_twice_the_window_before_the_disk_is_walked() -> None:
    log = InboxLog("bob", URI, window=2)
    drain(log, b"".join(line(id=f"m{i}") for i in range(1, 7)))
    assert not log.needs_refill()
    log.ack_seqs([5, 6])
    # Four were in memory (2 x window): the next two show without reading the file.
    assert [e.id for e in log.window()] == ["m3", "m4"]
    assert not log.needs_refill()
    log.ack_seqs([3, 4])
    assert log.window() == []
    assert log.needs_refill()


def test_a_fresh_log_has_nothing_to_record_and_an_empty_drain_changes_nothing() -> None:
    log = InboxLog("bob", URI)
    assert log.version == 0  # the webhook store writes its state file only when this is non-zero
    assert log.finish_drain() == []
    assert log.deferral is None
    assert log.version == 0


# ------------------------------------------------------------------ the version the cursor writers wait on


def test_every_recorded_change_raises_the_version() -> None:
    data = line(id="a", **{"from": "alice"}) + line(id="b") + line(id="c") + line(id="d")
    log = InboxLog("bob", URI)
    records(log, log.touch)
    records(log, log.touch)
    records(log, lambda: drain(log, data))  # the first message reserves seqs (top)
    records(log, lambda: log.ack_seqs([2]))  # out of order: only the acked set changes
    records(log, lambda: log.error("boom"))
    records(log, lambda: log.gap_note("lost", {"count": 1}))
    records(log, lambda: log.ack_through(1))
    records(log, lambda: log.ack_through(6))
    records(log, lambda: log.restart_at(0, "rewritten"))
    records(log, log.touch)
    drain(log, data)
    log.ack_through(log.next_seq - 1)
    records(log, lambda: drain(log, data + b"\n"))  # nothing pending: only the position moves past the blank


def test_acknowledging_only_hidden_events_is_recorded() -> None:
    log = InboxLog("bob", URI, window=1, mem_cap=1)
    drain(log, line(id="a") + line(id="b") + line(id="c"))
    log.touch()
    records(log, lambda: log.ack_through(1))  # "a" is on disk only; "b" still hides below "c"
    assert log.pending_count() == 2


# ------------------------------------------------------------------ body and gap


def test_the_body_lists_the_window_and_a_gap_only_when_something_is_hidden() -> None:
    log = InboxLog("bob", URI, window=2)
    drain(log, line(id="a") + line(id="b"))
    assert orjson.loads(log.body()) == {"events": [e.event for e in log.window()], "pending": 2}
    assert log.gap() is None


def test_the_gap_names_the_urgent_messages_below_the_window_only() -> None:
    log = InboxLog("bob", URI, window=1, mem_cap=8)
    data = (
        line(id="u1", urgent=True) + line(id="u2", urgent=True) + line(id="n") + line(id="top", urgent=True)
    )
    drain(log, data)
    body = orjson.loads(log.body())
    assert [e["id"] for e in body["events"]] == ["top"]
    gap = body["gap"]
    assert (gap["count"], gap["first_seq"], gap["last_seq"]) == (3, 1, 3)
    assert gap["urgent_ids"] == ["u2", "u1"]  # the shown urgent "top" is not named again
    assert gap["message"].endswith("; urgent among them: 'u2', 'u1'")


# ------------------------------------------------------------------ feed


def test_a_complete_last_line_without_its_newline_is_delivered_at_its_offset() -> None:
    first = line(id="a")
    log = InboxLog("bob", URI)
    drain(log, first)
    data = first + line(id="b") + b'{"id": "c"}'
    fed = log.feed(data[log.head :], at_eof=True)
    assert [(e.id, e.seq, e.offset) for e in fed.entries] == [
        ("b", 2, len(first)),
        ("c", 3, len(first) + len(line(id="b"))),
    ]
    assert fed.consumed == len(data) - len(first)
    assert fed.stop is None
    assert log.head == len(data)


def test_trailing_blanks_after_the_last_line_wait_for_more() -> None:
    log = InboxLog("bob", URI)
    fed = log.feed(line(id="a") + b"   ", at_eof=True)
    assert [e.id for e in fed.entries] == ["a"]
    assert fed.consumed == len(line(id="a"))
    assert fed.stop is None


def test_a_line_longer_than_the_data_read_is_reported_only_when_it_holds_no_newline() -> None:
    log = InboxLog("bob", URI)
    fed = log.feed(b'{"id": "a", "te', at_eof=False)
    assert (fed.long_line, fed.consumed, fed.entries) == (True, 0, [])
    fed = log.feed(line(id="a") + b'{"id": "b"', at_eof=False)
    assert (fed.long_line, fed.consumed, [e.id for e in fed.entries]) == (False, len(line(id="a")), ["a"])
    fed = log.feed(b"", at_eof=False)
    assert (fed.long_line, fed.consumed) == (False, 0)


def _last_line(size: int) -> bytes:
    """A JSON object of exactly ``size`` bytes, no newline."""
    head = b'{"id": "big", "text": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


def test_a_last_line_without_newline_is_taken_up_to_one_mib() -> None:
    limit = 64 * INLINE_LINE_BYTES
    log = InboxLog("bob", URI)
    fed = log.feed(_last_line(limit), at_eof=True)
    assert [e.id for e in fed.entries] == ["big"]
    log = InboxLog("bob", URI)
    fed = log.feed(_last_line(limit + 1), at_eof=True)
    assert fed.entries == []
    assert fed.stop == (0, "an incomplete last line")


def test_a_line_over_the_limit_fed_whole_becomes_an_error_in_the_feed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_inboxlog, "MAX_LINE_BYTES", 100)
    first = line(id="a")
    at_limit = b'{"id": "fits", "text": "' + b"y" * (100 - 27) + b'"}\n'
    assert len(at_limit) == 100
    long = b'{"id": "huge", "text": "' + b"y" * 200 + b'"}\n'
    data = first + at_limit + long + line(id="b")
    log = InboxLog("bob", URI)
    fed = log.feed(data, at_eof=True)
    start = len(first) + len(at_limit)
    end = start + len(long)
    assert [(e.kind, e.seq) for e in fed.entries] == [
        ("MESSAGE", 1),
        ("MESSAGE", 2),
        ("ERROR", 3),
        ("MESSAGE", 4),
    ]
    assert fed.entries[3].id == "b"
    message = fed.entries[2].event["message"]
    assert message.startswith(f"the line at bytes {start}..{end} of the inbox is {len(long)} bytes, over the")
    # A restart walks over the same line and meets its error instead of raising another.
    again = reloaded(log, data)
    assert [(e.id, e.seq) for e in again.window()] == [
        ("a", 1),
        ("fits", 2),
        (fed.entries[2].id, 3),
        ("b", 4),
    ]


def test_a_skipped_line_names_the_limit_in_mib() -> None:
    log = InboxLog("bob", URI)
    entry = log.skip_long_line(_inboxlog.MAX_LINE_BYTES + 1)
    assert entry is not None
    assert (
        "bytes, over the 64 MiB limit; it was skipped (split it into smaller messages)"
        in entry.event["message"]
    )


def test_a_restart_walk_meets_each_earlier_error_at_its_own_place(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_inboxlog, "MAX_LINE_BYTES", 100)
    long = b'{"id": "huge", "text": "' + b"y" * 200 + b'"}\n'
    data = line(id="a") + long + line(id="b")
    log = InboxLog("bob", URI)
    drain(log, data)
    late = log.error("raised after b")
    assert late.seq == 4
    again = reloaded(log, data)
    # The error raised after "b" keeps its place: "b" is still seq 3, not renumbered above it.
    assert [(e.id, e.seq) for e in again.window()] == [("a", 1), ("error-2", 2), ("b", 3), ("error-4", 4)]


# ------------------------------------------------------------------ errors, gap notes, ledger


def test_an_error_and_a_gap_note_say_what_they_were_given_and_survive_a_restart() -> None:
    data = line(id="a")
    log = InboxLog("bob", URI)
    drain(log, data)
    error = log.error("the source stopped")
    gap = log.gap_note("3 deliveries fell off", {"count": 3, "first_seq": 7, "last_seq": 9})
    assert (error.kind, error.id, error.offset, error.event["message"]) == (
        "ERROR",
        "error-2",
        len(data),
        "the source stopped",
    )
    assert (gap.kind, gap.seq, gap.offset, gap.text) == ("ERROR", 3, len(data), "3 deliveries fell off")
    assert gap.event == {
        "seq": 3,
        "type": "GAP",
        "id": "gap-3",
        "count": 3,
        "first_seq": 7,
        "last_seq": 9,
        "message": "3 deliveries fell off",
    }
    again = reloaded(log, data)
    assert [e.event for e in again.window()] == [e.event for e in log.window()]


def test_acknowledging_a_message_records_its_sender_and_an_error_records_none() -> None:
    data = line(id="a", **{"from": "alice"}) + line(id="b")
    log = InboxLog("bob", URI)
    drain(log, data)
    error = log.error("boom")
    log.ack_seqs([1, 2, error.seq])
    senders = log.snapshot()["ledger"]["senders"]
    assert senders == {"a": "alice", "b": None}


# ------------------------------------------------------------------ acknowledgements and the cursor position


def test_ack_through_the_first_pending_seq_acknowledges_it() -> None:
    log = InboxLog("bob", URI)
    drain(log, line(id="a") + line(id="b"))
    assert log.ack_through(0) == 0
    assert log.pending_count() == 2
    assert log.ack_through(1) == 1
    assert [e.id for e in log.window()] == ["b"]
    assert not log.is_pending(1)
    assert log.is_pending(2)
    assert not log.is_pending(3)  # not handed out yet


def test_the_cursor_moves_past_blank_lines_and_acknowledged_errors() -> None:
    data = line(id="a") + b"\n\n"
    log = InboxLog("bob", URI)
    drain(log, data)
    log.ack_seqs([1])
    assert (log.snapshot()["offset"], log.snapshot()["seq"]) == (len(data), 2)
    error = log.error("boom")
    log.ack_seqs([error.seq])
    snap = log.snapshot()
    assert (snap["offset"], snap["seq"], snap["acked"], snap["notes"]) == (len(data), 3, [], [])


def test_a_drain_with_nothing_new_keeps_the_recorded_digests() -> None:
    data = line(id="a")
    log = InboxLog("bob", URI)
    drain(log, data)
    log.ack_seqs([1])
    log.cursor.check, log.cursor.anchor = "c" * 64, "a" * 64  # what the cursor writer fills in
    version = log.version
    assert drain(log, data) == []
    assert (log.snapshot()["check"], log.snapshot()["anchor"]) == ("c" * 64, "a" * 64)
    assert log.version == version


# ------------------------------------------------------------------ needs_refill and refill


def test_needs_refill_only_when_something_waits_on_disk() -> None:
    log = InboxLog("bob", URI, window=2, mem_cap=2)
    drain(log, line(id="a"))
    assert not log.needs_refill()  # the window is short, but nothing is hidden
    drain(log, line(id="a") + line(id="b") + line(id="c"))
    log.ack_seqs([3])
    assert log.hidden_count() == 1
    assert log.needs_refill()


def test_a_refill_takes_only_what_fits_and_moves_the_cursor_to_the_first_pending() -> None:
    data = b"".join(line(id=i) for i in "abcd")
    log = InboxLog("bob", URI, window=1, mem_cap=1)
    drain(log, data)
    log.ack_seqs([1])
    log.ack_seqs([4])
    assert log.needs_refill()
    start, seq, stop, below = log.refill_request()
    assert (start, seq, stop, below) == (0, 1, len(data), None)
    added = log.refill(walk_all(log, data), below=below)
    assert [e.id for e in added] == ["c"]
    snap = log.snapshot()
    assert (snap["offset"], snap["seq"]) == (len(line(id="a")), 2)
    # b is still pending on disk, below c.
    assert log.needs_refill() is False  # the window (1) is full
    log.ack_seqs([3])
    added = log.refill(walk_all(log, data), below=log.refill_request()[3])
    assert [e.id for e in added] == ["b"]


def test_a_refill_stops_at_the_lowest_event_in_memory() -> None:
    data = b"".join(line(id=i) for i in "abcde")
    log = InboxLog("bob", URI, window=2, mem_cap=2)
    drain(log, data)
    assert [e.id for e in log.window()] == ["d", "e"]
    log.ack_seqs([5])
    _start, _seq, _stop, below = log.refill_request()
    assert below == 4
    whole = walk(
        lambda o, n: data[o : o + n],
        start=0,
        seq=1,
        stop_offset=len(data),
        notes=[],
        agent="bob",
        uri=URI,
    )
    added = log.refill(whole, below=below)
    assert [e.id for e in added] == ["c"]
    assert [e.id for e in log.window()] == ["c", "d"]


def test_a_refill_that_meets_nothing_pending_changes_nothing() -> None:
    data = line(id="a")
    log = InboxLog("bob", URI)
    drain(log, data)
    before = log.snapshot()
    assert log.refill(iter(()), below=None) == []
    assert log.snapshot() == before


# ------------------------------------------------------------------ restart_at and the cursor file


def test_restart_at_resumes_at_the_offset_and_says_why() -> None:
    data = line(id="a") + line(id="b")
    log = InboxLog("bob", URI)
    drain(log, data)
    error = log.restart_at(len(line(id="a")), "the inbox was rewritten")
    assert error.event["message"] == "the inbox was rewritten"
    snap = log.snapshot()
    assert (snap["offset"], snap["seq"]) == (len(line(id="a")), error.seq)
    assert snap["top"] >= error.seq
    # The drain after a restart stops at an unfinished line like any other.
    data += b'{"id": "c", "te'
    assert [e.id for e in drain(log, data)] == ["b"]
    assert log.deferral is not None
    assert log.deferral.offset == len(line(id="a") + line(id="b"))
    assert log.restart_at(0, "again").seq > error.seq
    assert log.finish_drain() == []


def test_the_cursor_file_round_trips_every_field() -> None:
    data = line(id="a", **{"from": "alice"}) + line(id="b") + line(id="c")
    log = InboxLog("bob", URI)
    drain(log, data)
    log.ack_seqs([1, 3])
    log.error("boom")
    log.cursor.check, log.cursor.anchor = "c" * 64, "a" * 64
    snap = log.snapshot()
    assert snap["version"] == 1
    assert snap["top"] == 2 + SEQ_RESERVE  # reserved when seq 1 was handed out
    cursor, ledger = cursor_from_json(orjson.loads(orjson.dumps(snap)))
    again = InboxLog("bob", URI, cursor, ledger)
    assert again.snapshot() == snap
    assert snap["ledger"]["senders"] == {"a": "alice", "c": None}

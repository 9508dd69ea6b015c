"""The inbox's pure delivery logic: seqs, window, gap, acknowledgements, restarts, rewrites."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from agentd.servers import _inboxlog
from agentd.servers._inboxlog import (
    DEFER_WARN_AFTER,
    INLINE_LINE_BYTES,
    TEXT_CAP,
    AckError,
    InboxLog,
    channel_params,
    cursor_from_json,
    walk,
)
from agentd.servers._intervals import IntervalSet
from tests.support.inboxlog import URI, drain, line


def restarted(log: InboxLog, data: bytes, **kw: Any) -> InboxLog:
    """A new log from the old one's persisted cursor, after the start-up drain."""
    cursor, ledger = cursor_from_json(orjson.loads(orjson.dumps(log.snapshot())))
    fresh = InboxLog(log.agent, log.uri, cursor, ledger, window=log.window_size, **kw)
    drain(fresh, data)
    return fresh


def refill(log: InboxLog, data: bytes) -> list[Any]:
    start, seq, stop, below = log.refill_request()
    walked = walk(
        lambda o, n: data[o : o + n],
        start=start,
        seq=seq,
        stop_offset=stop,
        notes=log.cursor.notes,
        agent=log.agent,
        uri=log.uri,
    )
    return log.refill(walked, below=below)


def test_window_lists_urgent_first_and_seq_is_file_order() -> None:
    data = line(id="a") + line(id="b", urgent=True) + line(id="c") + line(id="d", urgent=True)
    log = InboxLog("bob", URI)
    drain(log, data)
    assert [(e.id, e.seq) for e in log.window()] == [("b", 2), ("d", 4), ("a", 1), ("c", 3)]
    assert log.pending_count() == 4
    assert log.window()[2].event["urgent"] is False


def test_blank_lines_are_skipped_and_never_look_like_a_rewrite() -> None:
    data = line(id="a") + b"\n\n   \n" + line(id="b") + b"\n"
    log = InboxLog("bob", URI)
    drain(log, data)
    assert [e.id for e in log.window()] == ["a", "b"]
    assert log.ack_seqs([1]) == [1]
    data += b"\n" + line(id="c")
    drain(log, data)
    again = restarted(log, data)
    assert [(e.id, e.seq) for e in again.window()] == [("b", 2), ("c", 3)]
    assert not [e for e in again.window() if e.kind == "ERROR"]


def test_missing_id_is_synthesised_from_the_offset() -> None:
    data = b"\n" + line(text="hi")
    log = InboxLog("bob", URI)
    drain(log, data)
    assert log.window()[0].id == "bob@1"


def test_partial_last_line_waits_then_is_delivered() -> None:
    data = line(id="a") + b'{"id": "b", "te'
    log = InboxLog("bob", URI)
    drain(log, data)
    assert [e.id for e in log.window()] == ["a"]
    assert log.deferral is not None
    assert (log.deferral.offset, log.deferral.reason) == (len(line(id="a")), "an incomplete last line")
    data += b'xt": "x"}\n' + line(id="c")
    drain(log, data)
    assert [(e.id, e.seq) for e in log.window()] == [("a", 1), ("b", 2), ("c", 3)]
    assert log.deferral is None


def test_an_invalid_line_blocks_and_is_named_after_three_drains() -> None:
    data = b"garbage\n" + line(id="a")
    log = InboxLog("bob", URI)
    errors = []
    for _ in range(DEFER_WARN_AFTER + 2):
        errors += [e for e in drain(log, data) if e.kind == "ERROR"]
    assert log.deferral is not None
    assert log.deferral.attempts == DEFER_WARN_AFTER + 2
    assert [e.event["message"] for e in errors] == [
        "byte 0 of the inbox is a line that is not a JSON object after 3 attempts; delivery waits there: "
        "finish or fix that line (each line must be one JSON object)"
    ]
    assert [e.kind for e in log.window()] == ["ERROR"]


def test_a_last_line_still_being_written_is_not_a_failed_attempt() -> None:
    log = InboxLog("bob", URI)
    data = b'{"id": "a", "text": "'
    for _ in range(DEFER_WARN_AFTER + 2):
        data += b"more "  # a slow writer: the line grows between drains
        assert [e for e in drain(log, data) if e.kind == "ERROR"] == []
    assert log.deferral is not None
    assert log.deferral.attempts == 1
    errors = []
    for _ in range(DEFER_WARN_AFTER):  # the writer stopped: these are real attempts
        errors += [e for e in drain(log, data) if e.kind == "ERROR"]
    assert len(errors) == 1
    assert "is an incomplete last line after 3 attempts" in errors[0].event["message"]


def test_restart_keeps_seqs_and_errors_and_drops_what_was_acknowledged() -> None:
    data = line(id="a") + b"junk\n"
    log = InboxLog("bob", URI)
    for _ in range(DEFER_WARN_AFTER):
        drain(log, data)
    (error,) = [e for e in log.window() if e.kind == "ERROR"]
    data = line(id="a") + line(id="fixed") + line(id="c")  # the bad line fixed in place, one more appended
    drain(log, data)
    before = {e.id: e.seq for e in log.window()}
    assert before == {"a": 1, error.id: 2, "fixed": 3, "c": 4}
    log.ack_seqs([1])
    after = restarted(log, data)
    assert {e.id: e.seq for e in after.window()} == {error.id: 2, "fixed": 3, "c": 4}
    # Appended after the restart: the next number, never one handed out before.
    data += line(id="d")
    drain(after, data)
    assert after.window()[-1].seq == 5


def test_acknowledging_a_later_message_acknowledges_the_errors_before_it() -> None:
    log = InboxLog("bob", URI)
    log.error("something broke")
    data = line(id="a")
    drain(log, data)
    assert [e.kind for e in log.window()] == ["ERROR", "MESSAGE"]
    log.ack_seqs([2])
    assert log.window() == []
    assert log.pending_count() == 0
    assert (log.cursor.offset, log.cursor.seq) == (len(data), 3)


def test_an_acknowledged_error_above_the_position_keeps_its_place_in_the_numbering() -> None:
    data = line(id="a") + line(id="b")
    log = InboxLog("bob", URI)
    drain(log, data)
    log.error("something broke")  # seq 3
    data += line(id="c")
    drain(log, data)
    log.ack_seqs([4])  # c; the error before it counts as read
    log.ack_seqs([1])  # a: the position moves to b, below the acknowledged error and c
    assert (log.cursor.seq, [e.id for e in log.window()]) == (2, ["b"])
    data += line(id="d")
    again = restarted(log, data)
    assert [(e.id, e.seq) for e in again.window()] == [("b", 2), ("d", 5)]


def test_window_gap_and_refill_newest_first() -> None:
    data = b"".join(line(id=f"m{i}", urgent=i == 7) for i in range(1, 11))
    log = InboxLog("bob", URI, window=3, mem_cap=4)
    drain(log, data)
    assert [e.seq for e in log.window()] == [8, 9, 10]
    gap = log.gap()
    assert gap is not None
    assert (gap["count"], gap["first_seq"], gap["last_seq"]) == (7, 1, 7)
    assert "7 older pending message(s) (seq 1..7) are not shown" in gap["message"]
    assert gap["urgent_ids"] == ["m7"]  # an urgent one just below the window is named
    assert gap["message"].endswith("urgent among them: 'm7'")
    body = json.loads(log.body())
    assert body["pending"] == 10
    assert body["gap"]["count"] == 7
    seen = [8, 9, 10]
    while log.pending_count():
        log.ack_seqs([e.seq for e in log.window()])
        if log.needs_refill():
            refill(log, data)
        shown = sorted(e.seq for e in log.window())
        assert not shown or max(shown) < min(seen)  # the hidden ones come back, newest first
        seen = shown + seen
    assert seen == list(range(1, 11))
    assert (log.cursor.offset, log.cursor.seq) == (len(data), 11)


def test_a_reused_id_is_never_acknowledged_by_accident() -> None:
    data = line(id="x", text="first") + b"\n" + line(id="x", text="second") + b"\n\n"
    log = InboxLog("bob", URI)
    drain(log, data)
    assert [(e.id, e.seq) for e in log.window()] == [("x", 1), ("x", 2)]
    with pytest.raises(
        AckError, match=r"id 'x' names 2 pending messages \(seq 1: 'first', seq 2: 'second'\)"
    ):
        log.resolve_id("x")
    (chosen,) = log.resolve_id("x", seq=2)
    log.ack_seqs([chosen.seq])
    assert [e.text for e in restarted(log, data).window()] == ["first"]


def test_ack_through_covers_hidden_events_and_ack_seqs_refuses_unknown_ones() -> None:
    data = b"".join(line(id=f"m{i}") for i in range(1, 9))
    log = InboxLog("bob", URI, window=2, mem_cap=2)
    drain(log, data)
    with pytest.raises(AckError, match=r"seq 9 is not an event of inbox://bob \(the newest is 8\)"):
        log.ack_seqs([1, 9])
    assert log.pending_count() == 8
    assert log.ack_through(5) == 5
    assert log.pending_count() == 3
    refill(log, data)
    assert [e.seq for e in log.window()] == [7, 8]
    assert log.needs_refill() is False
    assert log.hidden_count() == 1  # seq 6: in no window yet, pending on disk


def test_restart_at_renumbers_above_everything_handed_out() -> None:
    data = line(id="a") + line(id="b")
    log = InboxLog("bob", URI)
    drain(log, data)
    top = log.cursor.top
    error = log.restart_at(0, "the inbox was rewritten")
    assert error.seq > top
    drain(log, data)
    assert [(e.id, e.seq > top) for e in log.window()] == [(error.id, True), ("a", True), ("b", True)]


def test_big_lines_are_summarised_and_channel_text_is_capped() -> None:
    text = "x" * (INLINE_LINE_BYTES + 10)
    data = line(id="big", text=text, blob=[1, 2, 3])
    log = InboxLog("bob", URI)
    (entry,) = drain(log, data)
    assert entry.event["truncated"] is True
    assert entry.event["size"] == len(data)
    assert entry.event["message_uri"] == "inbox://bob/message/big"
    assert "blob" not in entry.event
    assert len(entry.event["text"]) < TEXT_CAP + 200
    params = channel_params(entry, agent="bob")
    assert len(params["content"]) < TEXT_CAP + 200
    assert params["content"].endswith("read inbox://bob/message/big]")
    assert params["meta"]["id"] == "big"
    assert all(isinstance(v, str) for v in params["meta"].values())


def test_channel_meta_keys_are_identifiers_and_values_capped() -> None:
    data = line(id=1, **{"odd key!": "v" * 1000, "n": 3})
    log = InboxLog("bob", URI)
    (entry,) = drain(log, data)
    meta = channel_params(entry, agent="bob")["meta"]
    assert meta["odd_key_"].endswith("…")
    assert len(meta["odd_key_"]) <= 257
    assert meta["n"] == "3"
    assert meta["id"] == "1"


def test_a_line_over_the_limit_is_skipped_with_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_inboxlog, "MAX_LINE_BYTES", 100)
    data = line(id="a") + b'{"id": "huge", "text": "' + b"y" * 200 + b'"}\n' + line(id="b")
    log = InboxLog("bob", URI)
    fed = log.feed(data[: len(line(id="a"))], at_eof=False)
    assert [e.id for e in fed.entries] == ["a"]
    long_end = data.index(b"\n", log.head) + 1
    error = log.skip_long_line(long_end)
    assert error is not None
    assert "of the inbox is 227 bytes, over the" in error.event["message"]
    drain(log, data)
    assert [(e.id, e.seq) for e in log.window()] == [("a", 1), (error.id, 2), ("b", 3)]
    again = restarted(log, data)  # the walk steps over the long line the same way
    assert [(e.id, e.seq) for e in again.window()] == [("a", 1), (error.id, 2), ("b", 3)]


def test_cursor_file_errors_name_the_field() -> None:
    with pytest.raises(ValueError, match=r"offset must be an integer >= 0, got -1"):
        cursor_from_json({"offset": -1})
    with pytest.raises(ValueError, match=r"acked must be a list of \[start, end\] pairs"):
        cursor_from_json({"acked": [[1]]})


@pytest.mark.parametrize("field", ["acked", "notes"])
@pytest.mark.parametrize("value", [5, 2.5, True])
def test_cursor_file_with_a_scalar_list_field_is_a_value_error(field: str, value: object) -> None:
    # A ValueError makes the server move the file aside and start over; any other error stopped it.
    with pytest.raises(ValueError, match=rf"{field} must be a list, got {value!r}"):
        cursor_from_json({field: value})


# ----------------------------------------------------------------------------- interval set


@pytest.mark.parametrize("seed", range(3))
def test_interval_set_matches_a_plain_set(seed: int) -> None:
    import random

    rng = random.Random(seed)
    ref: set[int] = set()
    s = IntervalSet()
    for _ in range(400):
        op = rng.random()
        if op < 0.5:
            x = rng.randrange(60)
            assert s.add(x) == (x not in ref)
            ref.add(x)
        elif op < 0.8:
            a = rng.randrange(60)
            b = a + rng.randrange(6)
            s.add_range(a, b)
            ref |= set(range(a, b))
        else:
            lo = rng.randrange(60)
            s.trim_below(lo)
            ref = {x for x in ref if x >= lo}
        assert len(s) == len(ref)
        lo, hi = sorted((rng.randrange(70), rng.randrange(70)))
        assert s.count_in(lo, hi) == len([x for x in ref if lo <= x < hi])
        assert list(s.missing(lo, hi)) == [x for x in range(lo, hi) if x not in ref]
        assert s.first_missing(lo) == min(x for x in range(lo, 200) if x not in ref)
        if hi > 0:
            assert s.last_missing(hi) == max(x for x in range(-1, hi) if x not in ref)
        starts = [a for a, _ in s.ranges()]
        assert starts == sorted(starts)
        assert all(e1 < s2 for (_, e1), (s2, _) in zip(s.ranges(), s.ranges()[1:], strict=False))


# ----------------------------------------------------------------------------- property: nothing lost


class InboxModel(RuleBasedStateMachine):
    """Random appends, acknowledgements of what was shown, refills and restarts.

    Invariants: a message is only ever acknowledged after it was shown (so if
    the run ends with nothing pending, every message was shown at least
    once); a pending message keeps its seq across restarts; nothing
    acknowledged is shown again; the window and the gap add up.
    """

    def __init__(self) -> None:
        super().__init__()
        self.data = b""
        self.log = InboxLog("bob", URI, window=3, mem_cap=5)
        self.n = 0
        self.seq_of: dict[str, int] = {}  # message id -> seq (ids are unique here)
        self.shown: set[str] = set()
        self.acked: set[str] = set()

    def _look(self) -> None:
        for e in self.log.window():
            if e.kind == "MESSAGE":
                assert e.id not in self.acked, f"{e.id} shown after it was acknowledged"
                known = self.seq_of.setdefault(e.id, e.seq)
                assert known == e.seq, f"{e.id} changed seq {known} -> {e.seq}"
                self.shown.add(e.id)

    @rule(k=st.integers(1, 6), urgent=st.booleans(), blank=st.booleans())
    def append(self, k: int, urgent: bool, blank: bool) -> None:
        for _ in range(k):
            self.n += 1
            self.data += line(id=f"m{self.n}", urgent=urgent and self.n % 2 == 0) + (b"\n" if blank else b"")
        drain(self.log, self.data)
        self._look()

    @rule()
    def error(self) -> None:
        self.log.error("an in-band error")
        self._look()

    @rule(data=st.data())
    def ack_some_shown(self, data: st.DataObject) -> None:
        shown = [e for e in self.log.window() if e.kind == "MESSAGE"]
        if not shown:
            return
        chosen = data.draw(st.lists(st.sampled_from(shown), max_size=len(shown), unique_by=lambda e: e.seq))
        self.log.ack_seqs([e.seq for e in chosen])
        self.acked |= {e.id for e in chosen}
        self._look()

    @precondition(lambda self: self.log.needs_refill())
    @rule()
    def refill(self) -> None:
        refill(self.log, self.data)
        self._look()

    @rule()
    def restart(self) -> None:
        self.log = restarted(self.log, self.data)
        self._look()

    @invariant()
    def adds_up(self) -> None:
        shown = self.log.window()
        assert len(shown) <= 3
        gap = self.log.gap(shown)
        assert len(shown) + (gap["count"] if gap else 0) == self.log.pending_count()
        pending_ids = {f"m{i}" for i in range(1, self.n + 1)} - self.acked
        errors = sum(1 for n in self.log.cursor.notes if self.log.is_pending(n.seq))
        assert self.log.pending_count() == len(pending_ids) + errors

    def teardown(self) -> None:
        # Drain everything the way a consumer does; every message must have been shown.
        for _ in range(10 * (self.n + 1)):
            if not self.log.pending_count():
                break
            if self.log.needs_refill():
                refill(self.log, self.data)
            self._look()
            shown = self.log.window()
            self.acked |= {e.id for e in shown}
            self.log.ack_seqs([e.seq for e in shown])
        assert self.log.pending_count() == 0
        assert self.shown == {f"m{i}" for i in range(1, self.n + 1)}


TestInboxModel = InboxModel.TestCase

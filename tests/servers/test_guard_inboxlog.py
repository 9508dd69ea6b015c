"""The inbox log's acknowledgements guard what has not arrived yet (mutation-tested: docs/testing.md)."""

from __future__ import annotations

from agentd.servers._inboxlog import InboxLog
from tests.support.inboxlog import URI, line


def test_ack_through_past_the_newest_event_leaves_later_messages_pending() -> None:
    log = InboxLog("bob", URI)
    data = line(id="a") + line(id="b")
    log.feed(data, at_eof=True)
    log.finish_drain()
    # A consumer acknowledges "through 10" while only seqs 1 and 2 exist.
    assert log.ack_through(10) == 2
    assert log.pending_count() == 0
    later = log.feed(line(id="c"), at_eof=True)
    log.finish_drain()
    # Seq 3 arrived after the acknowledgement: it is pending, shown, and counted.
    assert [(e.id, e.seq) for e in later.entries] == [("c", 3)]
    assert log.is_pending(3)
    assert log.pending_count() == 1
    assert [e.id for e in log.window()] == ["c"]
    assert log.snapshot()["acked"] == []
    assert log.snapshot()["seq"] == 3

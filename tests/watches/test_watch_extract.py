"""Read extraction: shapes, event-log seq/GAP, state diffs, changed paths, baselines."""

from __future__ import annotations

import orjson
import pytest

from agentd.watches.extract import (
    EventLogExtractor,
    MalformedReadError,
    StateExtractor,
    changed_paths,
    extractor_from_baseline,
    item_key,
    shape_of,
)
from agentd.watches.notices import default_line


def log(*events: dict) -> str:
    return orjson.dumps({"events": list(events)}).decode()


def cm(name: str, rv: str = "1", data: dict | None = None, ns: str = "default") -> dict:
    return {
        "metadata": {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": rv},
        "data": data or {},
    }


# ----------------------------------------------------------------- shapes


@pytest.mark.parametrize(
    ("mime", "shape"),
    [
        ("application/vnd.agentd.events+json", "event-log"),
        ("application/vnd.asyncai.events+json", "event-log"),
        ("Application/VND.agentd.events+json; charset=utf-8", "event-log"),
        ("application/json", "state"),
        ("text/plain", "state"),
        (None, "state"),
    ],
)
def test_shape_of_mime_type(mime, shape):
    assert shape_of(mime) == shape


# -------------------------------------------------------------- event-log


def test_event_log_first_read_is_baseline_then_delivers_above_last_seq():
    x = EventLogExtractor(watch="cm", uri="u://x")
    assert x.feed(log({"seq": 1, "type": "ADDED", "object": cm("a")})) == []
    assert x.last_seq == 1
    events = x.feed(
        log(
            {"seq": 1, "type": "ADDED", "object": cm("a")},
            {"seq": 2, "type": "ADDED", "object": cm("b")},
            {"seq": 3, "type": "DELETED", "object": cm("a")},
        )
    )
    assert [(e["seq"], e["type"]) for e in events] == [(2, "ADDED"), (3, "DELETED")]
    assert events[0]["watch"] == "cm"
    assert events[0]["uri"] == "u://x"
    assert events[0]["old"] is None
    assert events[0]["changed"] is None
    assert x.last_seq == 3
    # Re-reading the same ring delivers nothing (at most once per seq).
    assert x.feed(log({"seq": 3, "type": "DELETED", "object": cm("a")})) == []


def test_event_log_gap_when_ring_moved_on():
    x = EventLogExtractor(4)
    events = x.feed(log({"seq": 9, "type": "ADDED", "object": cm("z")}, {"seq": 10, "type": "ADDED"}))
    assert events[0]["type"] == "GAP"
    assert events[0]["reason"] == "ring"
    assert (events[0]["first_seq"], events[0]["last_seq"], events[0]["missed"]) == (5, 8, 4)
    assert "missed 4 events (seq 5..8)" in events[0]["message"]
    assert [e["seq"] for e in events[1:]] == [9, 10]


def test_event_log_no_gap_when_oldest_is_next():
    x = EventLogExtractor(4)
    events = x.feed(log({"seq": 5, "type": "ADDED"}))
    assert [e["type"] for e in events] == ["ADDED"]


def test_event_log_seq_reset_delivers_all_after_reset_gap():
    x = EventLogExtractor(100)
    events = x.feed(log({"seq": 1, "type": "ADDED"}, {"seq": 2, "type": "ADDED"}))
    assert [e["type"] for e in events] == ["GAP", "ADDED", "ADDED"]
    assert events[0]["reason"] == "reset"
    assert x.last_seq == 2


def test_event_log_empty_baseline_delivers_everything_next():
    x = EventLogExtractor()
    assert x.feed(log()) == []
    assert x.baseline() == {"shape": "event-log", "last_seq": 0}
    events = x.feed(log({"seq": 1, "type": "ADDED"}, {"seq": 2, "type": "ADDED"}))
    assert [e["seq"] for e in events] == [1, 2]


def test_event_log_empty_baseline_then_a_ring_that_moved_on_reports_the_gap():
    # The log was empty at the baseline; by the next read its ring starts at 7:
    # events 1..6 were evicted before this watch saw them.
    x = EventLogExtractor()
    assert x.feed(log()) == []
    events = x.feed(log({"seq": 7, "type": "ADDED"}))
    assert [e["type"] for e in events] == ["GAP", "ADDED"]
    assert (events[0]["reason"], events[0]["first_seq"], events[0]["last_seq"], events[0]["missed"]) == (
        "ring",
        1,
        6,
        6,
    )


def test_event_log_in_band_error_passes_through():
    x = EventLogExtractor(1)
    (ev,) = x.feed(log({"seq": 2, "type": "ERROR", "message": "kubectl: connection refused"}))
    assert ev["type"] == "ERROR"
    assert ev["message"] == "kubectl: connection refused"


def test_event_log_modified_gets_changed_and_noop_is_dropped():
    x = EventLogExtractor(1)
    old = cm("a", rv="1", data={"k": "v1"})
    new = cm("a", rv="2", data={"k": "v2"})
    noop_new = cm("a", rv="3", data={"k": "v2"})
    events = x.feed(
        log(
            {"seq": 2, "type": "MODIFIED", "object": new, "old": old},
            {"seq": 3, "type": "MODIFIED", "object": noop_new, "old": new},
        )
    )
    assert len(events) == 1
    assert events[0]["changed"] == ["data.k"]
    assert events[0]["old"] == old
    assert x.last_seq == 3  # the dropped no-op still counts as seen


def test_event_log_modified_without_old_has_no_changed():
    x = EventLogExtractor(1)
    (ev,) = x.feed(log({"seq": 2, "type": "MODIFIED", "object": cm("a")}))
    assert ev["changed"] is None
    assert ev["old"] is None


def test_event_log_overflow_keeps_newest_and_summarizes():
    x = EventLogExtractor(0, events_per_update=5)
    events = x.feed(log(*({"seq": s, "type": "ADDED"} for s in range(1, 13))))
    assert len(events) == 5
    assert events[0]["type"] == "GAP"
    assert events[0]["reason"] == "overflow"
    assert (events[0]["first_seq"], events[0]["last_seq"], events[0]["missed"]) == (1, 8, 8)
    assert [e["seq"] for e in events[1:]] == [9, 10, 11, 12]
    assert x.last_seq == 12


def test_event_log_ring_gap_and_overflow_fit_the_limit():
    x = EventLogExtractor(0, events_per_update=4)
    events = x.feed(log(*({"seq": s, "type": "ADDED"} for s in range(5, 15))))
    assert [e["type"] for e in events] == ["GAP", "GAP", "ADDED", "ADDED"]
    assert [e["reason"] for e in events[:2]] == ["ring", "overflow"]
    assert [e["seq"] for e in events[2:]] == [13, 14]


def test_event_log_gap_of_exactly_one_event_before_the_ring():
    x = EventLogExtractor(4)
    events = x.feed(log({"seq": 6, "type": "ADDED"}, {"seq": 7, "type": "ADDED"}))
    assert [(e["type"], e.get("seq")) for e in events] == [("GAP", None), ("ADDED", 6), ("ADDED", 7)]
    gap = events[0]
    assert (gap["reason"], gap["first_seq"], gap["last_seq"], gap["missed"]) == ("ring", 5, 5, 1)
    assert default_line(gap) == (
        "GAP: missed 1 events (seq 5..5): the server's ring moved on before they were read"
    )


def test_event_log_seq_jumps_inside_a_read_are_gaps():
    x = EventLogExtractor(1)
    events = x.feed(
        log(*({"seq": s, "type": "ADDED"} for s in (1, 2, 4, 5, 9)), {"seq": 10, "type": "DELETED"})
    )
    assert [(e["type"], e.get("seq"), e.get("first_seq"), e.get("last_seq")) for e in events] == [
        ("ADDED", 2, None, None),
        ("GAP", None, 3, 3),
        ("ADDED", 4, None, None),
        ("ADDED", 5, None, None),
        ("GAP", None, 6, 8),
        ("ADDED", 9, None, None),
        ("DELETED", 10, None, None),
    ]
    assert {e["reason"] for e in events if e["type"] == "GAP"} == {"hole"}
    assert events[1]["missed"] == 1
    assert (
        events[4]["message"]
        == "missed 3 events (seq 6..8): the server's log has no events with these numbers"
    )


def test_event_log_overflow_gap_covers_holes_among_the_skipped_events():
    x = EventLogExtractor(0, events_per_update=4)
    events = x.feed(log(*({"seq": s, "type": "ADDED"} for s in (1, 2, 5, 6, 7, 9, 10))))
    # Items: 1, 2, hole 3..4, 5, 6, 7, hole 8, 9, 10 -> keep the newest 3, one overflow GAP.
    assert [
        (e["type"], e.get("reason"), e.get("seq"), e.get("first_seq"), e.get("last_seq")) for e in events
    ] == [
        ("GAP", "overflow", None, 1, 7),
        ("GAP", "hole", None, 8, 8),
        ("ADDED", None, 9, None, None),
        ("ADDED", None, 10, None, None),
    ]
    assert events[0]["missed"] == 7


def test_event_log_duplicate_and_unsorted_seq():
    x = EventLogExtractor(1)
    events = x.feed(log({"seq": 3, "type": "B"}, {"seq": 2, "type": "A"}, {"seq": 3, "type": "DUP"}))
    assert [(e["seq"], e["type"]) for e in events] == [(2, "A"), (3, "B")]


@pytest.mark.parametrize(
    ("body", "match"),
    [
        ("not json", r"is not JSON"),
        ('{"items": []}', r"no 'events' list"),
        ('[{"seq": 1}]', r"no 'events' list"),
        ('{"events": [1]}', r"events\[0\] is '1', not an object"),
        ('{"events": [{"type": "ADDED"}]}', r"events\[0\] has seq None; every event needs an integer 'seq'"),
        ('{"events": [{"seq": "3", "type": "ADDED"}]}', r"has seq '3'"),
        ('{"events": [{"seq": true, "type": "ADDED"}]}', r"has seq True"),
        ('{"events": [{"seq": 1}]}', r"needs a string 'type'"),
        (b"\xff\xfe", r"not UTF-8"),
    ],
)
def test_event_log_malformed_body_is_a_clear_error_and_keeps_baseline(body, match):
    x = EventLogExtractor(5, uri="kcp-events://x")
    with pytest.raises(MalformedReadError, match=match):
        x.feed(body)
    assert x.last_seq == 5
    assert [e["seq"] for e in x.feed(log({"seq": 6, "type": "ADDED"}))] == [6]


def test_event_log_malformed_error_names_uri_and_fix():
    x = EventLogExtractor(5, uri="kcp-events://x")
    with pytest.raises(MalformedReadError, match=r"'kcp-events://x'.*must be JSON like"):
        x.feed("nope")


# ------------------------------------------------------------------ state


def test_state_list_diff_by_key():
    x = StateExtractor(watch="w", uri="memo://list")
    assert x.feed(orjson.dumps([cm("a", data={"x": "1"}), cm("b")])) == []
    events = x.feed(orjson.dumps([cm("a", rv="9", data={"x": "2"}), cm("c")]))
    by_type = {e["type"]: e for e in events}
    assert set(by_type) == {"ADDED", "MODIFIED", "DELETED"}
    assert by_type["ADDED"]["key"] == "uid-c"
    assert by_type["ADDED"]["new"] == cm("c")
    assert by_type["DELETED"]["key"] == "uid-b"
    assert by_type["DELETED"]["old"] == cm("b")
    mod = by_type["MODIFIED"]
    assert mod["changed"] == ["data.x"]
    assert mod["old"]["data"] == {"x": "1"}
    assert mod["new"]["data"] == {"x": "2"}
    assert mod["watch"] == "w"
    assert mod["uri"] == "memo://list"


def test_state_list_modified_only_resource_version_is_dropped():
    x = StateExtractor()
    x.feed(orjson.dumps([cm("a", rv="1")]))
    assert x.feed(orjson.dumps([cm("a", rv="2")])) == []


def test_state_list_key_order_and_whole_item_fallback():
    assert item_key({"metadata": {"uid": "U", "name": "n"}, "id": 3}) == "U"
    assert item_key({"uid": "u1", "id": 3}) == "u1"
    assert item_key({"id": 3, "name": "n"}) == "3"
    assert item_key({"metadata": {"name": "n"}, "name": "m"}) == "n"
    assert item_key({"name": "m"}) == "m"
    assert item_key({"x": 1}) == '{"x":1}'
    assert item_key("plain") == '"plain"'
    x = StateExtractor()
    x.feed('["a", "b"]')
    events = x.feed('["b", "c"]')
    assert [(e["type"], e["key"]) for e in events] == [("ADDED", '"c"'), ("DELETED", '"a"')]


def test_state_list_duplicate_keys_are_kept_apart():
    x = StateExtractor()
    x.feed('[{"id": 1, "v": 1}, {"id": 1, "v": 2}]')
    events = x.feed('[{"id": 1, "v": 1}]')
    assert [(e["type"], e["key"]) for e in events] == [("DELETED", "1#2")]


def test_state_object_diff_by_top_level_key():
    x = StateExtractor()
    x.feed('{"todo": "a", "owner": "x", "cfg": {"a": {"b": 1}}}')
    events = x.feed('{"todo": "b", "cfg": {"a": {"b": 2}}, "new": true}')
    got = {(e["type"], e["key"]): e for e in events}
    assert set(got) == {("MODIFIED", "todo"), ("MODIFIED", "cfg"), ("ADDED", "new"), ("DELETED", "owner")}
    assert got["MODIFIED", "todo"]["changed"] == ["."]
    assert (got["MODIFIED", "todo"]["old"], got["MODIFIED", "todo"]["new"]) == ("a", "b")
    assert got["MODIFIED", "cfg"]["changed"] == ["a.b"]
    assert got["DELETED", "owner"]["old"] == "x"


def test_state_text_diff_is_whole_changed():
    x = StateExtractor()
    x.feed("hello\nworld")
    assert x.feed("hello\nworld") == []
    (ev,) = x.feed("hello\nthere")
    assert ev["type"] == "CHANGED"
    assert ev["key"] is None
    assert (ev["old"], ev["new"]) == ("hello\nworld", "hello\nthere")


def test_state_kind_switch_and_scalars_are_changed():
    x = StateExtractor()
    x.feed("[1]")
    (ev,) = x.feed('{"a": 1}')
    assert ev["type"] == "CHANGED"
    assert ev["old"] == [1]
    assert ev["new"] == {"a": 1}
    (ev,) = x.feed("not json")
    assert ev["type"] == "CHANGED"
    assert ev["new"] == "not json"
    x2 = StateExtractor()
    x2.feed("1")
    (ev,) = x2.feed("1.0")  # JSON 1 and 1.0 are different values
    assert (ev["old"], ev["new"]) == (1, 1.0)


def test_state_overflow_is_summarized():
    x = StateExtractor(events_per_update=3)
    x.feed("[]")
    events = x.feed(orjson.dumps([{"id": i} for i in range(10)]))
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "GAP"]
    assert events[-1]["reason"] == "overflow"
    assert events[-1]["missed"] == 8


# ---------------------------------------------------------- changed paths


def test_changed_paths_sorted_dotted_depth_limited_and_ignoring_bookkeeping():
    old = {
        "metadata": {"resourceVersion": "1", "generation": 1, "managedFields": [1], "labels": {"a": "1"}},
        "status": {"phase": "Deciding", "deep": {"x": {"y": 1}}},
        "spec": [1, 2],
        "gone": 1,
    }
    new = {
        "metadata": {"resourceVersion": "2", "generation": 2, "managedFields": [2], "labels": {"a": "2"}},
        "status": {"phase": "Published", "deep": {"x": {"y": 2}}},
        "spec": [1, 3],
        "added": None,
    }
    assert changed_paths(old, new) == [
        "added",
        "gone",
        "metadata.labels.a",
        "spec",
        "status.deep.x",
        "status.phase",
    ]


def test_changed_paths_equal_and_whole_value():
    assert changed_paths({"a": 1}, {"a": 1}) == []
    assert changed_paths(1, 2) == ["."]
    assert changed_paths([1], [1]) == []
    assert changed_paths({"a": 1}, "x") == ["."]
    assert changed_paths({"a": True}, {"a": 1}) == ["a"]


# -------------------------------------------------------------- baselines


def test_event_log_baseline_round_trip_resumes_with_gap():
    x = EventLogExtractor()
    assert x.baseline() is None
    x.feed(log({"seq": 3, "type": "ADDED"}))
    saved = orjson.loads(orjson.dumps(x.baseline()))
    # "restart": the ring moved on to 6..7 meanwhile
    y = extractor_from_baseline(saved, shape="event-log", watch="w", uri="u")
    events = y.feed(log({"seq": 6, "type": "ADDED"}, {"seq": 7, "type": "ADDED"}))
    assert [e["type"] for e in events] == ["GAP", "ADDED", "ADDED"]
    assert events[0]["first_seq"] == 4
    assert events[0]["last_seq"] == 5


def test_state_baseline_round_trip_diffs_against_persisted_state():
    x = StateExtractor()
    x.feed('{"a": 1}')
    saved = orjson.loads(orjson.dumps(x.baseline()))
    assert saved == {"shape": "state", "kind": "json", "value": {"a": 1}}
    y = extractor_from_baseline(saved, shape="state")
    (ev,) = y.feed('{"a": 2}')
    assert (ev["type"], ev["key"], ev["old"], ev["new"]) == ("MODIFIED", "a", 1, 2)
    t = StateExtractor()
    t.feed("text")
    z = extractor_from_baseline(t.baseline(), shape="state")
    assert z.feed("text") == []


def test_baseline_of_other_shape_is_fresh_and_bad_baseline_is_refused():
    fresh = extractor_from_baseline({"shape": "state", "kind": "json", "value": 1}, shape="event-log")
    assert isinstance(fresh, EventLogExtractor)
    assert fresh.baseline() is None
    with pytest.raises(ValueError, match=r"last_seq 'x'; expected an integer"):
        extractor_from_baseline({"shape": "event-log", "last_seq": "x"}, shape="event-log")
    with pytest.raises(ValueError, match=r"state baseline .* is not valid"):
        extractor_from_baseline({"shape": "state", "kind": "yaml", "value": 1}, shape="state")

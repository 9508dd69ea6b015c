"""What a watch extracts from a read, pinned where scripts/mutate found it unguarded.

Each test states what a user would see (the events a filter gets, the text of a
GAP, the error an unreadable read or a broken ``--watch-state`` file gives) if
extraction had a bug of that shape. Pure and in process.
"""

from __future__ import annotations

import re

import orjson
import pytest

from agentd.watches.extract import (
    EventLogExtractor,
    MalformedReadError,
    StateExtractor,
    changed_paths,
    compact_json,
    extractor_from_baseline,
    parse_event_log,
    shape_of,
)

FIX = 'an event-log read must be JSON like {"events": [{"seq": 1, "type": "ADDED", ...}]}'


def log(*seqs: int, type_: str = "ADDED") -> str:
    return orjson.dumps({"events": [{"seq": s, "type": type_} for s in seqs]}).decode()


def primed_state(value: object, **kwargs: object) -> StateExtractor:
    x = StateExtractor(**kwargs)  # type: ignore[arg-type]
    assert x.feed(orjson.dumps(value)) == []
    return x


# ----------------------------------------------------------------- shapes


def test_an_event_log_mime_type_with_several_parameters_is_still_an_event_log():
    assert shape_of("application/vnd.agentd.events+json; charset=utf-8; profile=x") == "event-log"


# ------------------------------------------------------- what GAPs carry


def test_a_ring_gap_names_its_watch_and_uri_and_has_no_old_or_changed():
    x = EventLogExtractor(5, watch="pods", uri="kcp-events://pods")
    (gap, event) = x.feed(log(8))
    assert gap["type"] == "GAP"
    assert gap["reason"] == "ring"
    assert (gap["watch"], gap["uri"]) == ("pods", "kcp-events://pods")
    assert gap["old"] is None
    assert gap["changed"] is None
    assert gap["message"] == "missed 2 events (seq 6..7): the server's ring moved on before they were read"
    assert (event["seq"], event["watch"], event["uri"]) == (8, "pods", "kcp-events://pods")


def test_a_reset_gap_says_the_server_restarted():
    x = EventLogExtractor(5, watch="pods", uri="kcp-events://pods")
    gap, *events = x.feed(log(1, 2))
    assert gap["reason"] == "reset"
    assert (gap["watch"], gap["uri"]) == ("pods", "kcp-events://pods")
    assert gap["message"] == (
        "the server's event sequence restarted; events before the restart may be missing"
    )
    assert [e["seq"] for e in events] == [1, 2]


def test_a_state_overflow_gap_counts_the_dropped_changes_and_names_the_watch():
    x = primed_state({}, watch="cfg", uri="memo://cfg", events_per_update=3)
    events = x.feed(orjson.dumps({"a": 1, "b": 2, "c": 3, "d": 4, "e": 5}))
    assert [e["type"] for e in events] == ["ADDED", "ADDED", "GAP"]
    gap = events[-1]
    assert (gap["watch"], gap["uri"], gap["reason"], gap["missed"]) == ("cfg", "memo://cfg", "overflow", 3)
    assert gap["message"] == "skipped 3 events (changes): more than this watch processes per update"


# ------------------------------------------------ events_per_update exactly


def test_an_event_log_read_of_exactly_events_per_update_events_has_no_gap():
    x = EventLogExtractor(0, events_per_update=3)
    assert [e["seq"] for e in x.feed(log(1, 2, 3))] == [1, 2, 3]


def test_a_state_read_of_exactly_events_per_update_changes_has_no_gap():
    x = primed_state({}, events_per_update=3)
    events = x.feed(orjson.dumps({"a": 1, "b": 2, "c": 3}))
    assert [(e["type"], e["key"]) for e in events] == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c")]


def test_events_per_update_below_two_is_refused_with_the_value():
    with pytest.raises(ValueError, match=r"^events_per_update must be >= 2, got 1$"):
        EventLogExtractor(events_per_update=1)


# ------------------------------------------------------- state diffs


@pytest.mark.parametrize(("before", "after"), [(1, None), (None, 1)])
def test_a_value_set_to_or_from_null_is_modified(before, after):
    x = primed_state({"replicas": before})
    (event,) = x.feed(orjson.dumps({"replicas": after}))
    assert (event["type"], event["key"]) == ("MODIFIED", "replicas")
    assert (event["old"], event["new"]) == (before, after)
    assert event["changed"] == ["."]


def test_a_field_that_was_null_and_is_now_gone_is_a_change():
    x = primed_state({"cm": {"owner": None, "size": 1}})
    (event,) = x.feed(orjson.dumps({"cm": {"size": 1}}))
    assert (event["type"], event["changed"]) == ("MODIFIED", ["owner"])
    assert changed_paths({"owner": None}, {}) == ["owner"]


def test_a_change_after_an_unchanged_field_is_reported():
    # Fields are compared in order; one that did not change must not end the comparison.
    assert changed_paths({"name": "a", "size": 1}, {"name": "a", "size": 2}) == ["size"]
    x = primed_state([{"name": "a", "size": 1}])
    (event,) = x.feed(orjson.dumps([{"name": "a", "size": 2}]))
    assert (event["type"], event["key"], event["changed"]) == ("MODIFIED", "a", ["size"])


def test_a_change_beside_an_ignored_bookkeeping_field_is_still_reported():
    old = {"metadata": {"resourceVersion": "1", "labels": {"app": "a"}}}
    new = {"metadata": {"resourceVersion": "2", "labels": {"app": "b"}}}
    assert changed_paths(old, new) == ["metadata.labels.app"]
    x = primed_state({"cm": old})
    (event,) = x.feed(orjson.dumps({"cm": new}))
    assert event["changed"] == ["metadata.labels.app"]


def test_a_value_json_cannot_hold_is_shown_as_text_not_an_error():
    # A stage's return value is printed with compact_json; a set is not JSON.
    assert compact_json({"tags": {"x"}}) == '{"tags":"{\'x\'}"}'


# --------------------------------------------------- unreadable reads


def test_an_undecodable_state_read_names_the_uri_and_the_fix():
    x = StateExtractor(uri="memo://cfg")
    with pytest.raises(
        MalformedReadError,
        match=r"^watch read of 'memo://cfg': the body is not UTF-8 text \(.*\); watched resources must return JSON text$",
    ):
        x.feed(b"\xff\xfe")


def test_an_undecodable_event_log_read_names_the_uri():
    with pytest.raises(MalformedReadError, match=r"^watch read of 'kcp-events://x': the body is not UTF-8"):
        EventLogExtractor(1, uri="kcp-events://x").feed(b"\xff\xfe")
    with pytest.raises(MalformedReadError, match=r"^watch read of 'kcp-events://y': the body is not UTF-8"):
        parse_event_log(b"\xff\xfe", uri="kcp-events://y")


def test_an_event_log_error_ends_with_the_whole_fix():
    with pytest.raises(MalformedReadError) as info:
        parse_event_log('{"events": {}}', uri="e://x")
    assert str(info.value).endswith("; " + FIX)


def test_an_event_with_a_non_string_type_shows_the_type_it_had():
    with pytest.raises(MalformedReadError, match=r"events\[0\] \(seq 1\) has type 5; every event"):
        parse_event_log('{"events": [{"seq": 1, "type": 5}]}')


def test_a_long_malformed_body_is_quoted_cut_with_an_ellipsis_and_a_short_one_whole():
    long = "n" * 100
    with pytest.raises(MalformedReadError) as info:
        parse_event_log(long)
    assert repr("n" * 80 + "…") + " is not JSON" in str(info.value)
    exact = "n" * 80
    with pytest.raises(MalformedReadError) as info:
        parse_event_log(exact)
    assert repr(exact) + " is not JSON" in str(info.value)


# ------------------------------------------------ baselines (--watch-state)


def test_a_broken_state_baseline_says_what_is_expected():
    expected = 'is not valid: expected {"shape": "state", "kind": "json"|"text", "value": ...}'
    with pytest.raises(ValueError, match=re.escape(expected) + "$"):
        extractor_from_baseline({"shape": "state", "kind": "yaml", "value": 1}, shape="state")


def test_a_text_state_baseline_whose_value_is_not_text_is_refused():
    with pytest.raises(ValueError, match=r"^state baseline has kind 'text' but value 5$"):
        extractor_from_baseline({"shape": "state", "kind": "text", "value": 5}, shape="state")


def test_a_baseline_of_the_other_shape_starts_the_state_watch_afresh():
    x = extractor_from_baseline({"shape": "event-log", "last_seq": 3}, shape="state", uri="memo://s")
    assert x.feed('{"a": 1}') == []
    assert [e["type"] for e in x.feed('{"a": 2}')] == ["MODIFIED"]


def _assert_named_and_capped(events: list[dict], watch: str, uri: str) -> None:
    assert [e["type"] for e in events] == ["GAP", "ADDED"]
    assert all((e["watch"], e["uri"]) == (watch, uri) for e in events)


def test_a_fresh_event_log_watch_names_its_events_and_keeps_its_limit():
    x = extractor_from_baseline(None, shape="event-log", watch="w", uri="e://w", events_per_update=2)
    assert x.feed(log(1)) == []
    _assert_named_and_capped(x.feed(log(1, 2, 3, 4)), "w", "e://w")


def test_a_resumed_event_log_watch_names_its_events_and_keeps_its_limit():
    baseline = {"shape": "event-log", "last_seq": 1}
    x = extractor_from_baseline(baseline, shape="event-log", watch="w", uri="e://w", events_per_update=2)
    _assert_named_and_capped(x.feed(log(2, 3, 4)), "w", "e://w")


def test_a_resumed_event_log_whose_baseline_read_was_empty_delivers_the_next_read():
    x = extractor_from_baseline({"shape": "event-log", "last_seq": None}, shape="event-log")
    assert [e["seq"] for e in x.feed(log(1, 2))] == [1, 2]


def test_a_resumed_state_watch_names_its_events_and_keeps_its_limit():
    baseline = {"shape": "state", "kind": "json", "value": {}}
    x = extractor_from_baseline(baseline, shape="state", watch="w", uri="memo://w", events_per_update=2)
    events = x.feed('{"a": 1, "b": 2, "c": 3}')
    assert [e["type"] for e in events] == ["ADDED", "GAP"]
    assert all((e["watch"], e["uri"]) == ("w", "memo://w") for e in events)


def test_a_fresh_state_watch_names_its_events():
    x = extractor_from_baseline(None, shape="state", watch="w", uri="memo://w")
    assert x.feed("1") == []
    (event,) = x.feed("2")
    assert (event["type"], event["watch"], event["uri"]) == ("CHANGED", "w", "memo://w")


def test_a_malformed_read_through_a_resumed_watch_names_its_uri():
    x = extractor_from_baseline({"shape": "event-log", "last_seq": 1}, shape="event-log", uri="e://z")
    with pytest.raises(MalformedReadError, match=re.escape("watch read of 'e://z'")):
        x.feed("nope")

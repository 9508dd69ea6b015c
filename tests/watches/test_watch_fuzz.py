"""Property tests: the event-log parser and the state differ never raise anything undocumented."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from agentd.watches.extract import (
    EventLogExtractor,
    MalformedReadError,
    StateExtractor,
    changed_paths,
    parse_event_log,
)
from agentd.watches.notices import default_line

json_scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8)
json_values = st.recursive(
    json_scalars,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=6), children, max_size=4)
    ),
    max_leaves=20,
)

small_objects = st.fixed_dictionaries(
    {
        "metadata": st.fixed_dictionaries(
            {"name": st.sampled_from(["a", "b"]), "resourceVersion": st.sampled_from(["1", "2"])}
        ),
        "v": st.integers(0, 2),
    }
)

events_strategy = st.lists(
    st.fixed_dictionaries(
        {"seq": st.integers(-5, 60), "type": st.sampled_from(["ADDED", "MODIFIED", "DELETED", "ERROR"])},
        optional={"object": small_objects, "old": small_objects, "message": st.text(max_size=10)},
    ),
    max_size=20,
)


@settings(max_examples=120, deadline=None, database=None)
@given(st.binary(max_size=200) | st.text(max_size=200) | json_values.map(lambda v: orjson.dumps(v)))
def test_event_log_parser_only_raises_malformed_read(body):
    x = EventLogExtractor(3)
    try:
        x.feed(body)
    except MalformedReadError:
        assert x.last_seq == 3


@settings(max_examples=120, deadline=None, database=None)
@given(st.integers(-5, 40) | st.none(), st.lists(events_strategy, min_size=1, max_size=4), st.integers(2, 12))
def test_event_log_delivery_invariants(start, reads, limit):
    x = EventLogExtractor(start, primed=True, events_per_update=limit)
    for events in reads:
        before = x.last_seq
        out = x.feed(orjson.dumps({"events": events}))
        assert len(out) <= limit
        delivered = [e["seq"] for e in out if e["type"] != "GAP"]
        assert delivered == sorted(set(delivered))
        reset = any(e.get("reason") == "reset" for e in out)
        if before is not None and not reset:
            assert all(s > before for s in delivered)
        for e in out:
            assert isinstance(default_line(e), str)
            if e["type"] == "MODIFIED" and e["changed"] is not None:
                assert e["changed"]


@settings(max_examples=120, deadline=None, database=None)
@given(json_values | st.text(max_size=30), json_values | st.text(max_size=30))
def test_state_differ_never_raises_and_covers_keys(a, b):
    x = StateExtractor(events_per_update=1000)
    x.feed(a if isinstance(a, str) else orjson.dumps(a))
    out = x.feed(b if isinstance(b, str) else orjson.dumps(b))
    for e in out:
        assert e["type"] in {"ADDED", "DELETED", "MODIFIED", "CHANGED"}
        assert isinstance(default_line(e), str)
        orjson.dumps(e)  # events are JSON-able (they cross into the sandbox)
    if isinstance(a, dict) and isinstance(b, dict):
        assert {e["key"] for e in out if e["type"] == "ADDED"} == b.keys() - a.keys()
        assert {e["key"] for e in out if e["type"] == "DELETED"} == a.keys() - b.keys()
    # Unchanged as JSON (Python's == says False == 0 and 1 == 1.0; the wire does not).
    if orjson.dumps(a, option=orjson.OPT_SORT_KEYS) == orjson.dumps(b, option=orjson.OPT_SORT_KEYS):
        assert out == []
    # The baseline survives a JSON round trip.
    orjson.dumps(x.baseline())


@settings(max_examples=120, deadline=None, database=None)
@given(json_values, json_values)
def test_changed_paths_properties(a, b):
    paths = changed_paths(a, b)
    assert paths == sorted(paths)
    assert len(set(paths)) == len(paths)
    assert changed_paths(a, a) == []
    for p in paths:
        assert p == "." or p.count(".") <= 2 or any("." in k for k in _keys(a) | _keys(b))


def _keys(v: object) -> set[str]:
    out: set[str] = set()
    if isinstance(v, dict):
        for k, child in v.items():
            out.add(k)
            out |= _keys(child)
    return out


# Events that never collapse to a no-op MODIFIED unless old equals object.
coverage_events = st.lists(
    st.fixed_dictionaries(
        {"seq": st.integers(1, 80), "type": st.sampled_from(["ADDED", "MODIFIED", "DELETED", "ERROR"])},
        optional={"object": small_objects, "old": small_objects},
    ),
    max_size=25,
)


@settings(max_examples=300, deadline=None, database=None)
@given(
    st.integers(0, 30) | st.none(),
    st.lists(coverage_events, min_size=1, max_size=4),
    st.integers(2, 12),
)
def test_every_seq_up_to_the_newest_is_delivered_or_inside_exactly_one_gap(start, reads, limit):
    """From the last seq seen to the newest read, each seq is delivered, a no-op, or in one GAP span.

    Gaps of one event (a single missing seq, before the ring or between two
    events) are what the strategy hits most: seqs are drawn from a small range.
    """
    x = EventLogExtractor(start, primed=True, events_per_update=limit)
    for events in reads:
        before = x.last_seq
        raw = parse_event_log(orjson.dumps({"events": events}))
        out = x.feed(orjson.dumps({"events": events}))
        assert len(out) <= limit
        if not raw:
            assert out == []
            continue
        newest = raw[-1]["seq"]
        reset = before is not None and newest < before
        if before is None or reset:
            expected = range(raw[0]["seq"], newest + 1)
        else:
            expected = range(before + 1, newest + 1)
        covered: list[int] = []
        for e in out:
            if e["type"] == "GAP" and e["reason"] in ("ring", "hole", "overflow"):
                assert e["missed"] == e["last_seq"] - e["first_seq"] + 1 >= 1
                covered.extend(range(e["first_seq"], e["last_seq"] + 1))
            elif e["type"] != "GAP":
                covered.append(e["seq"])
        delivered = {e["seq"] for e in out if e["type"] != "GAP"}
        # No-op MODIFIEDs are dropped before anyone sees them; they are accounted for, not lost.
        noop = {
            ev["seq"]
            for ev in raw
            if ev["type"] == "MODIFIED"
            and "old" in ev
            and "object" in ev
            and not changed_paths(ev["old"], ev["object"])
            and ev["seq"] in expected
            and ev["seq"] not in delivered
            and ev["seq"] not in covered
        }
        covered.extend(noop)
        assert sorted(covered) == list(expected)  # every seq once: nothing lost, nothing twice
        assert x.last_seq == newest

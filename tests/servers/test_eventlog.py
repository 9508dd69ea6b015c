"""EventRing: the bounded event-log shape (pure, synchronous)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.core.errors import ConfigError
from agentd.servers._base import RING_CAPACITY, EventRing, describe, parse_http


def test_append_numbers_events_from_one() -> None:
    ring = EventRing()
    assert ring.last_seq == 0
    assert json.loads(ring.body()) == {"events": []}
    first = ring.append("MESSAGE", {"id": "a"})
    assert first == {"seq": 1, "type": "MESSAGE", "id": "a"}
    ring.error("disk gone; remount it")
    assert json.loads(ring.body())["events"][1] == {
        "seq": 2,
        "type": "ERROR",
        "message": "disk gone; remount it",
    }
    assert ring.events(after=1) == [{"seq": 2, "type": "ERROR", "message": "disk gone; remount it"}]


def test_ring_drops_oldest_beyond_capacity() -> None:
    ring = EventRing()
    for i in range(RING_CAPACITY + 10):
        ring.append("X", {"i": i})
    events = ring.events()
    assert len(events) == RING_CAPACITY == 256
    assert events[0]["seq"] == 11
    assert events[-1]["seq"] == RING_CAPACITY + 10


def test_fields_cannot_override_seq_or_type() -> None:
    ring = EventRing()
    with pytest.raises(ValueError, match="may not override 'seq' or 'type'"):
        ring.append("X", {"seq": 9})
    with pytest.raises(ValueError, match="capacity must be at least 1"):
        EventRing(0)


@given(st.integers(min_value=1, max_value=20), st.integers(min_value=0, max_value=100))
def test_seq_strictly_increasing_and_window_is_the_newest(capacity: int, n: int) -> None:
    ring = EventRing(capacity)
    for i in range(n):
        ring.append("X", {"i": i})
    seqs = [e["seq"] for e in ring.events()]
    assert seqs == list(range(max(1, n - capacity + 1), n + 1))


def test_descriptions_end_with_the_example_line() -> None:
    text = describe("Notes.", name="notes", uri="memo://notes")
    assert text.splitlines()[-1] == "Example: watch_start(name='notes', uri='memo://notes', on_event=None)"


def test_parse_http() -> None:
    assert parse_http("127.0.0.1:8080", allow_remote=False).port == 8080
    assert parse_http("[::1]:9", allow_remote=False).host == "::1"
    token = "t" * 32
    remote = parse_http("0.0.0.0:9", allow_remote=True, allow_hosts=["box.example"], token=token)
    assert (remote.host, remote.token, remote.allow_hosts) == ("0.0.0.0", token, ("box.example",))
    assert parse_http("10.0.0.1:80", allow_remote=True, token=token).policy().allowed_hosts == {"10.0.0.1"}
    with pytest.raises(ConfigError, match=r"--http: '10\.0\.0\.1:80' is not valid: bind a loopback address"):
        parse_http("10.0.0.1:80", allow_remote=False)
    with pytest.raises(
        ConfigError,
        match=r"--allow-remote: '10\.0\.0\.1:80' is not valid: a non-loopback bind needs a bearer token",
    ):
        parse_http("10.0.0.1:80", allow_remote=True)
    with pytest.raises(ConfigError, match=r"a wildcard bind answers on every interface: name the host"):
        parse_http("0.0.0.0:9", allow_remote=True, token=token)
    with pytest.raises(ConfigError, match=r"give HOST:PORT with a port in 0-65535"):
        parse_http("localhost", allow_remote=False)

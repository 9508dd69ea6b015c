"""The era and transport planner (pure): which try follows which failure, and what is kept (rfcs/0285, 0286)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.upstream.negotiate import MAX_TRIES, Negotiator, Try, TryFailure, probe_outcome

CLOSED = TryFailure(reached=True)
"""The probe broke the connection: the stream closed, the process exited."""
REFUSED_4XX = TryFailure(reached=True, rejected=True)
UNREACHABLE = TryFailure(reached=False)
TIMED_OUT = TryFailure(reached=True, timed_out=True)


def test_a_stdio_server_whose_probe_fails_is_started_again_with_initialize() -> None:
    n = Negotiator(protocol="auto", transport="stdio")
    first = n.first()
    assert first == Try("stdio", "probe")
    assert n.next_after(first, CLOSED) == Try("stdio", "initialize")
    # initialize failing too ends the attempt: no third try.
    assert n.next_after(Try("stdio", "initialize"), CLOSED) is None


def test_a_url_without_transport_tries_sse_after_a_4xx_then_initialize() -> None:
    n = Negotiator(protocol="auto", transport="auto")
    tried = n.first()
    assert tried == Try("http", "probe")
    tried = n.next_after(tried, REFUSED_4XX)
    assert tried == Try("sse", "probe")
    tried = n.next_after(tried, CLOSED)
    assert tried == Try("sse", "initialize")
    assert n.next_after(tried, CLOSED) is None


def test_a_pinned_transport_never_switches() -> None:
    n = Negotiator(protocol="auto", transport="http")
    # The 4xx is not taken as "HTTP+SSE": only the era may still change.
    assert n.next_after(Try("http", "probe"), REFUSED_4XX) == Try("http", "initialize")
    assert n.next_after(Try("http", "initialize"), REFUSED_4XX) is None


@pytest.mark.parametrize("failure", [UNREACHABLE, TIMED_OUT])
def test_unreachable_or_timed_out_is_no_verdict(failure: TryFailure) -> None:
    n = Negotiator(protocol="auto", transport="auto")
    assert n.next_after(n.first(), failure) is None


def test_a_failure_after_the_handshake_is_no_verdict_on_the_era() -> None:
    n = Negotiator(protocol="auto", transport="stdio")
    assert n.next_after(n.first(), TryFailure(reached=True, handshake_done=True)) is None


def test_what_a_connection_found_is_kept_and_no_longer_probed() -> None:
    n = Negotiator(protocol="auto", transport="auto")
    assert (n.era, n.transport) == (None, None)
    n.learned(Try("sse", "initialize"), "2024-11-05")
    assert (n.era, n.transport) == ("handshake", "sse")
    assert n.first() == Try("sse", "initialize")
    # A remembered era is not re-negotiated when it fails: the attempt fails.
    assert n.next_after(n.first(), CLOSED) is None

    modern = Negotiator(protocol="auto", transport="stdio")
    modern.learned(Try("stdio", "probe"), "2026-07-28")
    assert modern.first() == Try("stdio", "discover", "2026-07-28")
    assert modern.era == "modern"


def test_learning_keeps_the_first_answer() -> None:
    n = Negotiator(protocol="auto", transport="stdio")
    n.learned(Try("stdio", "initialize"), "2025-03-26")
    n.learned(Try("stdio", "initialize"), "2026-07-28")
    assert n.first() == Try("stdio", "initialize")


@pytest.mark.parametrize(
    ("protocol", "first"),
    [
        ("2026-07-28", Try("stdio", "discover", "2026-07-28")),
        ("2025-11-25", Try("stdio", "initialize", "2025-11-25")),
        ("2024-11-05", Try("stdio", "initialize", "2024-11-05")),
    ],
)
def test_a_pinned_protocol_skips_the_probe_and_has_no_fallback(protocol: str, first: Try) -> None:
    n = Negotiator(protocol=protocol, transport="stdio")
    assert n.first() == first
    assert n.era == ("modern" if protocol == "2026-07-28" else "handshake")
    assert n.next_after(first, CLOSED) is None
    n.learned(first, "2024-11-05")
    assert n.first() == first


def test_a_counteroffer_to_a_pinned_handshake_version_is_noticed() -> None:
    n = Negotiator(protocol="2025-06-18", transport="stdio")
    assert n.counteroffered("2024-11-05")
    assert not n.counteroffered("2025-06-18")
    assert not Negotiator(protocol="auto", transport="stdio").counteroffered("2024-11-05")


def test_an_unknown_protocol_is_refused_with_the_choices() -> None:
    with pytest.raises(ValueError, match=r"protocol '2023-01-01' is not one of auto, 2026-07-28, 2024-11-05"):
        Negotiator(protocol="2023-01-01", transport="stdio")


def test_describe_names_transport_handshake_and_version() -> None:
    assert Try("sse", "probe").describe() == "sse, server/discover probe"
    assert Try("http", "discover", "2026-07-28").describe() == "http, server/discover at 2026-07-28"
    assert Try("stdio", "initialize", "2024-11-05").describe() == "stdio, initialize offering 2024-11-05"
    assert Try("stdio", "initialize").describe() == "stdio, initialize"


def test_probe_outcomes() -> None:
    assert probe_outcome(Try("stdio", "probe"), "modern", after_failed_probe=False) == "answered"
    assert probe_outcome(Try("stdio", "probe"), "handshake", after_failed_probe=False) == "refused"
    assert probe_outcome(Try("stdio", "initialize"), "handshake", after_failed_probe=True) == "failed"
    assert probe_outcome(Try("stdio", "initialize"), "handshake", after_failed_probe=False) == "skipped"
    ignored = probe_outcome(Try("stdio", "initialize"), "handshake", after_failed_probe=True, ignored=True)
    assert ignored == "ignored"


def test_a_probe_the_server_read_and_ignored_is_followed_by_initialize_on_the_same_transport() -> None:
    negotiator = Negotiator(protocol="auto", transport="stdio")
    silent = TryFailure(reached=True, silent=True)
    assert negotiator.next_after(Try("stdio", "probe"), silent) == Try("stdio", "initialize")


failures = st.builds(
    TryFailure,
    reached=st.booleans(),
    handshake_done=st.booleans(),
    timed_out=st.booleans(),
    rejected=st.booleans(),
)


@given(
    protocol=st.sampled_from(["auto", "2026-07-28", "2025-03-26"]),
    transport=st.sampled_from(["stdio", "http", "sse", "auto", None]),
    outcomes=st.lists(failures, min_size=MAX_TRIES, max_size=MAX_TRIES),
)
def test_an_attempt_ends_within_max_tries_and_never_repeats_a_try(
    protocol: str, transport: str | None, outcomes: list[TryFailure]
) -> None:
    n = Negotiator(protocol=protocol, transport=transport)
    tried: Try | None = n.first()
    seen: list[Try] = []
    for failure in outcomes:
        assert tried is not None
        assert tried not in seen
        seen.append(tried)
        tried = n.next_after(tried, failure)
        if tried is None:
            break
    assert tried is None, seen
    assert len(seen) <= MAX_TRIES
    if transport in ("stdio", "http", "sse"):
        assert {t.transport for t in seen} == {transport}
    if protocol != "auto":
        assert len(seen) == 1 or transport in ("auto", None)
        assert all(t.handshake != "probe" for t in seen)

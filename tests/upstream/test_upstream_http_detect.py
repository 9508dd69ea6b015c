"""The transport-detection signal of an HTTP try (rfcs/0286): which answers count, and as what."""

from __future__ import annotations

import httpx2
import pytest

from agentd.upstream.http import HttpTransport

URL = "http://127.0.0.1:8000/sse"


def _seen(*answers: tuple[str, str, int]) -> HttpTransport:
    transport = HttpTransport("s", URL)
    for method, url, status in answers:
        transport.saw(httpx2.Request(method, url), status)
    return transport


@pytest.mark.parametrize("status", [400, 403, 404, 405, 406, 415])
def test_a_post_to_the_endpoint_refused_with_a_4xx_is_the_cue(status: int) -> None:
    transport = _seen(("POST", URL, status))
    assert (transport.reached, transport.rejected, transport.refused_status) == (True, True, status)


def test_401_asks_for_credentials_and_is_no_cue() -> None:
    assert not _seen(("POST", URL, 401)).rejected


def test_one_accepted_post_settles_it() -> None:
    # A handshake-era Streamable server refuses the probe with a 400, then accepts initialize.
    assert not _seen(("POST", URL, 400), ("POST", URL, 200)).rejected


def test_answers_from_elsewhere_do_not_count() -> None:
    transport = _seen(
        ("POST", "http://127.0.0.1:9000/token", 400),  # an OAuth authorization server
        ("POST", "http://127.0.0.1:8000/other", 404),  # another path of the same server
        ("GET", URL, 405),
    )
    assert not transport.rejected
    assert transport.reached  # the server itself answered (the GET, the other path)
    assert not _seen(("POST", "http://127.0.0.1:9000/token", 400)).reached


def test_a_trailing_slash_is_the_same_endpoint() -> None:
    assert _seen(("POST", URL + "/", 405)).rejected

"""Who may read ``GET /status`` and the page (rfcs/0336): the health server's access rules, in process."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial

import httpx2
import trio

from agentd.core.jsonvalue import JSONObject
from agentd.observe.health import serve_health

TOKEN = "0123456789abcdef0123"


def _status() -> JSONObject:
    return {"schema": "agentd.status/1", "agents": []}


async def _probe() -> bool:
    return True


@asynccontextmanager
async def serving(addr: str, token: str | None = None) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        port = await nursery.start(
            partial(
                serve_health,
                addr,
                probe=_probe,
                ready=lambda: (True, "ok"),
                status=_status,
                status_token=token,
            )
        )
        yield f"http://127.0.0.1:{port}"
        nursery.cancel_scope.cancel()


async def _get(url: str, **headers: str) -> httpx2.Response:
    with trio.fail_after(10):
        async with httpx2.AsyncClient() as client:
            return await client.get(url, headers=headers)


async def test_loopback_serves_the_status_and_the_page_without_a_token() -> None:
    async with serving("127.0.0.1:0") as base:
        status = await _get(base + "/status")
        page = await _get(base + "/")
    assert status.status_code == 200
    assert status.json()["schema"] == "agentd.status/1"
    assert page.status_code == 200
    assert "<title>agentd status</title>" in page.text
    assert "default-src 'none'" in page.headers["content-security-policy"]


async def test_a_dns_rebound_host_is_refused_on_loopback() -> None:
    async with serving("127.0.0.1:0") as base:
        rebound = await _get(base + "/status", host="evil.example:80")
    assert rebound.status_code == 421
    assert "'evil.example' is not a loopback host" in rebound.text


async def test_a_non_loopback_bind_without_a_token_refuses_the_status_but_keeps_the_probes() -> None:
    async with serving("0.0.0.0:0") as base:
        status = await _get(base + "/status")
        page = await _get(base + "/")
        health = await _get(base + "/healthz")
    assert status.status_code == 403
    assert page.status_code == 403
    assert "is not a loopback address and no token is set" in status.text
    assert "fix: name a file holding a bearer token with --status-token-file" in status.text
    assert health.status_code == 200


async def test_beyond_loopback_the_token_is_required() -> None:
    async with serving("0.0.0.0:0", TOKEN) as base:
        missing = await _get(base + "/status")
        wrong = await _get(base + "/status", authorization="Bearer " + "x" * 20)
        right = await _get(base + "/status", authorization=f"Bearer {TOKEN}", host="agentd.internal:8080")
    assert missing.status_code == 401
    assert wrong.status_code == 401
    assert "Authorization: Bearer TOKEN" in missing.text
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert right.status_code == 200

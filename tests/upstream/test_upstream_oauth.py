"""OAuth 2.1 client credentials for a remote server, against a loopback authorization + resource server.

The servers (``tests/mcpservers/oauth_server.py``) are built from the SDK's auth
components; agentd uses the SDK's client-credentials provider through
:func:`agentd.upstream.auth.auth_for`. These tests also pin the SDK hooks
that module relies on: an SDK release that changes them fails here.
"""

from __future__ import annotations

import json
import stat
import time
from pathlib import Path

import pytest
import trio

from agentd.config import OAuthSpec, ServerSpec
from agentd.events import ServerState
from agentd.observe.telemetry import NullTelemetry
from agentd.upstream import Upstream
from agentd.upstream.auth import auth_for, refresh_margin
from tests.support.oauth import CLIENT_ID, CLIENT_SECRET, Servers, oauth_servers
from tests.support.watch import STARTUP_GUARD

pytestmark = pytest.mark.process  # its servers run as child processes (tests/support helpers)


def spec_for(
    servers: Servers, *, secret: str = CLIENT_SECRET, method: str = "client_secret_basic"
) -> ServerSpec:
    return ServerSpec(
        name="secure",
        url=servers.url,
        startup_timeout=STARTUP_GUARD,
        oauth=OAuthSpec(
            client_id=CLIENT_ID,
            client_secret=secret,
            issuer=servers.issuer,
            token_endpoint_auth_method=method,  # type: ignore[arg-type]
        ),
    )


async def whoami(spec: ServerSpec, state_dir: Path | None, auth: object = None) -> tuple[str, Upstream]:
    send, _recv = trio.open_memory_channel[object](100)
    auth = auth if auth is not None else auth_for(spec, state_dir=state_dir)
    up = Upstream(spec, send, NullTelemetry(), auth=auth, backoff=(30.0,))  # type: ignore[arg-type]
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        assert up.state is ServerState.CONNECTED, up.last_error
        result = await up.call_tool("whoami", {})
        nursery.cancel_scope.cancel()
    return result.content[0].text, up  # type: ignore[union-attr]


async def test_client_credentials_token_cached_and_refreshed_before_expiry(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with oauth_servers(tmp_path) as servers:
        spec = spec_for(servers)
        auth = auth_for(spec, state_dir=state)
        answer, _ = await whoami(spec, state, auth)
        assert answer == f"{CLIENT_ID} token=1"
        # The first request carried no token: 401, discovery, token, retry.
        assert servers.lines() == ["unauthorized", "issued 1"]
        (cache,) = (state / "oauth").iterdir()
        assert stat.S_IMODE(cache.stat().st_mode) == 0o600
        assert CLIENT_SECRET not in cache.read_text()
        assert json.loads(cache.read_text())["expires_at"] > time.time() + 3000

        # The refresh point (a margin before expiry) has passed: the next request
        # gets a new token first, and the resource server never sees a stale one.
        auth.context.token_expiry_time = time.time() - 1  # type: ignore[attr-defined]
        answer, _ = await whoami(spec, state, auth)
        assert answer == f"{CLIENT_ID} token=2"
        assert servers.lines() == ["unauthorized", "issued 1", "issued 2"]  # no second 401

        # A restart reuses the cached token: no new token request.
        answer, _ = await whoami(spec, state)
        assert answer == f"{CLIENT_ID} token=2"
        assert servers.lines() == ["unauthorized", "issued 1", "issued 2"]

        # An expired cached token is never sent: a new one is fetched.
        doc = json.loads(cache.read_text())
        doc["expires_at"] = time.time() - 5
        cache.write_text(json.dumps(doc))
        answer, _ = await whoami(spec, state)
        assert answer == f"{CLIENT_ID} token=3"
        assert servers.lines()[3:] == ["unauthorized", "issued 3"]


async def test_client_secret_post_and_memory_only_without_a_state_dir(tmp_path: Path) -> None:
    async with oauth_servers(tmp_path, method="client_secret_post") as servers:
        spec = spec_for(servers, method="client_secret_post")
        answer, _ = await whoami(spec, None)
        assert answer == f"{CLIENT_ID} token=1"
        assert not list(tmp_path.rglob("*.json"))  # noqa: ASYNC240  # a test assertion, not I/O on the loop


async def test_wrong_secret_fails_the_connection_without_echoing_it(tmp_path: Path) -> None:
    async with oauth_servers(tmp_path) as servers:
        spec = spec_for(servers, secret="not-the-secret")
        send, _recv = trio.open_memory_channel[object](100)
        up = Upstream(spec, send, NullTelemetry(), auth=auth_for(spec, state_dir=tmp_path), backoff=(30.0,))
        async with trio.open_nursery() as nursery:
            await nursery.start(up.run)
            assert up.state is not ServerState.CONNECTED
            nursery.cancel_scope.cancel()
        assert up.last_error is not None
        assert "401" in up.last_error or "invalid_client" in up.last_error, up.last_error
        assert "not-the-secret" not in up.last_error
        assert any(line.startswith("refused client") for line in servers.lines())


def test_refresh_margin() -> None:
    assert refresh_margin(3600) == 60
    assert refresh_margin(300) == 30
    assert refresh_margin(0) == 0


async def test_damaged_or_unwritable_cache_costs_a_token_request_not_the_connection(tmp_path: Path) -> None:
    state = tmp_path / "state"
    async with oauth_servers(tmp_path) as servers:
        spec = spec_for(servers)
        await whoami(spec, state)
        (cache,) = (state / "oauth").iterdir()
        cache.write_text('{"binding": "torn')  # a write cut short (agentd's own writes are atomic)
        answer, _ = await whoami(spec, state)
        assert answer == f"{CLIENT_ID} token=2"
        # The damaged file was moved aside as it was (rfcs/0275), and a new one written.
        (aside,) = (state / "oauth").glob("*.corrupt-*")
        assert aside.read_text() == '{"binding": "torn'
        assert json.loads(cache.read_text())["token"]
        aside.unlink()
        # The cache folder cannot be made (a file is in the way; chmod means nothing to root).
        cache.unlink()
        (state / "oauth").rmdir()
        (state / "oauth").write_text("not a folder")
        auth = auth_for(spec, state_dir=state)
        answer, _ = await whoami(spec, state, auth)
        assert answer == f"{CLIENT_ID} token=3"
        assert auth._cache.write_error is not None  # type: ignore[attr-defined]

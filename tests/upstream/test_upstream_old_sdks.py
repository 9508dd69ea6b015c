"""Upstream against servers built on older SDKs, and URL-only entries that find their transport.

Real FastMCP servers (``tests/mcpservers/oldsdk_server.py``) run under the Python
``mcp`` SDK 1.8.1 (it fails to validate ``server/discover``: over stdio it says
nothing and lives on, over HTTP+SSE it closes its event stream) and 1.30.0, the
last 1.x (it answers the probe with an error), each in its own virtual
environment (``tests/support/oldmcp.py``).
The Node ``server-everything`` serves the HTTP+SSE case from another SDK.

agentd lists and calls their tools over stdio and SSE, receives their
``notifications/resources/updated``, keeps the era and transport it found
across a reconnect, and honours a pinned ``protocol`` (rfcs/0285, rfcs/0286).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.events import ResourceChanged, ServerState, SubscriptionStateChanged
from agentd.upstream import Upstream
from tests.mcpservers.helpers import Events
from tests.support.everything import everything_http
from tests.support.oldmcp import INSTALL_TIMEOUT_S, OldSdkUnavailable, old_mcp_python, old_server_argv
from tests.support.processes import listening, stop
from tests.support.telemetry import RecordingTelemetry
from tests.support.watch import Spec

# The first test to need an SDK may build its environment (scripts/setup builds them ahead).
pytestmark = pytest.mark.timeout(INSTALL_TIMEOUT_S + 120)

STARTUP = 60.0
"""startup_timeout of the servers here: a 1.x FastMCP server imports for 1-4 s on a loaded machine."""


def old_python(version: str) -> Path:
    try:
        return old_mcp_python(version)
    except OldSdkUnavailable as exc:
        pytest.fail(str(exc))


@asynccontextmanager
async def upstream(spec: Spec, telemetry: RecordingTelemetry) -> AsyncIterator[tuple[Upstream, Events]]:
    send, recv = trio.open_memory_channel[Any](1000)
    up = Upstream(spec, send, telemetry, backoff=(0.1,), resubscribe_backoff=(0.1,))
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        assert up.state is ServerState.CONNECTED, up.last_error
        yield up, Events(recv)
        nursery.cancel_scope.cancel()


async def _calls_and_updates(up: Upstream, events: Events) -> None:
    """List, call, subscribe, and receive the server's own update for the note a call changed."""
    assert {t.name for t in up.tools} >= {"echo", "add", "set_note"}
    result = await up.call_tool("add", {"a": 2, "b": 3})
    assert result.content[0].text == "5"  # type: ignore[union-attr]
    await up.subscribe("note://alpha")
    assert (await up.read_resource("note://alpha")).contents[0].text == "first"  # type: ignore[union-attr]
    assert not (await up.call_tool("set_note", {"name": "alpha", "text": "changed"})).is_error
    assert await events.next(ResourceChanged, uri="note://alpha") == ResourceChanged(
        up.name, "note://alpha", "updated"
    )


@pytest.mark.parametrize(
    ("version", "probe", "negotiated", "fallbacks"),
    [("1.8.1", "ignored", "2024-11-05", 1), ("1.30.0", "refused", "2025-11-25", 0)],
)
async def test_stdio_server_of_an_old_sdk_connects_and_keeps_its_era_across_a_restart(
    version: str, probe: str, negotiated: str, fallbacks: int
) -> None:
    argv = old_server_argv(old_python(version))
    spec = Spec(name="old", command=argv[0], args=argv[1:], startup_timeout=STARTUP)
    telemetry = RecordingTelemetry(timeout=STARTUP)
    async with upstream(spec, telemetry) as (up, events):
        connected = telemetry.fields("upstream.connected")[0]
        assert {k: connected[k] for k in ("transport", "protocol_version", "era", "probe")} == {
            "transport": "stdio",
            "protocol_version": negotiated,
            "era": "handshake",
            "probe": probe,
        }
        assert len(telemetry.find("upstream.fallback")) == fallbacks
        assert telemetry.find("upstream.connect_failed") == []
        await _calls_and_updates(up, events)

        assert up.server_pid is not None
        os.kill(up.server_pid, signal.SIGKILL)
        again = await telemetry.wait_fields("upstream.connected", count=2)
        assert (again["probe"], again["protocol_version"]) == ("skipped", negotiated)
        assert len(telemetry.find("upstream.fallback")) == fallbacks  # no probe after a reconnect
        assert await events.next(ResourceChanged, within=STARTUP) == ResourceChanged(
            "old", "note://alpha", "synthetic"
        )


@asynccontextmanager
async def old_sse_server(version: str, listener: socket.socket) -> AsyncIterator[trio.Process]:
    process = await trio.lowlevel.open_process(
        old_server_argv(old_python(version), "sse", fd=listener.fileno()),
        pass_fds=(listener.fileno(),),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,  # uvicorn prints the probe's validation error there
    )
    try:
        yield process
    finally:
        await stop(process)


@pytest.mark.parametrize(
    ("version", "tries", "probe", "negotiated"),
    [
        (
            "1.8.1",
            [
                ("http, server/discover probe", "sse, server/discover probe"),
                ("sse, server/discover probe", "sse, initialize"),
            ],
            "failed",
            "2024-11-05",
        ),
        ("1.30.0", [("http, server/discover probe", "sse, server/discover probe")], "refused", "2025-11-25"),
    ],
)
async def test_url_only_sse_server_of_an_old_sdk_finds_sse_and_keeps_it_across_a_restart(
    version: str, tries: list[tuple[str, str]], probe: str, negotiated: str
) -> None:
    listener, port = listening()
    # Cursor's entry for such a server: {"url": "http://…/sse"}, no type.
    spec = Spec(name="old", url=f"http://127.0.0.1:{port}/sse", startup_timeout=STARTUP)
    telemetry = RecordingTelemetry(timeout=STARTUP)
    try:
        async with old_sse_server(version, listener) as first, upstream(spec, telemetry) as (up, events):
            assert [(e["tried"], e["next"]) for e in telemetry.fields("upstream.fallback")] == tries
            assert "HTTP 405 to every POST" in telemetry.fields("upstream.fallback")[0]["error"]
            connected = telemetry.fields("upstream.connected")[0]
            assert (connected["transport"], connected["probe"], connected["protocol_version"]) == (
                "sse",
                probe,
                negotiated,
            )
            assert up.negotiated is not None
            assert up.negotiated.transport == "sse"
            await _calls_and_updates(up, events)

            first.kill()
            await first.wait()
            async with old_sse_server(version, listener):
                again = await telemetry.wait_fields("upstream.connected", count=2)
                assert (again["transport"], again["probe"]) == ("sse", "skipped")
                assert len(telemetry.find("upstream.fallback")) == len(tries)
                await events.next(
                    SubscriptionStateChanged,
                    within=STARTUP,
                    uris=frozenset({"note://alpha"}),
                    state="established",
                )
                assert await events.next(ResourceChanged, uri="note://alpha") == ResourceChanged(
                    "old", "note://alpha", "synthetic"
                )
                assert not (await up.call_tool("set_note", {"name": "alpha", "text": "again"})).is_error
                assert await events.next(ResourceChanged, uri="note://alpha") == ResourceChanged(
                    "old", "note://alpha", "updated"
                )
    finally:
        listener.close()


async def test_a_pinned_handshake_version_is_what_initialize_offers() -> None:
    argv = old_server_argv(old_python("1.30.0"))
    spec = Spec(name="old", command=argv[0], args=argv[1:], startup_timeout=STARTUP, protocol="2025-03-26")
    telemetry = RecordingTelemetry(timeout=STARTUP)
    async with upstream(spec, telemetry) as (up, _events):
        # 1.30.0 speaks 2025-11-25 by default: it answers the offered version.
        assert up.protocol_version == "2025-03-26"
        connected = telemetry.fields("upstream.connected")[0]
        assert (connected["probe"], connected["protocol"]) == ("skipped", "2025-03-26")
        assert telemetry.find("upstream.fallback") == []
        assert telemetry.find("upstream.protocol_counteroffer") == []


async def test_a_pinned_version_the_server_does_not_speak_is_counteroffered_and_told() -> None:
    argv = old_server_argv(old_python("1.8.1"))
    spec = Spec(name="old", command=argv[0], args=argv[1:], startup_timeout=STARTUP, protocol="2025-06-18")
    telemetry = RecordingTelemetry(timeout=STARTUP)
    async with upstream(spec, telemetry) as (up, _events):
        assert up.protocol_version == "2024-11-05"
        [warning] = telemetry.fields("upstream.protocol_counteroffer")
        assert warning == {
            "server": "old",
            "protocol": "2025-06-18",
            "protocol_version": "2024-11-05",
            "fix": "the server does not speak 2025-06-18; set its protocol to '2024-11-05' or 'auto'",
        }
        assert (await up.call_tool("echo", {"text": "hi"})).content[0].text == "hi"  # type: ignore[union-attr]


async def test_url_only_entry_of_server_everything_over_sse_finds_sse() -> None:
    telemetry = RecordingTelemetry(timeout=STARTUP)
    async with everything_http("sse") as url:
        spec = Spec(name="everything", url=url, startup_timeout=STARTUP)
        async with upstream(spec, telemetry) as (up, _events):
            [fallback] = telemetry.fields("upstream.fallback")
            assert (fallback["tried"], fallback["next"]) == (
                "http, server/discover probe",
                "sse, server/discover probe",
            )
            connected = telemetry.fields("upstream.connected")[0]
            assert (connected["transport"], connected["era"], connected["probe"]) == (
                "sse",
                "handshake",
                "refused",
            )
            result = await up.call_tool("echo", {"message": "over sse"})
            assert "over sse" in result.content[0].text  # type: ignore[union-attr]


# The SDK's Streamable HTTP client leaves its handshake-era GET stream's async
# generators to the garbage collector when the connection closes (seen with the
# code before rfcs/0286 too): a warning at teardown, not a fault of the test.
@pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning")
async def test_url_only_entry_of_a_streamable_server_stays_on_streamable_http() -> None:
    """A 4xx to the probe alone is not the signal: the initialize that follows is accepted."""
    telemetry = RecordingTelemetry(timeout=STARTUP)
    async with everything_http("streamableHttp") as url:
        spec = Spec(name="everything", url=url, startup_timeout=STARTUP)
        async with upstream(spec, telemetry) as (up, _events):
            assert telemetry.find("upstream.fallback") == []
            connected = telemetry.fields("upstream.connected")[0]
            assert (connected["transport"], connected["era"]) == ("http", "handshake")
            assert up.tools


async def test_sse_pinned_as_http_does_not_switch() -> None:
    """``transport = "http"`` is kept: the 405 is reported, never taken as a cue."""
    listener, port = listening()
    spec = Spec(name="old", url=f"http://127.0.0.1:{port}/sse", transport="http", startup_timeout=STARTUP)
    telemetry = RecordingTelemetry(timeout=STARTUP)
    send, _recv = trio.open_memory_channel[Any](100)
    up = Upstream(spec, send, telemetry, backoff=(30.0,))
    try:
        async with old_sse_server("1.30.0", listener), trio.open_nursery() as nursery:
            await nursery.start(up.run)
            assert up.state is ServerState.RESTARTING
            failed = telemetry.fields("upstream.connect_failed")[0]
            assert "HTTP 405 to every POST" in failed["error"]
            assert [e["next"] for e in telemetry.fields("upstream.fallback")] == ["http, initialize"]
            nursery.cancel_scope.cancel()
    finally:
        listener.close()

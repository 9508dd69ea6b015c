"""What ``agentd/upstream/handshake.py`` assumes of the ``mcp`` SDK: fails when the SDK changes under it.

The real ``mcp.Client`` talks to a scripted peer over in-memory streams (the
wire a transport carries), so each assumption is checked on the messages
themselves:

* ``mode="legacy"`` sends one ``initialize`` offering the SDK's newest
  handshake version as ``params["protocolVersion"]`` (what :func:`offering`
  rewrites), and adopts whatever version the server answers;
* ``mode="<2026 version>"`` sends nothing and adopts *empty* capabilities (so
  a discover try must send its own ``server/discover``:
  :func:`complete_handshake`), and ``send_discover`` + ``adopt`` install
  the server's answer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import mcp_types as types
import pytest
import trio
from mcp import Client
from mcp.shared.message import SessionMessage
from mcp_types.version import LATEST_HANDSHAKE_VERSION

from agentd.upstream.handshake import client_mode, complete_handshake, offering
from agentd.upstream.negotiate import Try


class Peer:
    """A scripted server: answers ``initialize`` and ``server/discover``, records every method."""

    def __init__(self) -> None:
        self.to_client, self.client_reads = anyio.create_memory_object_stream[SessionMessage | Exception](16)
        self.client_writes, self.from_client = anyio.create_memory_object_stream[SessionMessage](16)
        self.methods: list[str] = []
        self.offered: list[str] = []

    @asynccontextmanager
    async def transport(self) -> AsyncIterator[tuple[Any, Any]]:
        streams = (self.to_client, self.client_reads, self.client_writes, self.from_client)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._serve)
                yield self.client_reads, self.client_writes
                nursery.cancel_scope.cancel()
        finally:
            for stream in streams:
                stream.close()

    async def _serve(self) -> None:
        async for item in self.from_client:
            message = item.message
            if not isinstance(message, types.JSONRPCRequest | types.JSONRPCNotification):
                continue
            self.methods.append(message.method)
            if not isinstance(message, types.JSONRPCRequest):
                continue
            result: dict[str, Any]
            if message.method == "initialize":
                offered = (message.params or {})["protocolVersion"]
                self.offered.append(offered)
                result = types.InitializeResult(
                    protocol_version=offered,
                    capabilities=types.ServerCapabilities(tools=types.ToolsCapability()),
                    server_info=types.Implementation(name="peer", version="1"),
                ).model_dump(by_alias=True, mode="json", exclude_none=True)
            elif message.method == "server/discover":
                result = types.DiscoverResult(
                    supported_versions=["2026-07-28"],
                    capabilities=types.ServerCapabilities(tools=types.ToolsCapability()),
                    result_type="complete",
                    ttl_ms=0,
                    cache_scope="public",
                ).model_dump(by_alias=True, mode="json", exclude_none=True)
            else:
                continue
            await self.to_client.send(
                SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=message.id, result=result))
            )


@pytest.mark.parametrize(
    ("version", "expected"), [(None, LATEST_HANDSHAKE_VERSION), ("2025-03-26", "2025-03-26")]
)
async def test_initialize_offers_the_chosen_version_on_the_wire(version: str | None, expected: str) -> None:
    peer = Peer()
    tried = Try("stdio", "initialize", version)
    wire = peer.transport() if version is None else offering(peer.transport(), version)
    async with Client(wire, mode=client_mode(tried), cache=None) as client:  # type: ignore[arg-type]
        await complete_handshake(client, tried)
        assert peer.offered == [expected]
        assert client.protocol_version == expected
        assert client.server_capabilities.tools is not None
    assert peer.methods == ["initialize", "notifications/initialized"]


async def test_a_discover_try_sends_its_own_discover_and_adopts_the_answer() -> None:
    peer = Peer()
    tried = Try("stdio", "discover", "2026-07-28")
    async with Client(peer.transport(), mode=client_mode(tried), cache=None) as client:  # type: ignore[arg-type]
        # The SDK's version mode adopts empty capabilities without a word on the wire...
        assert peer.methods == []
        assert client.server_capabilities.tools is None
        await complete_handshake(client, tried)
        # ...so the try asks once, and the server's answer is what counts.
        assert peer.methods == ["server/discover"]
        assert client.protocol_version == "2026-07-28"
        assert client.server_capabilities.tools is not None


def test_client_modes() -> None:
    assert client_mode(Try("http", "probe")) == "auto"
    assert client_mode(Try("http", "initialize", "2024-11-05")) == "legacy"
    assert client_mode(Try("http", "discover", "2026-07-28")) == "2026-07-28"

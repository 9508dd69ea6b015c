"""The handshakes agentd needs that the SDK's ``Client`` does not offer as such (rfcs/0285).

``mcp.Client`` knows three modes: ``auto`` (probe ``server/discover``, fall
back to ``initialize`` on an error reply), ``legacy`` (``initialize``,
offering the SDK's newest handshake version) and a 2026-era version (adopt
it with *empty* capabilities, no wire traffic). agentd also needs

* ``server/discover`` at a known version with no fallback (a pinned or
  remembered 2026-era server): the mode-version ``Client``, then one
  explicit discover whose result is adopted (:func:`complete_handshake`);
* ``initialize`` offering a chosen version (``protocol = "2025-03-26"``):
  the SDK has no parameter for it, so :func:`offering` rewrites the
  ``protocolVersion`` of the one outgoing ``initialize`` request on the wire.

This module is the only place that leans on how the SDK does these;
``tests/upstream/test_upstream_handshake_sdk.py`` fails if the SDK changes under it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager

import mcp_types as types
from anyio.abc import ObjectSendStream
from mcp import Client
from mcp.shared.message import SessionMessage

from agentd.upstream.negotiate import Try

__all__ = ["client_mode", "complete_handshake", "offering"]


def client_mode(tried: Try) -> str:
    """The SDK ``Client`` mode that starts ``tried``'s handshake."""
    if tried.handshake == "probe":
        return "auto"
    if tried.handshake == "initialize":
        return "legacy"
    assert tried.version is not None, "a discover try names its version"
    return tried.version


async def complete_handshake(client: Client, tried: Try) -> None:
    """Finish what :func:`client_mode` started: a discover try sends its one ``server/discover`` now.

    Raises:
        MCPError: the server refused the discover (or the connection closed).
        pydantic.ValidationError: the reply is not a discover result.
        RuntimeError: the server shares no 2026-era version with the SDK.
    """
    if tried.handshake != "discover":
        return
    assert tried.version is not None
    raw = await client.session.send_discover(tried.version)
    client.session.adopt(types.DiscoverResult.model_validate(raw))


class _Offering(ObjectSendStream[SessionMessage]):
    """A write stream that rewrites the ``initialize`` request's offered version."""

    def __init__(self, inner: ObjectSendStream[SessionMessage], version: str) -> None:
        self._inner = inner
        self._version = version

    async def send(self, item: SessionMessage) -> None:
        message = item.message
        if isinstance(message, types.JSONRPCRequest) and message.method == "initialize":
            params = {**(message.params or {}), "protocolVersion": self._version}
            item = SessionMessage(message.model_copy(update={"params": params}), metadata=item.metadata)
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()


@asynccontextmanager
async def offering(
    transport: AbstractAsyncContextManager[tuple[object, object]], version: str
) -> AsyncIterator[tuple[object, object]]:
    """``transport`` with its ``initialize`` request offering ``version`` instead of the SDK's newest."""
    async with transport as (read, write):
        assert isinstance(write, ObjectSendStream)
        yield read, _Offering(write, version)

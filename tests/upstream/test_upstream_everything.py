"""Interop: agentd's upstream against the third-party `@modelcontextprotocol/server-everything` (Node).

The pinned version (2026.8.31) is installed by tests/support/thirdparty.py
(``scripts/test`` runs it; the helper installs on first use otherwise); a
failed install fails the test, never skips it, so a CI that cannot install
cannot pass silently. ``AGENTD_EVERYTHING_SERVER`` may point at another copy
of the same version.
"""

from __future__ import annotations

import pytest
import trio

from agentd.events import ResourceChanged, SubscriptionStateChanged
from agentd.observe.telemetry import NullTelemetry
from agentd.upstream import Upstream
from tests.mcpservers.helpers import Events, Spec
from tests.support.thirdparty import everything_entry, node

pytestmark = pytest.mark.process  # its servers run as child processes (tests/support helpers)


async def test_everything_server_pushes_updates_for_subscribed_uris() -> None:
    entry = everything_entry()
    send, recv = trio.open_memory_channel[object](100)
    events = Events(recv)
    spec = Spec(name="everything", command=node(), args=[entry, "stdio"])
    up = Upstream(spec, send, NullTelemetry(), init_timeout=30.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        assert up.protocol_version == "2025-11-25"
        assert up.catalog().can_subscribe
        assert "toggle-subscriber-updates" in {t.name for t in up.tools}
        uri = str(up.resources[0].uri)
        read = await up.read_resource(uri)
        assert read.contents

        await up.subscribe(uri)
        await events.next(SubscriptionStateChanged, uris=frozenset({uri}), state="established")
        result = await up.call_tool("toggle-subscriber-updates", {})
        assert not result.is_error
        assert await events.next(ResourceChanged, within=15) == ResourceChanged("everything", uri, "updated")
        nursery.cancel_scope.cancel()

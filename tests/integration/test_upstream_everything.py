"""Interop: agentd's upstream against the third-party `@modelcontextprotocol/server-everything` (Node).

CI installs it once and points ``AGENTD_EVERYTHING_SERVER`` at its entry point::

    npm install --prefix /work/npm-cache/everything @modelcontextprotocol/server-everything@2026.8.31
    export AGENTD_EVERYTHING_SERVER=/work/npm-cache/everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js

The test fails (never skips) when it is missing, so a CI that forgot the
install cannot pass silently.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest
import trio

from agentd.events import ResourceChanged, SubscriptionStateChanged
from agentd.telemetry import NullTelemetry
from agentd.upstream import Upstream

# tests/integration has no __init__.py, so the repository root is not on sys.path by itself.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.servers.helpers import Events, Spec

INSTALL = (
    "install it with `npm install --prefix /work/npm-cache/everything "
    "@modelcontextprotocol/server-everything@2026.8.31` and set AGENTD_EVERYTHING_SERVER="
    "/work/npm-cache/everything/node_modules/@modelcontextprotocol/server-everything/dist/index.js"
)


def _entry_point() -> str:
    path = os.environ.get("AGENTD_EVERYTHING_SERVER")
    if not path:
        pytest.fail(f"AGENTD_EVERYTHING_SERVER is not set: {INSTALL}")
    if not Path(path).is_file():
        pytest.fail(f"AGENTD_EVERYTHING_SERVER={path!r} is not a file: {INSTALL}")
    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: install Node.js 20 or newer to run the interop test")
    return path


async def test_everything_server_pushes_updates_for_subscribed_uris() -> None:
    entry = _entry_point()
    send, recv = trio.open_memory_channel[object](100)
    events = Events(recv)
    spec = Spec(name="everything", command="node", args=[entry, "stdio"])
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

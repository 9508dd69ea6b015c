"""Upstream connections to real MCP servers over real stdio, both protocol eras."""

from __future__ import annotations

from pathlib import Path

import mcp_types as types
import pytest
import trio

from agentd.core.errors import CapabilityMissing, ServerUnavailable, UpstreamError
from agentd.events import (
    CatalogChanged,
    ResourceChanged,
    ServerState,
    ServerStateChanged,
    SubscriptionStateChanged,
)
from agentd.observe.telemetry import NullTelemetry
from agentd.upstream import Upstream, connect_all, resolve_server_for_uri
from tests.mcpservers.helpers import notes_spec, running_upstream

pytestmark = pytest.mark.process  # its servers run as child processes (tests/support helpers)

ERAS = [("modern", "2026-07-28"), ("legacy", "2025-11-25")]


@pytest.mark.parametrize(("era", "version"), ERAS)
async def test_connect_call_read_subscribe_and_change(tmp_path: Path, era: str, version: str) -> None:
    async with running_upstream(notes_spec("notes", tmp_path / "s.json", era=era)) as (up, events):
        assert up.state is ServerState.CONNECTED
        assert up.protocol_version == version
        await events.next(ServerStateChanged, state=ServerState.CONNECTED)

        names = {t.name for t in up.tools}
        assert {"get_note", "set_note", "add_note", "add_tool"} <= names
        get_note = next(t for t in up.tools if t.name == "get_note")
        assert get_note.annotations is not None
        assert get_note.annotations.read_only_hint is True
        assert {str(r.uri) for r in up.resources} == {"note://alpha", "note://beta", "config://server"}
        assert [t.uri_template for t in up.templates] == ["note://{name}"]

        result = await up.call_tool("get_note", {"name": "alpha"})
        assert not result.is_error
        assert isinstance(result.content[0], types.TextContent)
        assert result.content[0].text == "first note"

        read = await up.read_resource("note://alpha")
        assert isinstance(read.contents[0], types.TextResourceContents)
        assert read.contents[0].text == "first note"

        await up.subscribe("note://alpha")
        await events.next(SubscriptionStateChanged, uris=frozenset({"note://alpha"}), state="established")
        await up.call_tool("set_note", {"name": "alpha", "text": "changed"})
        changed = await events.next(ResourceChanged)
        assert changed == ResourceChanged("notes", "note://alpha", "updated")
        # Never served from a cache: the read after the notice sees the new body.
        read = await up.read_resource("note://alpha")
        assert isinstance(read.contents[0], types.TextResourceContents)
        assert read.contents[0].text == "changed"

        # A change to a URI nobody subscribed to is not delivered.
        await up.unsubscribe("note://alpha")
        await up.call_tool("set_note", {"name": "beta", "text": "x"})
        await up.call_tool("set_note", {"name": "alpha", "text": "y"})
        assert up.subscriptions == frozenset()
    assert not [e for e in events.of(ResourceChanged) if e.kind == "updated" and e != changed]
    assert up.state is ServerState.STOPPED


@pytest.mark.parametrize(("era", "version"), ERAS)
async def test_list_changed_refreshes_catalogs(tmp_path: Path, era: str, version: str) -> None:
    async with running_upstream(notes_spec("notes", tmp_path / "s.json", era=era)) as (up, events):
        await up.call_tool("add_note", {"name": "gamma", "text": "third"})
        catalog = await events.next(CatalogChanged)
        assert catalog.server == "notes"
        assert "note://gamma" in catalog.uris
        assert "note://gamma" in {str(r.uri) for r in up.resources}
        assert resolve_server_for_uri("note://gamma", {"notes": up.catalog()}) == "notes"

        version = up.tools_version
        await up.call_tool("add_tool", {"name": "shiny"})
        with trio.fail_after(10):
            while "shiny" not in {t.name for t in up.tools}:
                version = await up.wait_tools_changed(version)


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_subscribe_without_capability_is_refused(tmp_path: Path, era: str) -> None:
    async with running_upstream(notes_spec("plain", tmp_path / "s.json", "--no-subscribe", era=era)) as (
        up,
        _events,
    ):
        with pytest.raises(
            CapabilityMissing,
            match=r"^server 'plain' cannot subscribe to 'note://alpha': it does not advertise the "
            r"resources.subscribe capability; watch this resource with a timer route instead$",
        ):
            await up.subscribe("note://alpha")
        assert up.catalog().can_subscribe is False


async def test_read_resource_above_cap_is_refused(tmp_path: Path) -> None:
    async with running_upstream(notes_spec("notes", tmp_path / "s.json"), max_read_bytes=5) as (up, _events):
        with pytest.raises(
            UpstreamError,
            match=r"^resource 'note://alpha' on server 'notes' is 10 bytes, above the cap of 5 bytes; "
            r"raise the cap with --max-read-bytes",
        ):
            await up.read_resource("note://alpha")


async def test_tool_error_and_unknown_tool(tmp_path: Path) -> None:
    async with running_upstream(notes_spec("notes", tmp_path / "s.json")) as (up, _events):
        result = await up.call_tool("get_note", {"name": "nope"})
        assert result.is_error
        with pytest.raises(UpstreamError, match=r"^server 'notes' failed resources/read 'note://nope'"):
            await up.read_resource("note://nope")


async def test_calls_before_connect_are_refused(tmp_path: Path) -> None:
    send, _recv = trio.open_memory_channel[object](100)
    up = Upstream(notes_spec("notes", tmp_path / "s.json"), send, NullTelemetry())
    with pytest.raises(
        ServerUnavailable, match=r"^server 'notes' is starting; cannot tools/call 'get_note'$"
    ):
        await up.call_tool("get_note", {"name": "alpha"})
    with pytest.raises(ServerUnavailable, match=r"^server 'notes' has not connected yet \(starting\)"):
        await up.subscribe("note://alpha")


async def test_connect_all_starts_servers_concurrently(tmp_path: Path) -> None:
    send, _recv = trio.open_memory_channel[object](100)
    specs = [notes_spec("a", tmp_path / "a.json"), notes_spec("b", tmp_path / "b.json", era="legacy")]
    async with trio.open_nursery() as nursery:
        ups = await connect_all(specs, send, NullTelemetry(), nursery)
        assert list(ups) == ["a", "b"]
        assert all(u.state is ServerState.CONNECTED for u in ups.values())
        catalogs = {n: u.catalog() for n, u in ups.items()}
        assert resolve_server_for_uri("note://beta", catalogs) == "a"
        nursery.cancel_scope.cancel()

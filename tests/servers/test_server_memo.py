"""``agentd serve memo`` over real stdio, from the SDK client, in both protocol eras."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.support.servers import Pushes, http_server, serve_argv, subscribed

REPO = str(Path(__file__).resolve().parents[2])
#: A push must reach the client well within this; the measured p50 is ~1 ms,
#: the slack covers a loaded 2-core machine.
PUSH_TIMEOUT = 10.0
NOTES = "memo://notes"


def connect(era: str, *args: str) -> AbstractAsyncContextManager[tuple[Client, Pushes]]:
    """A client subscribed to memo://notes in ``era`` ("modern" listen or "legacy" subscribe)."""
    return subscribed(server_params(*args), era, [NOTES])


def server_params(*args: str) -> StdioServerParameters:
    env = {**os.environ, "PYTHONPATH": REPO}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "agentd.servers", "memo", *args], cwd=REPO, env=env
    )


async def read_notes(client: Client) -> Any:
    result = await client.read_resource(NOTES)
    (content,) = result.contents
    assert content.mime_type == "application/json"
    return json.loads(content.text)  # type: ignore[union-attr]


def tool_text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_set_and_delete_push_to_subscribers(era: str) -> None:
    async with connect(era) as (client, pushes):
        expected = "legacy" if era == "legacy" else "2026-07-28"
        assert (client.protocol_version == "2026-07-28") == (expected != "legacy")
        caps = client.server_capabilities
        assert caps.resources is not None
        assert caps.resources.subscribe is True
        (res,) = (await client.list_resources()).resources
        assert str(res.uri) == NOTES
        assert res.description is not None
        assert res.description.splitlines()[-1].startswith(
            "Example: watch_start(name='notes', uri='memo://notes'"
        )
        assert await read_notes(client) == {}

        result = await client.call_tool("memo_set", {"key": "todo", "value": ["milk"]})
        assert not result.is_error
        assert await pushes.next() == NOTES
        assert await read_notes(client) == {"todo": ["milk"]}

        await client.call_tool("memo_delete", {"key": "todo"})
        assert await pushes.next() == NOTES
        assert await read_notes(client) == {}


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_bad_input_gets_clear_errors_and_server_keeps_answering(era: str) -> None:
    async with connect(era) as (client, _):
        with pytest.raises(
            MCPError, match=r"unknown resource 'memo://nope': this server serves memo://notes"
        ):
            await client.read_resource("memo://nope")
        missing = await client.call_tool("memo_set", {"value": 1})
        assert missing.is_error
        assert "key" in tool_text(missing)
        empty = await client.call_tool("memo_set", {"key": "", "value": 1})
        assert empty.is_error
        assert "key must be a non-empty string" in tool_text(empty)
        gone = await client.call_tool("memo_delete", {"key": "ghost"})
        assert gone.is_error
        assert tool_text(gone).endswith("no note 'ghost' to delete; existing keys: (none)")
        assert await read_notes(client) == {}


async def test_file_survives_restart(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    async with connect("modern", "--file", str(path)) as (client, pushes):
        await client.call_tool("memo_set", {"key": "owner", "value": "ada"})
        assert await pushes.next() == NOTES
    assert json.loads(path.read_text()) == {"owner": "ada"}
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".")], "no temp files left behind"
    async with connect("legacy", "--file", str(path)) as (client, _):
        assert await read_notes(client) == {"owner": "ada"}


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_external_edit_is_pushed_and_own_writes_are_not_doubled(era: str, tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text('{"a": 1}')
    async with connect(era, "--file", str(path)) as (client, pushes):
        assert await read_notes(client) == {"a": 1}
        await client.call_tool("memo_set", {"key": "b", "value": 2})
        assert await pushes.next() == NOTES
        # Another program rewrites the file (plain write, then close).
        path.write_text('{"a": 1, "b": 2, "c": 3}')
        assert await pushes.next() == NOTES
        assert await read_notes(client) == {"a": 1, "b": 2, "c": 3}
        # Our own write above produced exactly one push: nothing else is queued.
        assert pushes.recv.statistics().current_buffer_used == 0


async def test_corrupt_file_is_reported_and_replaced_only_by_a_valid_write(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text('{"a": 1}')
    async with connect("modern", "--file", str(path)) as (client, pushes):
        assert await read_notes(client) == {"a": 1}
        path.write_text("{not json")
        assert await pushes.next() == NOTES
        with pytest.raises(MCPError, match=r"is not valid JSON .*fix or delete it, or call memo_set"):
            await read_notes(client)
        assert path.read_text() == "{not json", "the server must not overwrite a corrupt file by itself"
        # A directory where the file was: unreadable.
        path.unlink()
        assert await pushes.next() == NOTES
        assert await read_notes(client) == {}
        await client.call_tool("memo_set", {"key": "x", "value": True})
        assert await pushes.next() == NOTES
        assert await read_notes(client) == {"x": True}


async def test_corrupt_file_at_start_then_memo_set_keeps_a_copy(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text("[1, 2]")
    async with connect("legacy", "--file", str(path)) as (client, pushes):
        with pytest.raises(MCPError, match=r"holds a JSON list, not an object"):
            await read_notes(client)
        result = await client.call_tool("memo_set", {"key": "k", "value": "v"})
        assert not result.is_error
        assert await pushes.next() == NOTES
        assert await read_notes(client) == {"k": "v"}
    assert (tmp_path / "notes.json.corrupt").read_text() == "[1, 2]"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd.servers", *args],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": REPO},
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def test_unknown_server_and_remote_http_are_usage_errors(tmp_path: Path) -> None:
    unknown = run_cli("nope")
    assert unknown.returncode == 2
    assert "unknown server 'nope'; choose one of: memo, inbox, files, kube" in unknown.stderr
    remote = run_cli("memo", "--http", "0.0.0.0:8765")
    assert remote.returncode == 2
    assert "bind a loopback address" in remote.stderr
    missing_dir = run_cli("memo", "--file", str(tmp_path / "no" / "notes.json"))
    assert missing_dir.returncode == 2
    assert "does not exist; create it first" in missing_dir.stderr


async def test_streamable_http_transport_pushes() -> None:
    argv = serve_argv("memo", "--http", "127.0.0.1:0")
    async with (
        http_server(argv, env={**os.environ, "PYTHONPATH": REPO}) as server,
        Client(server.url) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        async with client.listen(resource_subscriptions=[NOTES]) as sub:
            await client.call_tool("memo_set", {"key": "h", "value": 1})
            with trio.fail_after(PUSH_TIMEOUT):
                ev = await sub.__anext__()
            assert str(ev.uri) == NOTES
        assert await read_notes(client) == {"h": 1}

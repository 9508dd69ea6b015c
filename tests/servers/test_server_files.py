"""``agentd serve files`` over real stdio, with real files and inotify, in both protocol eras."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.support.servers import Pushes, subscribed

REPO = Path(__file__).resolve().parents[2]
#: A push must reach the client well within this (measured: tens of ms, most of it the
#: 20 ms coalescing window); the slack covers a loaded 2-core machine.
PUSH_TIMEOUT = 10.0
TREE = "file-events://."

pytestmark = pytest.mark.realclock


def connect(
    root: Path, era: str, uri: str = TREE, *extra: str
) -> AbstractAsyncContextManager[tuple[Client, Pushes]]:
    return subscribed(params(root, *extra), era, [uri])


def params(root: Path, *extra: str) -> StdioServerParameters:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return StdioServerParameters(
        command=sys.executable, args=["-m", "agentd.servers", "files", "--root", str(root), *extra], env=env
    )


async def read_json(client: Client, uri: str) -> Any:
    (content,) = (await client.read_resource(uri)).contents
    return content.mime_type, json.loads(content.text)  # type: ignore[union-attr]


async def events(client: Client, uri: str = TREE) -> list[dict[str, Any]]:
    mime, body = await read_json(client, uri)
    assert mime == "application/vnd.agentd.events+json"
    return body["events"]


async def next_events(client: Client, pushes: Pushes, after: int, uri: str = TREE) -> list[dict[str, Any]]:
    """Wait for a push, then return the events with seq > ``after``."""
    assert await pushes.next() == uri
    return [e for e in await events(client, uri) if e["seq"] > after]


def append(path: Path, text: str) -> None:
    with open(path, "a") as f:
        f.write(text)


def save_atomically(tmp: Path, target: Path, text: str) -> None:
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, target)


def summary(evs: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(e["type"], e["path"]) for e in evs]


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_write_modify_delete_rename(tmp_path: Path, era: str):
    (tmp_path / "old.txt").write_text("x")
    async with connect(tmp_path, era) as (client, pushes):
        assert await events(client) == []  # the existing file is the baseline, not an event
        (tmp_path / "new.txt").write_text("hello")
        (ev,) = await next_events(client, pushes, 0)
        assert (ev["seq"], ev["type"], ev["path"], ev["size"]) == (1, "ADDED", "new.txt", 5)
        assert ev["mtime"] == pytest.approx((tmp_path / "new.txt").stat().st_mtime)

        append(tmp_path / "new.txt", " world")
        (ev,) = await next_events(client, pushes, 1)
        assert (ev["type"], ev["path"], ev["size"]) == ("MODIFIED", "new.txt", 11)

        (tmp_path / "new.txt").rename(tmp_path / "moved.txt")
        assert sorted(summary(await next_events(client, pushes, 2))) == [
            ("ADDED", "moved.txt"),
            ("DELETED", "new.txt"),
        ]

        (tmp_path / "old.txt").unlink()
        assert summary(await next_events(client, pushes, 4)) == [("DELETED", "old.txt")]


async def test_editor_save_burst_is_one_modified(tmp_path: Path):
    target = tmp_path / "notes.md"
    target.write_text("v1")
    async with connect(tmp_path, "modern") as (client, pushes):
        await events(client)
        # What vim/VS Code/atomic writers do: write a temp file, then rename it over the original.
        tmp = tmp_path / ".notes.md.swp"
        save_atomically(tmp, target, "v2 and more")
        assert summary(await next_events(client, pushes, 0)) == [("MODIFIED", "notes.md")]


async def test_subtree_watch_sees_new_directories_and_ignores_siblings(tmp_path: Path):
    (tmp_path / "src").mkdir()
    uri = "file-events://src"
    async with connect(tmp_path, "modern", uri) as (client, pushes):
        assert await events(client, uri) == []
        (tmp_path / "elsewhere.txt").write_text("not watched")
        (tmp_path / "src" / "pkg").mkdir()
        (tmp_path / "src" / "pkg" / "mod.py").write_text("x = 1\n")
        assert summary(await next_events(client, pushes, 0, uri)) == [("ADDED", "src/pkg/mod.py")]


async def test_paths_outside_the_root_are_refused(tmp_path: Path):
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "secret.txt").write_text("no")
    (root / "escape").symlink_to(tmp_path)
    (root / "ok.txt").write_text("fine")
    async with Client(params(root)) as client:
        with pytest.raises(MCPError, match=r"leads outside the served root .*through '\.\.'"):
            await client.read_resource("file:///../secret.txt")
        with pytest.raises(MCPError, match=r"'/etc' is outside the served root"):
            await client.read_resource("file-events:///etc")
        with pytest.raises(MCPError, match=r"symlink to .* outside the served root"):
            await client.read_resource("file:///escape/secret.txt")
        # The server keeps serving.
        _, body = await read_json(client, "file:///ok.txt")
        assert body == {"path": "ok.txt", "size": 4, "text": "fine"}
        # An absolute path inside the root is fine.
        _, body = await read_json(client, f"file:///{root}/ok.txt")
        assert body["path"] == "ok.txt"


async def test_big_and_binary_files_report_size_and_hash(tmp_path: Path):
    big = b"a" * 2048
    binary = bytes(range(256))
    (tmp_path / "big.txt").write_bytes(big)
    (tmp_path / "blob.bin").write_bytes(binary)
    async with Client(params(tmp_path, "--max-text-bytes", "1024")) as client:
        mime, body = await read_json(client, "file:///big.txt")
        assert mime == "application/json"
        assert body == {"path": "big.txt", "size": 2048, "sha256": hashlib.sha256(big).hexdigest()}
        _, body = await read_json(client, "file:///blob.bin")
        assert body == {"path": "blob.bin", "size": 256, "sha256": hashlib.sha256(binary).hexdigest()}
        with pytest.raises(MCPError, match=r"'missing.txt' does not exist"):
            await client.read_resource("file:///missing.txt")
        with pytest.raises(MCPError, match=r"'nope' does not exist: create it first"):
            await client.read_resource("file-events://nope")


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_file_state_resource_is_pushed_on_change(tmp_path: Path, era: str):
    target = tmp_path / "config.json"
    target.write_text('{"a": 1}')
    uri = "file:///config.json"
    async with connect(tmp_path, era, uri) as (client, pushes):
        _, body = await read_json(client, uri)
        assert body["text"] == '{"a": 1}'
        (tmp_path / "unrelated.txt").write_text("no push for this")
        target.write_text('{"a": 2}')
        assert await pushes.next() == uri
        _, body = await read_json(client, uri)
        assert body["text"] == '{"a": 2}'


async def test_watching_a_file_as_a_tree_says_what_to_do(tmp_path: Path):
    (tmp_path / "one.txt").write_text("x")
    uri = "file-events://one.txt"
    async with connect(tmp_path, "modern", uri) as (client, _pushes):
        with pytest.raises(MCPError, match=r"'one.txt' is not a directory: subscribe to file:///one.txt"):
            await events(client, uri)


async def subscribe_once(client: Client, era: str, uri: str) -> None:
    """Subscribe ``uri`` (legacy: held by the connection; modern: a listen stream, closed at once)."""
    if era == "legacy":
        await client.subscribe_resource(uri)
        return
    async with client.listen(resource_subscriptions=[uri]):
        pass


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_watch_past_max_watchers_is_refused_and_a_shared_one_is_not(tmp_path: Path, era: str) -> None:
    """rfcs/0265: ``--max-watchers 1``: a second directory is refused; the same tree by another spelling is not."""
    (tmp_path / "a").mkdir()
    async with connect(tmp_path, era, TREE, "--max-watchers", "1") as (client, _pushes):
        await events(client)
        refusal = (
            r"subscription to 'file-events://a' refused: this server already runs 1 inotify watches \(one per "
            r"subscribed URI\), its limit \(--max-watchers 1 of `agentd serve files`\)"
        )
        with pytest.raises(MCPError, match=refusal):
            await subscribe_once(client, era, "file-events://a")
        # "file-events://" names the same tree as "file-events://.": it shares the running watcher.
        await subscribe_once(client, era, "file-events://")

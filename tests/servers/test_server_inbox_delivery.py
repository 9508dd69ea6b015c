"""``agentd serve inbox``: at-least-once delivery, over real stdio, as Claude Code and as a log reader.

Each test runs the real server process with the raw JSON-RPC client of
``tests/support/rawmcp.py`` (Claude Code's handshake and capabilities).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio

from tests.support.rawmcp import RawClient, raw_server, server_env

AGENT = "bob"
URI = f"inbox://{AGENT}"
STATUS = f"{URI}/status"
CHANNEL = "notifications/claude/channel"
UPDATED = "notifications/resources/updated"
#: A clean stop takes well under a second; the bound covers a loaded 2-core machine.
STOP_BOUND = 10.0


def argv(directory: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "agentd.servers",
        "inbox",
        "--agent",
        AGENT,
        "--dir",
        str(directory),
        *extra,
    ]


def msg(i: int | str, **extra: Any) -> dict[str, Any]:
    return {"id": f"m{i}", "from": "alice", "text": f"hi {i}", **extra}


def append(directory: Path, *lines: dict[str, Any] | str | bytes) -> None:
    data = b"".join(
        x if isinstance(x, bytes) else x.encode() if isinstance(x, str) else json.dumps(x).encode() + b"\n"
        for x in lines
    )
    fd = os.open(directory / f"{AGENT}.inbox", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, data)
    finally:
        os.close(fd)


async def events(client: RawClient) -> list[dict[str, Any]]:
    return (await client.read_json(URI))["events"]


async def ids(client: RawClient) -> list[str]:
    return [e["id"] for e in await events(client) if e["type"] == "MESSAGE"]


async def subscribed(client: RawClient) -> None:
    await client.initialize()
    await client.request("resources/subscribe", {"uri": URI})


async def updated(client: RawClient, after: int) -> None:
    await client.wait_until(lambda: len([n for n in client.of(UPDATED) if n.params["uri"] == URI]) > after)


def n_updates(client: RawClient) -> int:
    return len([n for n in client.of(UPDATED) if n.params["uri"] == URI])


# --------------------------------------------------------------------------- backlog


async def test_messages_that_arrive_while_nobody_is_connected_wait_and_are_pushed_after_initialize(
    tmp_path: Path,
) -> None:
    # A server runs with no consumer interested: nothing it does moves the position.
    async with raw_server(argv(tmp_path)) as first:
        await first.initialize(capabilities={}, name="idle-reader")
        await first.request("resources/subscribe", {"uri": URI})  # reads the log, gets no channel pushes
        append(tmp_path, msg(1), msg(2, urgent=True))
        await updated(first, 0)
    append(tmp_path, msg(3))  # and one while no server runs at all
    async with raw_server(argv(tmp_path)) as claude:
        await claude.initialize()  # what Claude Code declares: roots only
        await claude.wait_until(lambda: len(claude.of(CHANNEL)) == 3)
        got = [(n.params["meta"]["id"], n.params["meta"]["seq"]) for n in claude.of(CHANNEL)]
        assert got == [("m2", "2"), ("m1", "1"), ("m3", "3")]  # urgent first, each with its seq
        assert await ids(claude) == ["m2", "m1", "m3"]  # and the log shows them at once
        result = await claude.call_tool("ack", {"seqs": [1, 2, 3]})
        assert result["structuredContent"]["acked"] == [1, 2, 3]
    async with raw_server(argv(tmp_path)) as again:
        await again.initialize()
        assert await ids(again) == []
        assert again.of(CHANNEL) == []


# --------------------------------------------------------------------------- window and gap


async def test_a_burst_beyond_the_window_is_a_gap_that_comes_back_as_the_shown_ones_are_acknowledged(
    tmp_path: Path,
) -> None:
    append(tmp_path, *[msg(i, urgent=i == 2) for i in range(1, 11)])  # one write, 10 lines
    async with raw_server(argv(tmp_path, "--window", "4")) as client:
        await subscribed(client)
        body = await client.read_json(URI)
        assert [e["seq"] for e in body["events"]] == [7, 8, 9, 10]
        assert (body["pending"], body["gap"]["count"], body["gap"]["first_seq"], body["gap"]["last_seq"]) == (
            10, 6, 1, 6,
        )  # fmt: skip
        assert "6 older pending message(s) (seq 1..6) are not shown" in body["gap"]["message"]
        # A hidden message is still readable by id, whole.
        (hidden,) = (await client.read_json(f"{URI}/message/m2"))["messages"]
        assert (hidden["id"], hidden["text"], hidden["pending"], hidden["urgent"]) == (
            "m2",
            "hi 2",
            True,
            True,
        )
        seen: list[int] = []
        while True:
            shown = [e["seq"] for e in (await client.read_json(URI))["events"]]
            if not shown:
                break
            seen += shown
            before = n_updates(client)
            await client.call_tool("ack", {"seqs": shown})
            if (await client.read_json(STATUS))["pending"]:
                await updated(client, before)  # the refill is pushed
        assert sorted(seen) == list(range(1, 11))
        assert (await client.read_json(STATUS))["pending"] == 0


# --------------------------------------------------------------------------- blank lines, reused ids


async def test_blank_lines_never_look_like_a_rewrite_and_a_reused_id_loses_nothing(tmp_path: Path) -> None:
    append(tmp_path, msg(1), b"\n", msg(2), b"\n\n")
    async with raw_server(argv(tmp_path)) as client:
        await subscribed(client)
        assert await ids(client) == ["m1", "m2"]
        await client.call_tool("ack", {"id": "m1"})
    # The same id again, blank lines around it; a restart in between.
    append(tmp_path, b"\n", {"id": "m2", "from": "carol", "text": "again"}, b"   \n", msg(3))
    async with raw_server(argv(tmp_path)) as client:
        await subscribed(client)
        got = await events(client)
        assert [e["type"] for e in got] == ["MESSAGE"] * 3, got  # no ERROR: nothing was rewritten
        assert [(e["id"], e["seq"], e["text"]) for e in got] == [
            ("m2", 2, "hi 2"),
            ("m2", 3, "again"),
            ("m3", 4, "hi 3"),
        ]
        ambiguous = await client.call_tool("ack", {"id": "m2"})
        assert ambiguous["isError"] is True
        assert (
            "id 'm2' names 2 pending messages (seq 2: 'hi 2', seq 3: 'again')"
            in ambiguous["content"][0]["text"]
        )
        await client.call_tool("ack", {"id": "m2", "seq": 3})
        assert [(e["id"], e["seq"]) for e in await events(client)] == [("m2", 2), ("m3", 4)]


# --------------------------------------------------------------------------- rewrites


async def test_a_rewritten_inbox_offers_everything_after_the_last_acknowledged_message_again(
    tmp_path: Path,
) -> None:
    append(tmp_path, msg(1), msg(2), msg(3))
    async with raw_server(argv(tmp_path)) as client:
        await subscribed(client)
        await client.call_tool("ack", {"seqs": [1]})
        before = n_updates(client)
        # A sync tool replaces the file by rename: a line from another host inserted after m1.
        path = tmp_path / f"{AGENT}.inbox"
        lines = path.read_bytes().splitlines(keepends=True)
        tmp = tmp_path / "incoming"
        tmp.write_bytes(lines[0] + json.dumps(msg("remote")).encode() + b"\n" + b"".join(lines[1:]))
        os.replace(tmp, path)
        await updated(client, before)
        got = await events(client)
        assert got[0]["type"] == "ERROR"
        assert (
            "the inbox was rewritten or truncated; resuming after the last acknowledged message"
            in got[0]["message"]
        )
        assert [e["id"] for e in got[1:]] == ["mremote", "m2", "m3"]
        assert min(e["seq"] for e in got) > 3  # new numbers, above everything handed out


# --------------------------------------------------------------------------- directory replaced


def remove_while_written(box: Path) -> None:
    """Delete a directory the server may be writing into, as `rm -rf` by a person would.

    The server replaces its cursor file by writing a temporary file and renaming it, so a
    file listed by rmtree can be gone by the time it is unlinked, and one written after the
    listing makes the last rmdir fail. Each such pass is retried; once the directory is gone,
    the server can create nothing in it.
    """
    for _ in range(100):
        if not os.path.lexists(box):
            return
        try:
            shutil.rmtree(box)
        except OSError as error:
            if error.errno not in (errno.ENOENT, errno.ENOTEMPTY):
                raise
    if os.path.lexists(box):
        raise AssertionError(f"{box} could not be deleted in 100 passes")


@pytest.mark.parametrize("how", ["moved away", "deleted", "moved away, created again later"])
async def test_a_replaced_directory_is_followed_with_an_error_and_the_lock_taken_again(
    tmp_path: Path, how: str
) -> None:
    box = tmp_path / "box"
    box.mkdir()
    append(box, msg(1))
    async with raw_server(argv(box)) as client:
        await subscribed(client)
        assert await ids(client) == ["m1"]
        before = n_updates(client)
        if how.startswith("moved away"):
            box.rename(tmp_path / "box.old")
        else:
            remove_while_written(box)
        if how.endswith("later"):
            # Nothing there yet: reads keep answering and say what happened.
            await updated(client, before)
            gone = [e["message"] for e in await events(client) if e["type"] == "ERROR"]
            assert any(
                f"the inbox directory {box} was moved away or deleted; waiting for it" in m for m in gone
            )
            before = n_updates(client)
        box.mkdir()
        await updated(client, before)
        await client.wait_until(lambda: (box / f".~{AGENT}.lock").exists() or client.gone)
        append(box, msg(2))
        await client.wait_until(lambda: n_updates(client) > before + 1)
        got = await events(client)
        while "m2" not in [e.get("id") for e in got]:
            await updated(client, n_updates(client))
            got = await events(client)
        errors = [e["message"] for e in got if e["type"] == "ERROR"]
        assert any(f"the inbox directory {box} was replaced" in m for m in errors), errors
        assert [e["id"] for e in got if e["type"] == "MESSAGE"] == ["m2"]
        # The new directory is held: a second server for it stands down.
        second = await trio.run_process(argv(box), capture_stderr=True, check=False, env=server_env())
        assert second.returncode == 1
        assert b"is already drained by pid" in second.stderr


# --------------------------------------------------------------------------- signals


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
async def test_a_signal_stops_the_server_promptly_with_stdin_still_open(tmp_path: Path, sig: int) -> None:
    async with raw_server(argv(tmp_path)) as client:
        await client.initialize()
        await client.read_json(STATUS)
        client.proc.send_signal(sig)
        with trio.fail_after(STOP_BOUND):
            await client.proc.wait()  # stdin is still open: the old transport kept running here
        assert client.proc.returncode == 0
    assert not (tmp_path / f".~{AGENT}.watcher-active").exists()
    async with raw_server(argv(tmp_path)) as replacement:  # the lock was released
        await replacement.initialize()
        assert (await replacement.read_json(STATUS))["agent"] == AGENT


# --------------------------------------------------------------------------- large inputs


async def test_reads_are_incremental_with_a_large_acknowledged_prefix(tmp_path: Path) -> None:
    """60 MB already acknowledged: an append is read alone, and memory does not grow with the file."""
    prefix = (json.dumps(msg(0, pad="x" * 900)) + "\n").encode() * (60 * 1024)
    (tmp_path / f"{AGENT}.inbox").write_bytes(prefix)
    cursor = {
        "version": 1,
        "offset": len(prefix),
        "seq": 60 * 1024 + 1,
        "top": 60 * 1024 + 1,
        "check": hashlib.sha256(prefix[-4096:]).hexdigest(),
    }
    (tmp_path / f".~{AGENT}.cursor").write_text(json.dumps(cursor))
    async with raw_server(argv(tmp_path)) as client:
        await subscribed(client)
        assert await ids(client) == []
        rss_before = psutil.Process(client.proc.pid).memory_info().rss
        append(tmp_path, msg(1))
        await updated(client, 0)
        assert [(e["id"], e["seq"]) for e in await events(client)] == [("m1", 60 * 1024 + 1)]
        grown = psutil.Process(client.proc.pid).memory_info().rss - rss_before
        assert grown < 16 * 1024 * 1024, f"RSS grew by {grown / 2**20:.1f} MiB reading one appended line"


async def test_a_huge_line_is_a_capped_channel_notification_and_readable_whole(tmp_path: Path) -> None:
    text = "z" * (20 * 1024 * 1024)
    async with raw_server(argv(tmp_path)) as client:
        await client.initialize()
        await client.read_json(STATUS)
        append(tmp_path, {"id": "huge", "from": "alice", "text": text})
        note = await client.next_notification(CHANNEL, timeout=60)
        assert len(note.params["content"]) < 9000
        assert note.params["content"].endswith("read inbox://bob/message/huge]")
        (shown,) = await events(client)
        assert shown["truncated"] is True
        (whole,) = (await client.read_json(f"{URI}/message/huge"))["messages"]
        assert whole["text"] == text


# --------------------------------------------------------------------------- sync tools


async def test_a_sentinel_from_another_host_does_not_block_and_syncthing_folders_are_warned_about(
    tmp_path: Path,
) -> None:
    (tmp_path / ".stfolder").mkdir()
    box = tmp_path / "inbox"
    box.mkdir()
    sentinel = box / f".~{AGENT}.watcher-active"
    sentinel.write_text(json.dumps({"pid": 1, "start_time": 0.0, "host": "laptop-far-away"}))
    async with raw_server(argv(box)) as client:
        await client.initialize()
        status = await client.read_json(STATUS)
        warnings = "\n".join(status["warnings"])
        assert "found a sentinel of host 'laptop-far-away' (pid 1)" in warnings
        assert f"add the lines '(?d).~*' and '(?d).*.watcher-active' to {tmp_path / '.stignore'}" in warnings
        assert json.loads(sentinel.read_text())["pid"] == client.proc.pid
    (tmp_path / ".stignore").write_text("(?d).~*\n")
    async with raw_server(argv(box)) as client:
        await client.initialize()
        (warning,) = (await client.read_json(STATUS))["warnings"]
        assert f"add the line '(?d).*.watcher-active' to {tmp_path / '.stignore'}" in warning
    (tmp_path / ".stignore").write_text("(?d).~*\n(?d).*.watcher-active\n")
    async with raw_server(argv(box)) as client:
        await client.initialize()
        assert (await client.read_json(STATUS))["warnings"] == []


async def test_the_mark_and_state_of_an_earlier_agentd_are_taken_over(tmp_path: Path) -> None:
    append(tmp_path, msg(1), msg(2))
    first = len(json.dumps(msg(1))) + 1
    (tmp_path / f".{AGENT}.hwm").write_text(json.dumps({"offset": first, "last_id": "m1"}))
    (tmp_path / f".{AGENT}.state").write_text(json.dumps({"acked": {"m1": "2026-01-01T00:00:00Z"}}))
    async with raw_server(argv(tmp_path)) as client:
        await subscribed(client)
        assert await ids(client) == ["m2"]
        await client.call_tool("ack", {"id": "m2"})
        assert set((await client.read_json(STATUS))["acked"]) == {"m1", "m2"}
    assert not (tmp_path / f".{AGENT}.hwm").exists()
    assert (
        json.loads((tmp_path / f".~{AGENT}.cursor").read_text())["offset"]
        == (tmp_path / f"{AGENT}.inbox").stat().st_size
    )

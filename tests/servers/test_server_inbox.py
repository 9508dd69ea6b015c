"""``agentd serve inbox`` over real stdio, from the SDK client, in both protocol eras."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.support.rawmcp import raw_server
from tests.support.servers import Pushes, subscribed

REPO = str(Path(__file__).resolve().parents[2])
#: A push must reach the client well within this; measured p50 is ~1 ms.
PUSH_TIMEOUT = 10.0
AGENT = "bob"
URI = f"inbox://{AGENT}"
STATUS = f"inbox://{AGENT}/status"


def connect(era: str, directory: Path, *extra: str) -> AbstractAsyncContextManager[tuple[Client, Pushes]]:
    params = StdioServerParameters(command=sys.executable, args=argv(directory, *extra), cwd=REPO, env=env())
    return subscribed(params, era, [URI, STATUS])


def argv(directory: Path, *extra: str) -> list[str]:
    return ["-m", "agentd.servers", "inbox", "--agent", AGENT, "--dir", str(directory), *extra]


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": REPO}


async def read_json(client: Client, uri: str) -> Any:
    (content,) = (await client.read_resource(uri)).contents
    return json.loads(content.text)  # type: ignore[union-attr]


async def messages(client: Client) -> list[dict[str, Any]]:
    return [e for e in (await read_json(client, URI))["events"] if e["type"] == "MESSAGE"]


def append(directory: Path, *lines: str | dict[str, Any], agent: str = AGENT) -> None:
    data = "".join(line if isinstance(line, str) else json.dumps(line) + "\n" for line in lines)
    with open(directory / f"{agent}.inbox", "a") as f:
        f.write(data)


def touch_for_write(path: Path) -> None:
    """Open for writing and close: IN_CLOSE_WRITE without changing the content."""
    with open(path, "a"):
        pass


def overwrite_in_place(path: Path, data: bytes) -> None:
    with open(path, "r+b") as f:
        f.write(data)


def msg(i: int, *, urgent: bool = False, sender: str = "alice") -> dict[str, Any]:
    return {
        "id": f"m{i}",
        "from": sender,
        "ts": f"2026-11-03T10:00:{i:02d}Z",
        "urgent": urgent,
        "text": f"hi {i}",
    }


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_burst_is_one_batch_urgent_first(era: str, tmp_path: Path) -> None:
    async with connect(era, tmp_path) as (client, pushes):
        assert await messages(client) == []
        (res, status) = (await client.list_resources()).resources
        assert (str(res.uri), res.mime_type) == (URI, "application/vnd.agentd.events+json")
        assert res.description is not None
        assert res.description.splitlines()[-1].startswith(
            "Example: watch_start(name='inbox', uri='inbox://bob'"
        )
        assert str(status.uri) == STATUS
        # One write: a burst with urgent messages in the middle, and an extra field.
        append(tmp_path, msg(1), msg(2, urgent=True), {**msg(3), "thread": "t9"}, msg(4, urgent=True))
        await pushes.until(URI)
        got = await messages(client)
        assert [m["id"] for m in got] == ["m2", "m4", "m1", "m3"]
        assert [m["seq"] for m in got] == [2, 4, 1, 3]  # seq is the file order; urgent ones are listed first
        assert got[3]["thread"] == "t9"
        assert got[0]["from"] == "alice"
        assert got[0]["text"] == "hi 2"


async def test_partial_line_is_deferred_then_delivered(tmp_path: Path) -> None:
    async with connect("modern", tmp_path) as (client, pushes):
        append(tmp_path, msg(1), '{"id": "m2", "from": "alice", "te')
        await pushes.until(URI)
        assert [m["id"] for m in await messages(client)] == ["m1"]
        status = await read_json(client, STATUS)
        assert status["deferred"]["reason"] == "an incomplete last line"
        append(tmp_path, 'xt": "done"}\n', msg(3))
        await pushes.until(URI)
        assert [m["id"] for m in await messages(client)] == ["m1", "m2", "m3"]
        assert (await read_json(client, STATUS))["deferred"] is None


async def test_invalid_line_blocks_warns_after_three_attempts_and_is_never_skipped(tmp_path: Path) -> None:
    inbox = tmp_path / f"{AGENT}.inbox"
    async with connect("legacy", tmp_path) as (client, pushes):
        append(tmp_path, "not json yet\n", msg(1))
        # Each wake-up of the watcher is one attempt (one append may wake it once or twice);
        # opening the file for writing and closing it wakes it without changing it.
        while (await read_json(client, STATUS))["deferred"] is None:
            await pushes.next()
        while (await read_json(client, STATUS))["deferred"]["attempts"] < 3:
            touch_for_write(inbox)
            await pushes.until(STATUS)
        events = (await read_json(client, URI))["events"]
        assert [e["type"] for e in events] == ["ERROR"]
        assert (
            "byte 0 of the inbox is a line that is not a JSON object after 3 attempts" in events[0]["message"]
        )
        assert "finish or fix that line" in events[0]["message"]
        # Fix the line in place (same length, so no rewrite detection kicks in).
        data = inbox.read_bytes().replace(b"not json yet", b'{"id":"m0" }')
        overwrite_in_place(inbox, data)
        while not await messages(client):
            await pushes.next()
        assert [m["id"] for m in await messages(client)] == ["m0", "m1"]


async def test_restart_offers_what_was_not_acknowledged_and_what_arrived_while_down(tmp_path: Path) -> None:
    async with connect("modern", tmp_path) as (client, pushes):
        append(tmp_path, msg(1), msg(2))
        await pushes.until(URI)
        assert [(m["id"], m["seq"]) for m in await messages(client)] == [("m1", 1), ("m2", 2)]
        assert (await client.call_tool("ack", {"id": "m1"})).structured_content["acked"] == [1]
    assert not (tmp_path / f".~{AGENT}.watcher-active").exists(), "sentinel removed on a clean stop"
    append(tmp_path, msg(3), msg(4, urgent=True))
    async with connect("legacy", tmp_path) as (client, _):
        # m2 was read but never acknowledged: it is still there, with the same seq.
        assert [(m["id"], m["seq"]) for m in await messages(client)] == [("m4", 4), ("m2", 2), ("m3", 3)]
        assert not (await client.call_tool("ack", {"seqs": [2, 3, 4]})).is_error
    # Once everything is acknowledged, nothing comes back.
    async with connect("modern", tmp_path) as (client, _):
        assert await messages(client) == []
        assert (await read_json(client, STATUS))["pending"] == 0


async def test_reply_tools_and_status(tmp_path: Path) -> None:
    async with connect("modern", tmp_path) as (client, pushes):
        append(tmp_path, msg(1, sender="alice"))
        await pushes.until(URI)
        assert not (await client.call_tool("ack", {"id": "m1"})).is_error
        await pushes.until(STATUS)
        result = await client.call_tool("respond", {"id": "m1", "text": "on it"})
        assert not result.is_error
        reply = json.loads((tmp_path / "alice.inbox").read_text())
        assert reply["in_reply_to"] == "m1"
        assert reply["from"] == AGENT
        assert reply["text"] == "on it"
        assert not (await client.call_tool("mark_handled", {"id": "m1", "note": "fixed"})).is_error
        status = await read_json(client, STATUS)
        assert list(status["acked"]) == ["m1"]
        assert status["handled"]["m1"]["note"] == "fixed"
        assert status["responded"]["m1"] == reply["id"]
        assert (status["cursor"], status["pending"]) == (
            {"offset": tmp_path.joinpath("bob.inbox").stat().st_size, "seq": 2},
            0,
        )
        # Bad input: unknown id, missing argument, unknown URI; the server keeps answering.
        unknown = await client.call_tool("ack", {"id": "nope"})
        assert unknown.is_error
        assert (
            "unknown message id 'nope': use an id from inbox://bob events; pending ids include (none pending)"
            in unknown.content[0].text  # type: ignore[union-attr]
        )
        never = await client.call_tool("ack", {"seqs": [99]})
        assert never.is_error
        assert "seq 99 is not an event of inbox://bob (the newest is 1)" in never.content[0].text  # type: ignore[union-attr]
        assert (await client.call_tool("respond", {"id": "m1"})).is_error
        with pytest.raises(
            MCPError, match=r"unknown resource 'inbox://alice': this server serves inbox://bob"
        ):
            await client.read_resource("inbox://alice")
        assert (await read_json(client, STATUS))["agent"] == AGENT


def run_inbox(directory: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv(directory)],
        cwd=REPO,
        env=env(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        stdin=subprocess.DEVNULL,
    )


async def test_second_drainer_stands_down(tmp_path: Path) -> None:
    async with connect("modern", tmp_path) as (client, _):
        await read_json(client, STATUS)
        second = await trio.to_thread.run_sync(run_inbox, tmp_path)
        assert second.returncode == 1
        assert f"{tmp_path}/bob.inbox is already drained by pid" in second.stderr
        assert "stop that server first, or serve another inbox with --agent" in second.stderr
        assert (await read_json(client, STATUS))["agent"] == AGENT


@pytest.mark.parametrize("staleness", ["dead pid", "start time differs"])
async def test_stale_sentinel_is_taken_over(staleness: str, tmp_path: Path) -> None:
    if staleness == "dead pid":
        pid, start = 2**22 + 17, 0.0  # above the kernel's largest pid_max: never a live process
    else:
        pid, start = os.getpid(), psutil.Process().create_time() - 1000.0
    sentinel = tmp_path / f".~{AGENT}.watcher-active"
    sentinel.write_text(json.dumps({"pid": pid, "start_time": start, "host": None}))
    async with connect("legacy", tmp_path) as (client, _):
        await read_json(client, STATUS)
        info = json.loads(sentinel.read_text())
        assert info["pid"] != pid
        assert psutil.pid_exists(info["pid"])
    assert not sentinel.exists()


async def test_channel_reaches_a_client_that_declares_what_claude_code_declares(tmp_path: Path) -> None:
    """Claude Code declares only roots: the default --channel auto must still reach it."""
    async with raw_server([sys.executable, *argv(tmp_path)]) as client:
        init = await client.initialize()  # capabilities {"roots": {"listChanged": true}}
        assert init["capabilities"]["experimental"] == {"claude/channel": {}}
        assert init["capabilities"]["resources"]["subscribe"] is True
        await client.read_json(STATUS)
        append(tmp_path, msg(1, urgent=True))
        note = await client.next_notification("notifications/claude/channel")
        assert note.params["content"] == "hi 1"
        assert note.params["meta"]["id"] == "m1"
        assert note.params["meta"]["seq"] == "1"
        assert note.params["meta"]["from"] == "alice"
        assert note.params["meta"]["urgent"] == "true"
        assert note.params["meta"]["inbox"] == AGENT


async def test_no_channel_notification_for_a_client_that_reads_the_log(tmp_path: Path) -> None:
    seen: list[str] = []
    updated = trio.Event()

    async def on_message(message: Any) -> None:
        method = str(getattr(getattr(message, "root", message), "method", ""))
        seen.append(method)
        if method == "notifications/resources/updated":
            updated.set()

    params = StdioServerParameters(command=sys.executable, args=argv(tmp_path), cwd=REPO, env=env())
    async with Client(params, mode="legacy", message_handler=on_message) as client:
        await client.subscribe_resource(URI)
        append(tmp_path, msg(1))
        with trio.fail_after(PUSH_TIMEOUT):
            await updated.wait()
        assert [m["id"] for m in await messages(client)] == ["m1"]
    assert "notifications/claude/channel" not in seen


def test_identity_from_env_and_file_and_errors(tmp_path: Path) -> None:
    from agentd.core.errors import ConfigError
    from agentd.servers.inbox.files import resolve_agent

    (tmp_path / ".agentd").mkdir()
    with pytest.raises(ConfigError, match=r"no inbox identity: pass --agent NAME, set AGENTD_INBOX_AGENT"):
        resolve_agent(None, {}, str(tmp_path))
    (tmp_path / ".agentd" / "inbox-agent").write_text("carol\n")
    assert resolve_agent(None, {}, str(tmp_path)) == "carol"
    assert resolve_agent(None, {"AGENTD_INBOX_AGENT": "dave"}, str(tmp_path)) == "dave"
    assert resolve_agent("erin", {"AGENTD_INBOX_AGENT": "dave"}, str(tmp_path)) == "erin"
    with pytest.raises(ConfigError, match=r"--agent: '\.\./x' is not valid: use letters, digits"):
        resolve_agent("../x", {}, str(tmp_path))

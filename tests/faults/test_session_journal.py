"""Session journals across a SIGKILLed agentd (``--state-dir``), through the real ``agentd`` command.

The model is the loopback Chat Completions fake (``tests/fakes/provider_server.py``):
what agentd restored is read off the wire, in the provider's second request.
The upstream is the bundled memo server over stdio; changes are file edits.
"""

from __future__ import annotations

import json
import os
import signal
import struct
from pathlib import Path
from typing import Any

import pytest

from agentd.state import journal as jf
from tests.fakes.provider_server import RecordedRequest, Reply, openai_reply, provider_server
from tests.support.agentd_proc import PY, Agentd, run_agentd
from tests.support.leftovers import tagged_env

#: One step of a change travelling server -> agentd -> agent -> provider on this shared machine.
STEP = 30.0

DELIVERY = "These resources changed (re-read what you need; act on the current state):\n- memo://notes on memo (updated)"


def _edit(path: Path, value: dict[str, Any]) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)


class _Replies:
    """Answers every request with the next scripted reply; records the requests."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.seen: list[RecordedRequest] = []

    def __call__(self, request: RecordedRequest) -> Reply:
        self.seen.append(request)
        return self.replies[len(self.seen) - 1]


def _args(tmp_path: Path, config: str) -> list[str]:
    toml = tmp_path / "agentd.toml"
    toml.write_text(config)
    notes = tmp_path / "notes.json"
    return [
        "--mode", "reactive", "--config", str(toml), "--state-dir", str(tmp_path / "state"),
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {notes}",
        "--model", "openai:gpt-4o-mini", "--verbose", "watch the notes",
    ]  # fmt: skip


def _env(tmp_path: Path, url: str) -> dict[str, str]:
    return tagged_env(tmp_path, OPENAI_BASE_URL=url, OPENAI_API_KEY="sk-test", AZURE_OPENAI_API_KEY="")


async def _kill(a: Agentd) -> None:
    a.proc.send_signal(signal.SIGKILL)
    assert await a.wait_exit(STEP) == -signal.SIGKILL


CONTINUE_ROUTE = (
    'subscribe = ["memo:memo://notes"]\n'
    '[[routes]]\nname = "ops"\nmatch = "memo://notes"\ndisposition = "continue"\nsession = "ops"\n'
    'debounce = "50ms"\nreread_on_start = false\n'
)


@pytest.mark.parametrize(
    "torn", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["clean", "torn-tail"]
)
async def test_a_continue_session_survives_sigkill_between_two_deliveries(tmp_path, allow_files, torn):
    allow_files("notes.json", "agentd.toml", "state/*")
    (tmp_path / "notes.json").write_text("{}")
    model = _Replies([openai_reply("first wake"), openai_reply("second wake")])
    async with provider_server(handler=model) as srv:
        env = _env(tmp_path, srv.url("/v1"))
        args = _args(tmp_path, CONTINUE_ROUTE)
        async with run_agentd(args, env=env) as a:
            await a.wait_event("subscription.established", timeout=STEP)
            _edit(tmp_path / "notes.json", {"v": 1})
            await a.wait_event("turn.end", timeout=STEP)
            await _kill(a)  # between the two deliveries: no drain, no goodbye
        journal = tmp_path / "state" / "sessions" / jf.file_name("ops")
        assert journal.exists()
        if torn:
            # A crash in the middle of the next turn's append: a head promising 900 bytes, 12 written.
            journal.write_bytes(journal.read_bytes() + struct.pack("<II", 900, 0) + b'{"t":"turn",')
        async with run_agentd(args, env=env) as b:
            await b.wait_event("subscription.established", timeout=STEP)
            _edit(tmp_path / "notes.json", {"v": 2})
            await b.wait_event("turn.end", timeout=STEP)
            restored = b.find("journal.restored")
            torn_events = b.find("journal.torn")
            b.signal(signal.SIGTERM)
            assert await b.wait_exit(STEP) == 0
    first, second = (r.json["messages"] for r in model.seen)
    instruction = {"role": "user", "content": f"watch the notes\n\n{DELIVERY}"}
    assert first[-1] == instruction
    # The second request carries the first turn exactly, then the new delivery.
    assert second == [
        *first,
        {"role": "assistant", "content": "first wake"},
        {"role": "user", "content": DELIVERY},
    ]
    assert [(e["session"], e["turns"]) for e in restored] == [("ops", 1)]
    if torn:
        assert len(torn_events) == 1
        assert torn_events[0]["session"] == "ops"
        assert torn_events[0]["dropped_bytes"] == 20
    else:
        assert torn_events == []


async def test_a_self_subscription_is_restored_with_its_session(tmp_path, allow_files):
    allow_files("notes.json", "agentd.toml", "state/*")
    (tmp_path / "notes.json").write_text("{}")
    subscribe = json.dumps({"uri": "memo://notes"})
    model = _Replies(
        [
            openai_reply(tool_calls=[("c1", "subscribe", subscribe)]),
            openai_reply("watching"),
            openai_reply("woke again"),
        ]
    )
    config = (
        'subscribe = ["memo:memo://notes"]\n'
        '[[routes]]\nname = "start"\nmatch = "memo://notes"\ndisposition = "spawn"\ndebounce = "50ms"\n'
    )
    async with provider_server(handler=model) as srv:
        env = _env(tmp_path, srv.url("/v1"))
        args = _args(tmp_path, config)
        async with run_agentd(args, env=env) as a:
            # The start-up re-read spawns a1, which subscribes itself and waits.
            await a.wait_event("self.subscribe", timeout=STEP)
            await a.wait_event("turn.end", timeout=STEP)
            await _kill(a)
        async with run_agentd(args, env=env) as b:
            # Its route is back before any delivery; the start-up re-read wakes the restored session.
            await b.wait_event("turn.end", timeout=STEP)
            routes = [e["route"] for e in b.find("resource.updated")]
            restored = b.find("journal.restored")
            b.signal(signal.SIGTERM)
            assert await b.wait_exit(STEP) == 0
    assert b.find("journal.subscription_restored")[0]["uri"] == "memo://notes"
    assert routes
    assert set(routes) == {"self:a1:memo://notes"}
    assert [(e["session"], e["agent"]) for e in restored] == [("a1", "a2")]
    first_turn = [m["role"] for m in model.seen[1].json["messages"]]
    third = model.seen[2].json["messages"]
    # user, assistant(tool call), tool result, assistant "watching", then the new delivery.
    assert [m["role"] for m in third] == [*first_turn, "assistant", "user"]
    assert third[-2] == {"role": "assistant", "content": "watching"}
    assert third[-1]["content"].endswith("- memo://notes on memo (possibly changed)")


@pytest.mark.slow
async def test_the_warm_loop_root_resumes_its_conversation_after_sigkill(tmp_path, allow_files):
    allow_files("state/*")
    model = _Replies([openai_reply("shift one done"), openai_reply("shift two done")])
    async with provider_server(handler=model) as srv:
        env = _env(tmp_path, srv.url("/v1"))
        args = [
            "--mode", "loop", "--interval", "1h", "--session", "warm", "--state-dir", str(tmp_path / "state"),
            "--model", "openai:gpt-4o-mini", "--verbose", "keep the shift log",
        ]  # fmt: skip
        async with run_agentd(args, env=env) as a:
            await a.wait_event("turn.end", timeout=STEP)
            await _kill(a)
        async with run_agentd(args, env=env) as b:
            await b.wait_event("turn.end", timeout=STEP)
            restored = b.find("journal.restored")
            b.signal(signal.SIGTERM)
            assert await b.wait_exit(STEP) == 0
    first, second = (r.json["messages"] for r in model.seen)
    shift = {"role": "user", "content": "keep the shift log"}
    assert first[-1] == shift
    assert second == [*first, {"role": "assistant", "content": "shift one done"}, shift]
    assert [(e["session"], e["turns"]) for e in restored] == [("root", 1)]

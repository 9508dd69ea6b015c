"""Session journals across a SIGKILLed agentd (``--state-dir``), through the real ``agentd`` command.

The model is the loopback Chat Completions fake (``tests/fakes/provider_server.py``):
what agentd restored is read off the wire, in the provider's second request.
The upstream is the bundled memo server over stdio; changes are file edits.
"""

from __future__ import annotations

import json
import signal
import struct
import subprocess
import textwrap
from pathlib import Path

import pytest
import trio

from agentd.state import journal as jf
from agentd.state.sessions import SessionJournals
from tests.fakes.provider_server import ScriptedReplies, openai_reply, provider_server
from tests.support.agentd_proc import PY, REPO, Agentd, run_agentd
from tests.support.files import edit
from tests.support.leftovers import tagged_env
from tests.support.telemetry import RecordingTelemetry

pytestmark = pytest.mark.fault

#: One step of a change travelling server -> agentd -> agent -> provider on this shared machine.
STEP = 30.0

DELIVERY = "These resources changed (re-read what you need; act on the current state):\n- memo://notes on memo (updated)"


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
    model = ScriptedReplies([openai_reply("first wake"), openai_reply("second wake")])
    async with provider_server(handler=model) as srv:
        env = _env(tmp_path, srv.url("/v1"))
        args = _args(tmp_path, CONTINUE_ROUTE)
        async with run_agentd(args, env=env) as a:
            await a.wait_event("subscription.established", timeout=STEP)
            edit(tmp_path / "notes.json", {"v": 1})
            await a.wait_event("turn.end", timeout=STEP)
            await _kill(a)  # between the two deliveries: no drain, no goodbye
        journal = tmp_path / "state" / "sessions" / jf.file_name("ops")
        assert journal.exists()
        if torn:
            # A crash in the middle of the next turn's append: a head promising 900 bytes, 12 written.
            journal.write_bytes(journal.read_bytes() + struct.pack("<II", 900, 0) + b'{"t":"turn",')
        async with run_agentd(args, env=env) as b:
            await b.wait_event("subscription.established", timeout=STEP)
            edit(tmp_path / "notes.json", {"v": 2})
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
    model = ScriptedReplies(
        [
            openai_reply(tool_calls=[("c1", "subscribe", subscribe)]),
            openai_reply("watching"),
            openai_reply("woke again"),
            openai_reply("woke by a change"),
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
            # Then a real change: every start-up re-read was ingested before it.
            edit(tmp_path / "notes.json", {"v": 1})
            await b.wait_event("resource.updated", lambda e: not e.get("startup"), timeout=STEP)
            routes = [e["route"] for e in b.find("resource.updated")]
            startup = [e["uri"] for e in b.find("resource.updated") if e.get("startup")]
            restored = b.find("journal.restored")
            b.signal(signal.SIGTERM)
            assert await b.wait_exit(STEP) == 0
    assert b.find("journal.subscription_restored")[0]["uri"] == "memo://notes"
    assert routes
    assert set(routes) == {"self:a1:memo://notes"}
    # Declared and restored both want the pair: it is subscribed and re-read once.
    assert startup == ["memo://notes"]
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
    model = ScriptedReplies([openai_reply("shift one done"), openai_reply("shift two done")])
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


# A real writer process on the supervisor's own write path (SessionJournals.commit, with
# compaction rewriting the file every few turns), killed with SIGKILL mid-stream.
_JOURNAL_WRITER = textwrap.dedent(
    """
    import os, sys, trio
    from pathlib import Path
    from agentd.selfmcp.protocol import MessageFrame
    from agentd.state.sessions import SessionJournals
    from agentd.observe.telemetry import NullTelemetry

    async def main():
        store = SessionJournals(Path(sys.argv[1]), NullTelemetry(), max_tokens=200_000)
        store.scan()
        for i in range(1_000_000):
            turn = (MessageFrame(role="user", content=f"turn {i} " + "x" * 150_000),
                    MessageFrame(role="assistant", content=f"ok {i}"))
            await store.commit("a1", turn, session="ops", subs=())
            os.write(1, f"{i}\\n".encode())  # acknowledged: commit returned, the turn is durable

    trio.run(main)
    """
)


@pytest.mark.parametrize("after", [1, 4, 9, 23])
async def test_sigkill_during_journal_writes_loses_no_acknowledged_turn(tmp_path, allow_files, after):
    """Killed while appending (and compacting: every ~5 turns the file is rewritten and renamed)."""
    allow_files("sessions/*.journal")
    sessions = tmp_path / "sessions"
    proc = await trio.lowlevel.open_process(
        [PY, "-c", _JOURNAL_WRITER, str(sessions)], stdout=subprocess.PIPE, cwd=str(REPO)
    )
    acked = await _acks_then_kill(proc, after)
    telemetry = RecordingTelemetry()
    store = SessionJournals(sessions, telemetry, max_tokens=200_000)
    store.scan()
    assert telemetry.find("state.moved_aside") == []  # a crash is never damage
    history = await store.history("a2", "ops")
    users = [m.content.split()[1] for m in history if m.role == "user" and m.content.startswith("turn ")]
    newest = int(users[-1])
    # Every acknowledged turn is there (the one in flight may be too); compaction keeps the first
    # instruction and the newest turns, whole and in order.
    assert newest in (acked - 1, acked)
    assert users[0] == "0"
    assert users[1:] == [str(n) for n in range(newest - len(users) + 2, newest + 1)]


async def _acks_then_kill(proc: trio.Process, after: int) -> int:
    """Read acknowledgement lines until ``after`` arrived, SIGKILL the writer at once; how many it acknowledged."""
    assert proc.stdout is not None
    buf = b""
    with trio.fail_after(STEP):
        while buf.count(b"\n") < after:
            chunk = await proc.stdout.receive_some()
            assert chunk, "the writer ended early"
            buf += chunk
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
        while chunk := await proc.stdout.receive_some():
            buf += chunk  # acknowledged before the kill landed
    await proc.stdout.aclose()
    return buf.count(b"\n")

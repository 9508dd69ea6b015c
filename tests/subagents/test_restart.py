"""An agent a session started does not survive a SIGKILLed agentd: the restored session is told it was lost.

Through the real ``agentd`` command with ``--state-dir``; the session's model is
the loopback Chat Completions fake (what the restored session was told is read
off the wire), the child's a ``script:`` model that never answers in time.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from tests.fakes.provider_server import ScriptedReplies, openai_reply, provider_server
from tests.support.agentd_proc import PY, Agentd, run_agentd
from tests.support.files import edit
from tests.support.leftovers import tagged_env

pytestmark = [pytest.mark.process, pytest.mark.fault]

#: One step of a change travelling server -> agentd -> agent -> provider on this shared machine.
STEP = 60.0


async def _kill(a: Agentd) -> None:
    a.proc.send_signal(signal.SIGKILL)
    assert await a.wait_exit(STEP) == -signal.SIGKILL


async def test_a_restored_session_is_told_the_agent_it_started_was_lost(tmp_path: Path, allow_files) -> None:
    allow_files("notes.json", "agentd.toml", "slow.json", "state/*")
    (tmp_path / "notes.json").write_text("{}")
    # The child takes ten minutes to answer: agentd is killed long before.
    (tmp_path / "slow.json").write_text(json.dumps({"turns": [{"text": "late", "latency_ms": 600_000}]}))
    (tmp_path / "agentd.toml").write_text(
        'subscribe = ["memo:memo://notes"]\n'
        '[[routes]]\nname = "ops"\nmatch = "memo://notes"\ndisposition = "continue"\nsession = "ops"\n'
        'debounce = "50ms"\nreread_on_start = false\n'
        '[agents.slow]\ndescription = "takes its time"\nmodel = "script:slow.json"\n'
    )
    start = json.dumps({"type": "slow", "instruction": "count the stars"})
    model = ScriptedReplies(
        [
            openai_reply(tool_calls=[("c1", "agent_start", start)]),
            openai_reply("waiting for the count"),
            openai_reply("noted: the count was lost"),
        ]
    )
    args = [
        "--mode", "reactive", "--config", str(tmp_path / "agentd.toml"), "--state-dir", str(tmp_path / "state"),
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {tmp_path / 'notes.json'}",
        "--model", "openai:gpt-4o-mini", "--verbose", "watch the notes",
    ]  # fmt: skip
    async with provider_server(handler=model) as srv:
        env = tagged_env(
            tmp_path, OPENAI_BASE_URL=srv.url("/v1"), OPENAI_API_KEY="sk-test", AZURE_OPENAI_API_KEY=""
        )
        async with run_agentd(args, env=env) as a:
            await a.wait_event("subscription.established", timeout=STEP)
            edit(tmp_path / "notes.json", {"v": 1})
            child = await a.wait_event("subagent.started", lambda e: e["agent"] != "a1", timeout=STEP)
            await a.wait_event("turn.end", lambda e: e["agent"] == "a1", timeout=STEP)
            assert a.find("self.subscribe")[0]["uri"] == f"agent://{child['agent']}"
            await _kill(a)  # the session waits on its child: no drain, no goodbye
        async with run_agentd(args, env=env) as b:
            lost = await b.wait_event("subagent.lost", timeout=STEP)
            await b.wait_event("turn.end", timeout=STEP)
            spawned = [e["agent"] for e in b.find("subagent.spawn")]
            b.signal(signal.SIGTERM)
            assert await b.wait_exit(STEP) == 0
    assert (lost["agent"], lost["session"]) == (child["agent"], "ops")
    assert child["agent"] not in spawned  # no new agent takes the lost one's id
    told = model.seen[2].json["messages"][-1]["content"]
    assert f"agent://{child['agent']}" in told
    assert "ended lost" in told
    assert "agentd restarted while this agent ran" in told

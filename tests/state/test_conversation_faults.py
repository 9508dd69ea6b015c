"""Fault catalog CV1-CV3: a once run's saved conversation under SIGKILL and damage (rfcs/0303).

The real ``agentd`` command, a script model whose turns recall the first
instruction (``{instruction}``) and the latest (``{input}``), and the
conversation files in the test's own state directory.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest

from agentd.core.exitcodes import ExitCode
from agentd.state import journal as jf
from tests.support.agentd_proc import run_agentd, run_cli, script
from tests.support.leftovers import AllowedFiles, tagged_env

pytestmark = pytest.mark.fault

RECALL = [{"text": "first: {instruction} | now: {input}"}]


@pytest.fixture
def state(tmp_path: Path, allow_files: AllowedFiles) -> dict[str, str]:
    allow_files("state/agentd/conversations/*.journal", "state/agentd/conversations/*.journal.corrupt-*")
    return tagged_env(tmp_path, XDG_STATE_HOME=str(tmp_path / "state"))


def conversations(tmp_path: Path) -> Path:
    return tmp_path / "state" / "agentd" / "conversations"


async def test_cv1_sigkill_mid_turn_leaves_the_saved_conversation_whole(
    tmp_path: Path, state: dict[str, str]
) -> None:
    model = script(tmp_path, RECALL)
    first = run_cli(["-m", model, "-o", "json", "remember the milk"], cwd=tmp_path, env=state)
    sid = json.loads(first.stdout)["session_id"]
    path = conversations(tmp_path) / f"{sid}.journal"
    before = path.read_bytes()
    # The continued turn's model answers after a minute: agentd is SIGKILLed while it waits.
    slow = script(tmp_path, [{"text": "never said", "latency_ms": 60_000}], name="slow.json")
    async with run_agentd(["-m", slow, "--continue", "what was it?"], env=state, cwd=tmp_path) as a:
        await a.wait_event("conversation.resumed")
        await a.wait_event("subagent.started")
        a.signal(signal.SIGKILL)
        assert await a.wait_exit() == -signal.SIGKILL
    assert path.read_bytes() == before
    again = run_cli(["-m", model, "-o", "json", "--continue", "what was it?"], cwd=tmp_path, env=state)
    assert again.returncode == ExitCode.OK, again.stderr
    assert json.loads(again.stdout)["result"] == "first: remember the milk | now: what was it?"
    assert [t[0].content for t in jf.read(path).turns] == ["remember the milk", "what was it?"]


async def test_cv2_a_torn_conversation_continues_from_its_last_whole_turn(
    tmp_path: Path, state: dict[str, str]
) -> None:
    model = script(tmp_path, RECALL)
    first = run_cli(["-m", model, "-o", "json", "one"], cwd=tmp_path, env=state)
    sid = json.loads(first.stdout)["session_id"]
    run_cli(["-m", model, "--resume", sid, "two"], cwd=tmp_path, env=state)
    path = conversations(tmp_path) / f"{sid}.journal"
    path.write_bytes(path.read_bytes()[:-7])  # the second turn's record cut short
    # A save killed between its temp file and the rename leaves the temp file: it is cleaned up.
    (conversations(tmp_path) / f".{sid}.journal.99999.0badc0de.tmp").write_bytes(b"half")
    again = run_cli(["-m", model, "-o", "json", "--continue", "three"], cwd=tmp_path, env=state)
    assert again.returncode == ExitCode.OK, again.stderr
    assert json.loads(again.stdout)["result"] == "first: one | now: three"
    assert [t[0].content for t in jf.read(path).turns] == ["one", "three"]
    assert sorted(p.name for p in conversations(tmp_path).iterdir()) == [f"{sid}.journal"]


async def test_cv3_a_planted_link_is_refused_never_followed(
    tmp_path: Path, state: dict[str, str], allow_files: AllowedFiles
) -> None:
    allow_files("victim.txt")
    model = script(tmp_path, RECALL)
    target = tmp_path / "victim.txt"
    target.write_text("someone else's file")
    conversations(tmp_path).mkdir(parents=True)
    (conversations(tmp_path) / "planted.journal").symlink_to(target)
    # A link is not a conversation: --continue finds none, --resume names it unreadable.
    none = run_cli(["-m", model, "--continue", "x"], cwd=tmp_path, env=state)
    assert none.returncode == ExitCode.CONFIG
    assert "no conversation is saved there yet" in none.stderr
    named = run_cli(["-m", model, "--resume", "planted", "x"], cwd=tmp_path, env=state)
    assert named.returncode == ExitCode.CONFIG
    assert "--resume: 'planted' is not valid: no conversation with this id" in named.stderr
    assert target.read_text() == "someone else's file"

"""SessionJournals (component): commit, restore, compaction, end, and bad files next to good ones.

Real files in ``tmp_path``; the reactor's records are small dataclasses bound by ``journal_for``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agentd.selfmcp.protocol import MessageFrame
from agentd.state import journal as jf
from agentd.state.sessions import SessionJournals
from tests.support.telemetry import RecordingTelemetry


def _turn(i: int, size: int = 0) -> tuple[MessageFrame, ...]:
    return (
        MessageFrame(role="user", content=f"delivery {i}" + "x" * size),
        MessageFrame(role="assistant", content=f"answer {i}"),
    )


View = dict[str, tuple[str, tuple[tuple[str, str | None], ...]]]


@dataclass
class _Agent:
    """The reactor's record of an agent, as :meth:`SessionJournals.journal_for` binds it."""

    id: str
    session: str | None
    subscriptions: tuple[str, ...] = ()
    subscription_servers: dict[str, str] = field(default_factory=dict)


class _Store(SessionJournals):
    """The journals with the reactor's view as a dict (agent id -> session, subscriptions)."""

    view: View

    async def turn(self, agent: str, messages: tuple[MessageFrame, ...]) -> None:
        """``agent`` ends a turn: recorded through the journal bound to its record, if it has one."""
        session, subs = self.view.get(agent, (None, ()))
        record = _Agent(agent, session, tuple(u for u, _ in subs), {u: s for u, s in subs if s is not None})
        await self.journal_for(record)(messages)


def _store(tmp_path: Path, view: View, **kw: int) -> tuple[_Store, RecordingTelemetry]:
    telemetry = RecordingTelemetry()
    store = _Store(tmp_path / "sessions", telemetry, max_tokens=kw.get("max_tokens", 100_000))
    store.view = view
    store.scan()
    return store, telemetry


async def test_turns_committed_by_one_agent_are_resumed_by_the_next(tmp_path: Path) -> None:
    view = {"a1": ("ops", (("memo://notes", "memo"),))}
    store, _ = _store(tmp_path, view)
    await store.turn("a1", _turn(0))
    await store.turn("a1", _turn(1))
    await store.turn("a9", _turn(9))  # no session: nothing written
    store.close()
    view2: View = {}
    again, telemetry = _store(tmp_path, view2)
    assert again.resumable("ops") == (("memo://notes", "memo"),)
    assert again.reserved("ops")
    assert not again.reserved("a9")
    history = await again.history("a2", "ops")
    assert history == (*_turn(0), *_turn(1))
    assert telemetry.find("journal.restored")[0]["turns"] == 2
    # The resumed agent appends to the same file.
    view2["a2"] = ("ops", ())  # the next run's reactor: a2 serves ops
    await again.turn("a2", _turn(2))
    assert jf.read(tmp_path / "sessions" / jf.file_name("ops")).turns == [_turn(0), _turn(1), _turn(2)]


async def test_a_new_agent_for_a_session_replaces_a_stale_journal(tmp_path: Path) -> None:
    view: View = {"a1": ("ops", ())}
    store, _ = _store(tmp_path, view)
    await store.turn("a1", _turn(0))
    view["a5"] = ("ops", ())
    await store.turn("a5", _turn(5))  # a5 was not restored from it: a new conversation
    assert jf.read(tmp_path / "sessions" / jf.file_name("ops")).turns == [_turn(5)]


async def test_past_the_budget_the_oldest_turns_go_and_the_first_instruction_stays(tmp_path: Path) -> None:
    store, telemetry = _store(tmp_path, {"a1": ("ops", ())}, max_tokens=1000)
    for i in range(12):
        await store.turn("a1", _turn(i, size=1000))  # ~250 tokens a turn
    turns = jf.read(tmp_path / "sessions" / jf.file_name("ops")).turns
    assert turns[0][0] == _turn(0, size=1000)[0]
    assert turns[0][1].content == jf.COMPACTED_NOTE
    assert turns[-1] == _turn(11, size=1000)
    assert sum(jf.turn_tokens(t) for t in turns) <= 1000
    assert telemetry.find("journal.compacted")


async def test_end_removes_the_journal(tmp_path: Path) -> None:
    store, _ = _store(tmp_path, {"a1": ("ops", ())})
    await store.turn("a1", _turn(0))
    store.end("ops")
    assert not (tmp_path / "sessions" / jf.file_name("ops")).exists()
    assert store.resumable("ops") is None


async def test_a_corrupt_journal_is_moved_aside_keeping_its_prefix_and_a_foreign_one_is_refused(
    tmp_path: Path,
) -> None:
    store, _ = _store(tmp_path, {"a1": ("ops", ()), "a2": ("other", ())})
    await store.turn("a1", _turn(0))
    await store.turn("a1", _turn(1))
    await store.turn("a2", _turn(7))
    store.close()
    path = tmp_path / "sessions" / jf.file_name("ops")
    data = bytearray(path.read_bytes())
    data[-30] ^= 0xFF  # inside the last record: torn-looking, but make it mid-file by appending a record
    path.write_bytes(bytes(data) + jf.encode(jf.TurnRecord(messages=_turn(2))))
    foreign = tmp_path / "sessions" / jf.file_name("stranger")
    foreign.write_text("not a journal at all\n")
    view: View = {}
    again, telemetry = _store(tmp_path, view)
    (moved,) = telemetry.find("state.moved_aside")
    assert (moved["path"], moved["file"], moved["session"], moved["kept"]) == (
        str(path),
        "session journal",
        "ops",
        1,
    )
    assert "checksum" in moved["problem"]
    assert await again.history("a3", "ops") == _turn(0)  # the good prefix
    assert await again.history("a4", "other") == _turn(7)  # untouched
    (aside,) = (tmp_path / "sessions").glob("*.corrupt-*")
    assert str(aside) == moved["moved_to"]
    # Not agentd's: refused, left exactly where and as it was, never written or removed.
    (refused,) = telemetry.find("state.refused")
    assert (refused["path"], refused["file"]) == (str(foreign), "session journal")
    assert "does not start like an agentd session journal" in refused["problem"]
    assert again.resumable("stranger") is None
    view["a5"] = ("stranger", ())
    await again.turn("a5", _turn(5))
    again.end("stranger")
    (failed,) = telemetry.find("journal.failed")
    assert "move it out of the state directory" in failed["error"]
    assert foreign.read_text() == "not a journal at all\n"


async def test_a_torn_tail_is_cut_and_reported(tmp_path: Path) -> None:
    store, _ = _store(tmp_path, {"a1": ("ops", ())})
    await store.turn("a1", _turn(0))
    store.close()
    path = tmp_path / "sessions" / jf.file_name("ops")
    whole = path.stat().st_size
    path.write_bytes(path.read_bytes() + jf.encode(jf.TurnRecord(messages=_turn(1)))[:25])
    again, telemetry = _store(tmp_path, {})
    (torn,) = telemetry.find("journal.torn")
    assert (torn["session"], torn["dropped_bytes"], torn["turns"]) == ("ops", 25, 1)
    assert path.stat().st_size == whole
    assert await again.history("a2", "ops") == _turn(0)


async def test_a_torn_tail_that_cannot_be_cut_is_reported_and_the_session_starts_fresh(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, _ = _store(tmp_path, {"a1": ("ops", ())})
    await store.turn("a1", _turn(0))
    store.close()
    path = tmp_path / "sessions" / jf.file_name("ops")
    damaged = path.read_bytes() + jf.encode(jf.TurnRecord(messages=_turn(1)))[:25]
    path.write_bytes(damaged)

    def refuse(_path: Path, _size: int) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(jf, "truncate", refuse)
    again, telemetry = _store(tmp_path, {})
    (failed,) = telemetry.find("journal.failed")
    assert failed["path"] == str(path)
    assert "No space left" in failed["error"]
    assert telemetry.find("journal.torn") == []
    assert again.resumable("ops") is None
    assert path.read_bytes() == damaged  # left as it was, for the next start


async def test_a_turn_is_recorded_with_the_subscriptions_its_agent_holds_at_the_turns_end(
    tmp_path: Path,
) -> None:
    """The journal is bound to the reactor's record at spawn and reads it at each turn's end."""
    store, _ = _store(tmp_path, {})
    agent = _Agent("a1", None)
    journal = store.journal_for(agent)
    await journal(_turn(0))  # no session yet: not recorded
    agent.session = "ops"  # it subscribed itself: a session from now on
    await journal(_turn(0))
    agent.subscriptions = ("memo://b", "memo://a")  # subscribed during the next turn
    agent.subscription_servers = {"memo://a": "memo"}
    await journal(_turn(1))
    store.close()
    contents = jf.read(tmp_path / "sessions" / jf.file_name("ops"))
    assert contents.turns == [_turn(0), _turn(1)]
    assert contents.subs == (("memo://a", "memo"), ("memo://b", None))

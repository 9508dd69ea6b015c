"""A rewritten session journal keeps the session's self-subscriptions where a restore reads them (docs/testing.md)."""

from __future__ import annotations

import os
from pathlib import Path

from agentd.selfmcp.protocol import MessageFrame
from agentd.state import journal as jf

SUBS = (("memo://notes", "memo"), ("inbox://ops", None))


def _turn(i: int, size: int = 40) -> tuple[MessageFrame, ...]:
    return (
        MessageFrame(role="user", content=f"delivery {i} " + "x" * size),
        MessageFrame(role="assistant", content=f"answer {i}"),
    )


def test_a_rewrite_puts_the_subscriptions_on_the_last_turn(tmp_path: Path) -> None:
    path = tmp_path / jf.file_name("ops")
    turns = [_turn(0), _turn(1), _turn(2)]
    jf.write_whole(path, "ops", turns, SUBS)
    back = jf.read(path)
    assert (back.problem, back.session, back.turns) == (None, "ops", turns)
    assert back.subs == SUBS
    # One more turn appended with no subscriptions: the newest record decides.
    fd = jf.open_append(path)
    try:
        jf.append(fd, jf.encode(jf.TurnRecord(messages=_turn(3), subs=())))
    finally:
        os.close(fd)
    assert jf.read(path).subs == ()


def test_a_compacted_session_read_back_still_has_its_subscriptions(tmp_path: Path) -> None:
    path = tmp_path / jf.file_name("ops")
    turns = [_turn(i, size=400) for i in range(6)]
    kept, dropped = jf.compact(turns, budget_tokens=sum(jf.turn_tokens(t) for t in turns) // 2)
    assert dropped > 0
    jf.write_whole(path, "ops", kept, SUBS)
    back = jf.read(path)
    assert back.problem is None
    assert back.turns == kept
    assert back.subs == SUBS
    assert back.turns[0][1].content == jf.COMPACTED_NOTE


def test_a_rewrite_with_no_turns_is_a_valid_empty_journal(tmp_path: Path) -> None:
    path = tmp_path / jf.file_name("ops")
    jf.write_whole(path, "ops", [], SUBS)
    back = jf.read(path)
    assert (back.problem, back.session, back.turns, back.subs) == (None, "ops", [], ())
    assert path.read_bytes() == jf.MAGIC + jf.encode(jf.OpenRecord(session="ops"))

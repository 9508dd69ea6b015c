"""A warm session compacted past its budget is restored with its self-subscriptions (docs/testing.md)."""

from __future__ import annotations

from pathlib import Path

from agentd.selfmcp.protocol import MessageFrame
from agentd.state import journal as jf
from agentd.state.sessions import SessionJournals
from tests.support.telemetry import RecordingTelemetry

Subs = tuple[tuple[str, str | None], ...]
SUBS: Subs = (("memo://notes", "memo"), ("inbox://ops", "inbox"))


def _turn(i: int) -> tuple[MessageFrame, ...]:
    return (
        MessageFrame(role="user", content=f"delivery {i} " + "x" * 1000),
        MessageFrame(role="assistant", content=f"answer {i}"),
    )


async def test_a_session_compacted_past_its_budget_is_restored_subscribed(tmp_path: Path) -> None:
    telemetry = RecordingTelemetry()
    store = SessionJournals(tmp_path, telemetry, max_tokens=1000)
    store.scan()
    for i in range(8):
        await store.commit(
            "a1", _turn(i), session="ops", subs=SUBS
        )  # ~250 tokens a turn: compacted several times
    store.close()
    assert telemetry.find("journal.compacted")
    assert len(jf.read(tmp_path / jf.file_name("ops")).turns) < 8
    again = SessionJournals(tmp_path, RecordingTelemetry(), max_tokens=1000)
    again.scan()
    # The next run re-subscribes the session at once: it is not deaf to its resources.
    assert again.resumable("ops") == SUBS
    assert again.sessions_with_subscriptions() == {"ops": SUBS}

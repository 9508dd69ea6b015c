"""The status view's bounded memory of what the run did lately (agentd/observe/activity.py, rfcs/0335)."""

from __future__ import annotations

from agentd.observe.activity import DECISIONS, MINUTES, ROUTES_REMEMBERED, Activity


def test_decisions_keep_only_the_latest() -> None:
    activity = Activity()
    for i in range(DECISIONS + 7):
        activity.decision(float(i), f"memo://{i}", "r0", "enqueued")
    kept = activity.decisions()
    assert len(kept) == DECISIONS
    assert kept[0].uri == "memo://7"
    assert kept[-1].uri == f"memo://{DECISIONS + 6}"


def test_per_minute_counts_cover_the_last_hour_with_zeros_filled_in() -> None:
    activity = Activity()
    activity.wake(30.0, "r0")
    activity.model_call(31.0)
    activity.model_call(61.0)
    activity.wake(3 * 60.0 + 1, "r1")
    minutes = activity.per_minute(3 * 60.0 + 5)
    assert len(minutes) == MINUTES
    assert [(m.minute, m.wakes, m.model_calls) for m in minutes[-4:]] == [
        (0, 1, 1),
        (1, 0, 1),
        (2, 0, 0),
        (3, 1, 0),
    ]
    # An hour later the old minutes are gone, whatever was counted in them.
    later = activity.per_minute(3 * 60.0 + MINUTES * 60)
    assert sum(m.wakes for m in later) == 0


def test_last_wake_by_route_is_bounded() -> None:
    activity = Activity()
    for i in range(ROUTES_REMEMBERED + 1):
        activity.wake(float(i), f"self:s{i}:memo://x")
    assert activity.last_wake("self:s0:memo://x") is None
    assert activity.last_wake(f"self:s{ROUTES_REMEMBERED}:memo://x") == float(ROUTES_REMEMBERED)

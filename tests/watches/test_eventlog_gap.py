"""Catalog case 12, watch half: an event-log watch reports ``GAP`` instead of losing events silently.

The bundled inbox server shows the newest 256 pending messages. A burst of 600
messages written in one go is drained as one batch, so by the time the watch
re-reads, the oldest event shown is far beyond the last ``seq`` it saw: the
watch must say so with a ``GAP`` line (how many were missed) and still deliver
what is shown. (The hidden messages stay pending in the inbox until
acknowledged; the watch does not acknowledge.) The same extraction runs whatever made the watch miss events
(a listen stream the SDK ended on a full backlog, a reconnect, a slow reader).
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import PY, run_agentd, script
from tests.support.leftovers import tagged_env

pytestmark = pytest.mark.fault

BURST = 600
RING = 256
FAST_WATCHES = {"AGENTD_WATCHES__DEBOUNCE": "0.2", "AGENTD_WATCHES__MAX_WAIT": "1"}


async def test_12_event_log_watch_reports_gap_when_the_ring_moved_on(
    tmp_path: Path, allow_files: Any
) -> None:
    allow_files("inbox/ops.inbox", "inbox/.~ops.*")
    box = tmp_path / "inbox"
    box.mkdir()
    (box / "ops.inbox").write_text("")
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "watch_start", "arguments": {"name": "mail", "uri": "inbox://ops"}}]},
            {"text": "watching"},
            {"text": "notice: {input}"},
        ],
    )
    args = [
        "--mode", "loop", "--session", "warm", "--interval", "1h", "--verbose", "--model", model,
        "--mcp-stdio", f"inbox={PY} -m agentd serve inbox --agent ops --dir {box}",
        "watch the ops inbox",
    ]  # fmt: skip
    async with run_agentd(args, env={**tagged_env(tmp_path), **FAST_WATCHES}) as a:
        await a.wait_event("watch.started")
        await a.wait_event("turn.end")  # held warm: it owns a watch
        lines = b"".join(
            json.dumps({"id": f"m-{n}", "from": "alice", "text": f"message {n}"}).encode() + b"\n"
            for n in range(1, BURST + 1)
        )
        fd = os.open(box / "ops.inbox", os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, lines)  # one write: one drained batch, more than the ring holds
        finally:
            os.close(fd)
        notice = await a.wait_event("watch.notice", timeout=30)
        await a.wait_event("turn.end", count=2, timeout=30)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == ExitCode.OK
    assert notice["watch"] == "mail"
    body = a.out.split("notice: ", 1)[1]
    first_kept = BURST - RING + 1  # the oldest event the ring still holds
    # Nothing is lost silently: the evicted events, and the ones above the
    # per-update limit, are each accounted for by a GAP line.
    assert (
        f"GAP: missed {first_kept - 1} events (seq 1..{first_kept - 1}): the server's ring moved on" in body
    )
    overflow = [ln for ln in body.splitlines() if ln.startswith("GAP: skipped ")]
    assert len(overflow) == 1
    assert f"(seq {first_kept}.." in overflow[0]
    # The rest is delivered up to the per-update limit (100 events: 2 GAP lines,
    # the messages shown, and "+N more" for the ones the 20-line notice folds).
    shown = body.count("MESSAGE ")
    folded = int(body.split("\n+", 1)[1].split(" more")[0])
    assert shown + folded + 2 == 100

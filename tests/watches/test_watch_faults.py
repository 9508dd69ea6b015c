"""Fault catalog, cases 14-22: watch filters and the ``--watch-state`` file.

The component tests (``tests/watches/test_sandbox.py``, ``tests/watches/test_watch_state.py``)
prove each limit on the sandbox and the state file alone. These cases add the
end-to-end angle: the real ``agentd`` command, a real agent that called
``watch_start`` from a script-model turn, the bundled memo server edited from
outside, and after every fault the same watch (or the same daemon) handling
the next change correctly, with no process left behind.

Every wait is on NDJSON telemetry with a timeout; nothing sleeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.watches.sandbox import MAX_LINE_CHARS
from agentd.watches.state import WatchSpec, encode, leftover_temps, save
from tests.support.agentd_proc import REPO, Agentd, run_agentd, script
from tests.support.files import edit
from tests.support.leftovers import tagged_env
from tests.support.supervised import survivors, tree_of
from tests.support.watch import memo_loop_args

pytestmark = pytest.mark.fault

#: Filter time limit for these runs: short so the infinite-loop case costs half a second.
FILTER_LIMIT_S = 0.5

#: Short debounce: a notice follows an edit within a fraction of a second.
WATCH_ENV = {
    "AGENTD_WATCHES__DEBOUNCE": "0.1",
    "AGENTD_WATCHES__MAX_WAIT": "1",
    "AGENTD_WATCHES__FILTER_TIMEOUT": str(FILTER_LIMIT_S),
}

#: Slack on wall-time assertions for a shared, loaded 2-core machine.
SLACK_S = 2.0

#: Bound on the state-writer subprocess that crashes itself (an import and a write: ~0.2 s).
CRASHER_TIMEOUT_S = 30.0

#: The file the escape attempt tries to create on the host.
ESCAPE_TARGET = "/tmp/agentd-fault-escape"

#: One filter that misbehaves on command: the edited memo key picks the fault.
#: ``n`` counts events in the sandbox session, so a reset shows as ``n=1``.
FAULTY_FILTER = textwrap.dedent(
    f"""\
    try:
        n += 1
    except NameError:
        n = 1
    k = event['key']
    if k == 'spin':
        while True:
            pass
    if k == 'nap':
        import time
        time.sleep(3600)
    if k == 'hog':
        blob = 'x' * (1024 ** 3)
    if k == 'file':
        open({ESCAPE_TARGET!r}, 'w').write('pwned')
    if k == 'net':
        import socket
    if k == 'sub':
        ().__class__.__base__.__subclasses__()
    if k == 'env':
        import os
        os.environ['HOME']
    if k == 'tool':
        memo__memo_set(key='hacked', value=True)
    ('y' * 100000) if k == 'huge' else f"{{k}} n={{n}}"
    """
)


def watch_start(name: str, on_event: str | None) -> dict[str, Any]:
    return {"name": "watch_start", "arguments": {"name": name, "uri": "memo://notes", "on_event": on_event}}


def ts(event: dict[str, Any]) -> float:
    """Wall time (Unix seconds) of a telemetry line."""
    return datetime.fromisoformat(event["ts"]).timestamp()


async def stop_and_check_no_orphans(a: Agentd) -> None:
    """SIGTERM a daemon that should be healthy: it drains (exit 0) and leaves no process behind."""
    before = tree_of(a)
    a.signal(signal.SIGTERM)
    assert await a.wait_exit() == 0, a.tail()
    left = survivors(before)
    assert left == [], f"processes outlived agentd: {left}\n{a.tail()}"


async def next_notice(a: Agentd, memo: Path, notes: dict[str, Any]) -> tuple[dict[str, Any], float]:
    """Edit the memo, wait for the watch's next event and notice; return (event, seconds to the event)."""
    events = len(a.find("watch.event"))
    notices = len(a.find("watch.notice"))
    started = time.time()
    edit(memo, notes)
    event = await a.wait_event("watch.event", count=events + 1)
    await a.wait_event("watch.notice", count=notices + 1)
    return event, ts(event) - started


# ---------------------------------------------------------------- cases 14-16, 18, 19


async def test_misbehaving_filter_faults_each_fail_alone_and_the_watch_handles_the_next_event(
    tmp_path: Path,
) -> None:
    """Cases 14 (infinite loop), 15 (sleep), 16 (1 GB), 18 (escapes), 19 (huge value), through agentd."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(ESCAPE_TARGET)
    memo = tmp_path / "notes.json"
    edit(memo, {})
    turns: list[dict[str, Any]] = [
        {"tool_calls": [watch_start("faults", FAULTY_FILTER)]},
        {"text": "watching: {last_tool_result}"},
    ]
    turns += [{"text": "got: {input}"} for _ in range(20)]
    model = script(tmp_path, turns)
    async with run_agentd(memo_loop_args(model, memo), env=tagged_env(tmp_path, **WATCH_ENV)) as a:
        await a.wait_event("watch.started")
        await a.wait_event("turn.end")
        notes: dict[str, Any] = {}

        async def change(key: str) -> tuple[dict[str, Any], float]:
            notes[key] = len(notes)
            return await next_notice(a, memo, dict(notes))

        ok, _ = await change("a")
        assert ok["outcome"] == "kept"

        # 14: an infinite loop is stopped at the limit, the error is reported, the next event works.
        spin, took = await change("spin")
        assert spin["outcome"] == "error"
        assert f"stopped after the {FILTER_LIMIT_S:g} s limit per event" in spin["error"]
        assert FILTER_LIMIT_S * 0.9 <= took < FILTER_LIMIT_S + SLACK_S
        # 16 (and 14): the session was reset, so the next event starts a fresh one (n=1).
        fresh, _ = await change("b")
        assert fresh["outcome"] == "kept"

        # 15: time.sleep(3600) returns at once.
        nap, took = await change("nap")
        assert nap["outcome"] == "kept"
        assert took < FILTER_LIMIT_S + SLACK_S / 2

        # 16: a 1 GB allocation is stopped at the memory cap; the next event gets a fresh session.
        hog, took = await change("hog")
        assert hog["outcome"] == "error"
        assert "stopped at the 64 MiB memory limit" in hog["error"]
        assert took < SLACK_S
        await change("c")

        # 18: escape attempts are errors in the filter and change nothing on the host.
        errors = {}
        for key in ("file", "net", "sub", "env", "tool"):
            event, _ = await change(key)
            assert event["outcome"] == "error", (key, event)
            errors[key] = event["error"]
        assert "PermissionError" in errors["file"]
        assert "No module named 'socket'" in errors["net"]
        assert "AttributeError" in errors["sub"]
        assert "'os.environ' is not supported" in errors["env"]
        assert "on_event called 'memo__memo_set', which a watch filter may not use" in errors["tool"]
        assert not await trio.Path(ESCAPE_TARGET).exists()
        assert "hacked" not in json.loads(memo.read_text())

        # 19: a huge return value becomes one capped line.
        await change("huge")
        # The next change: plain errors kept the session (c, file, net, sub, env, tool, huge, d: n=8).
        await change("d")
        while "got: " not in a.out or "d n=8" not in a.out:
            await a.wait_event("turn.end", count=len(a.find("turn.end")) + 1)
        await stop_and_check_no_orphans(a)

    out = a.out
    # Every fault reached the agent as an ERROR line in a notice, with line and column.
    assert "ERROR in watch 'faults': on_event failed: stopped after the 0.5 s limit" in out
    assert "ERROR in watch 'faults': on_event failed at line 13, column 12: stopped at the 64 MiB" in out
    assert "ERROR in watch 'faults': on_event failed at line 15, column 5: PermissionError" in out
    for expected in ("a n=1", "b n=1", "nap n=2", "c n=1", "d n=8"):
        assert expected in out, expected
    huge = [line for line in out.splitlines() if line.startswith("yyy")]
    assert len(huge) == 1
    assert len(huge[0]) == MAX_LINE_CHARS
    assert huge[0].endswith("…")
    assert {e["agent"] for e in a.find("turn.end")} == {"a1"}  # one agent handled every notice


# ---------------------------------------------------------------------------- case 17


async def test_filter_syntax_and_name_errors_are_refused_at_watch_start_with_line_and_column(
    tmp_path: Path,
) -> None:
    """Case 17: the model gets the refusal (with position) as the tool result; nothing is watched."""
    model = script(
        tmp_path,
        [
            {"tool_calls": [watch_start("bad1", "x = 1\ny = (\n")]},
            {"tool_calls": [watch_start("bad2", "ok = 1\nfmt")]},
            {"text": "refused: {last_tool_result}"},
        ],
    )
    memo = tmp_path / "notes.json"
    edit(memo, {"todo": "milk"})
    # A warm loop agent: a once root is not offered watch_start (nothing could wake it).
    async with run_agentd(memo_loop_args(model, memo), env=tagged_env(tmp_path, **WATCH_ENV)) as a:
        await a.wait_event("turn.end")
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0, a.tail()
    calls = a.find("tool.call", lambda e: e["tool"] == "watch_start")
    assert len(calls) == 2
    assert "syntax error at line 3, column 1" in calls[0]["error"]
    assert "at line 2, column 1: NameError: name 'fmt' is not defined" in calls[1]["error"]
    assert a.out.startswith("refused: on_event at line 2, column 1: NameError")
    assert a.find("watch.started") == []
    assert a.find("subscription.established") == []


# ---------------------------------------------------------------------------- case 20


async def test_corrupt_watch_state_is_moved_aside_and_the_daemon_starts_and_saves_anew(
    tmp_path: Path,
) -> None:
    """Case 20 through the real command (``--watch-state`` is wired)."""
    memo, state = tmp_path / "notes.json", tmp_path / "watches.json"
    edit(memo, {"todo": "milk"})
    garbage = b'{"version": 1, "watches": [{"name": "cm", "uri": '  # a write cut short
    state.write_bytes(garbage)
    model = script(
        tmp_path, [{"tool_calls": [watch_start("todo", None)]}, {"text": "watching"}, {"text": "{input}"}]
    )
    async with run_agentd(
        memo_loop_args(model, memo, "--watch-state", str(state)), env=tagged_env(tmp_path, **WATCH_ENV)
    ) as a:
        moved = await a.wait_event("state.moved_aside")
        await a.wait_event("watch.started")
        await a.wait_event("turn.end")
        # The daemon works: a change becomes a notice turn of the same agent.
        edit(memo, {"todo": "bread"})
        await a.wait_event("turn.end", count=2)
        await stop_and_check_no_orphans(a)
    (aside,) = await trio.Path(tmp_path).glob("watches.json.corrupt-*")
    assert await aside.read_bytes() == garbage
    assert (moved["file"], moved["path"], moved["moved_to"]) == ("watch state", str(state), str(aside))
    assert "is not valid watch state" in moved["problem"]
    assert moved["kept"] == 0  # the cut went through the only entry
    assert a.find("watch.state_warning") == []
    saved = json.loads(state.read_text())["watches"]
    assert [(w["name"], w["uri"]) for w in saved] == [("todo", "memo://notes")]
    assert "MODIFIED todo" in a.out
    await aside.unlink()  # checked; the catalog's leftover check allows no other files


# ---------------------------------------------------------------------------- case 21

_CRASHER = textwrap.dedent(
    """
    import os, sys
    from agentd.watches.state import WatchSpec, save
    path, crash_at = sys.argv[1], sys.argv[2]
    BIG = repr("x" * 100_000)  # a valid filter (a string literal) that makes the file 100 KB
    def hook(step):
        if step == crash_at:
            os._exit(17)  # as abrupt as a SIGKILL: no cleanup, no flush
    save(path, [WatchSpec(name="new", uri="memo://notes", owner="root", on_event=BIG)], step_hook=hook)
    """
)


@pytest.mark.parametrize(
    ("crash_at", "survivor"),
    [("temp-written", "old"), ("temp-synced", "old"), ("renamed", "new"), ("dir-synced", "new")],
)
async def test_a_crash_mid_write_leaves_a_whole_state_file_that_agentd_restores(
    tmp_path: Path, crash_at: str, survivor: str
) -> None:
    """Case 21: old or new file, never a partial one; the next agentd start restores it and cleans the temp."""
    memo, state = tmp_path / "notes.json", tmp_path / "watches.json"
    edit(memo, {"todo": "milk"})
    save(state, [WatchSpec(name="old", uri="memo://notes", owner="root")])
    old_bytes = state.read_bytes()
    with trio.fail_after(CRASHER_TIMEOUT_S):
        proc = await trio.run_process(
            [sys.executable, "-c", _CRASHER, str(state), crash_at], cwd=REPO, capture_stderr=True, check=False
        )
    assert proc.returncode == 17, proc.stderr.decode()
    big = repr("x" * 100_000)
    expected = (
        old_bytes
        if survivor == "old"
        else encode([WatchSpec(name="new", uri="memo://notes", owner="root", on_event=big)])
    )
    assert state.read_bytes() == expected
    if crash_at in ("temp-written", "temp-synced"):
        assert leftover_temps(state) != []  # what the crash left behind
    model = script(tmp_path, [{"text": "up"}])
    async with run_agentd(
        memo_loop_args(model, memo, "--watch-state", str(state)), env=tagged_env(tmp_path, **WATCH_ENV)
    ) as a:
        restored = await a.wait_event("watch.restored")
        await stop_and_check_no_orphans(a)
    assert a.find("watch.state_warning") == []  # never "corrupt"
    assert restored["restored"] == [f"root:{survivor}"]
    assert leftover_temps(state) == []  # the next owner removed the crash's leftover


# ---------------------------------------------------------------------------- case 22


@contextlib.contextmanager
def unwritable_dir(tmp_path: Path, kind: str) -> Iterator[Path]:
    """A directory agentd cannot write its state file in: a read-only or a full filesystem.

    Needs a tmpfs mount (root with CAP_SYS_ADMIN, as in the dev container); elsewhere the
    test is skipped with that reason (the component test covers both errnos by injection).
    """
    mnt = tmp_path / f"mnt-{kind}"
    mnt.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True, check=False
    )
    if mounted.returncode != 0:
        pytest.skip(f"needs a tmpfs mount to make a {kind} filesystem: {mounted.stderr.decode().strip()}")
    try:
        if kind == "full":
            with contextlib.suppress(OSError), open(mnt / "filler", "wb") as f:
                f.write(b"\0" * (1024 * 1024))
        else:
            subprocess.run(["mount", "-o", "remount,ro", str(mnt)], check=True, capture_output=True)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False, capture_output=True)


@pytest.mark.parametrize(
    ("kind", "reason"), [("read-only", "Read-only file system"), ("full", "No space left")]
)
async def test_unwritable_state_directory_is_reported_and_watches_run_in_memory(
    tmp_path: Path, kind: str, reason: str
) -> None:
    """Case 22: a clear error naming the path and the fix; the watch still works."""
    memo = tmp_path / "notes.json"
    edit(memo, {"todo": "milk"})
    model = script(
        tmp_path, [{"tool_calls": [watch_start("todo", None)]}, {"text": "watching"}, {"text": "{input}"}]
    )
    with unwritable_dir(tmp_path, kind) as directory:
        state = directory / "watches.json"
        async with run_agentd(
            memo_loop_args(model, memo, "--watch-state", str(state)), env=tagged_env(tmp_path, **WATCH_ENV)
        ) as a:
            problem = await a.wait_event("watch.state_unavailable")
            await a.wait_event("turn.end")
            edit(memo, {"todo": "bread"})
            await a.wait_event("turn.end", count=2)
            await stop_and_check_no_orphans(a)
        assert not state.exists()
    assert reason in problem["error"]
    assert f"cannot write --watch-state file {str(state)!r}" in problem["error"]
    assert "watches keep running in memory only and will not survive a restart" in problem["error"]
    assert "point --watch-state elsewhere" in problem["error"]
    assert "MODIFIED todo" in a.out  # the watch kept running

"""Fault catalog: ``--watch-state`` pointed at the wrong thing, or shared by two agentd.

Through the real ``agentd`` command (and ``agentd check``): a second agentd
given a state file another one holds is refused with exit 2 and changes
nothing; a file that is not agentd's, a directory, ``/dev/zero`` and a FIFO
are refused with exit 2 by ``check`` and at start, and left exactly as they
were. The writer itself (the real component, two real processes) never
corrupts a file two writers share: every temp file is its own.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.core.exitcodes import ExitCode
from agentd.watches.state import claim, leftover_temps, load, lock_path
from tests.support.agentd_proc import PY, REPO, agentd_cmd, run_agentd, script
from tests.support.files import edit
from tests.support.leftovers import run_tagged, tagged_env

pytestmark = pytest.mark.fault

#: Bound on a command that must be refused before it starts anything (a FIFO must not hang it).
REFUSE_TIMEOUT_S = 30.0

WATCH_ENV = {"AGENTD_WATCHES__DEBOUNCE": "0.1", "AGENTD_WATCHES__MAX_WAIT": "1"}


def _loop_args(model: str, memo: Path, state: Path) -> list[str]:
    return [
        "--mode", "loop", "--session", "warm", "--interval", "1h", "--verbose", "--model", model,
        "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {memo}", "--watch-state", str(state),
        "watch my notes",
    ]  # fmt: skip


def _watch_start(name: str) -> dict[str, Any]:
    return {"name": "watch_start", "arguments": {"name": name, "uri": "memo://notes"}}


# ------------------------------------------------------------------ two agentd, one file


async def test_a_second_agentd_on_the_same_state_file_is_refused_with_exit_2(tmp_path: Path) -> None:
    memo, state = tmp_path / "notes.json", tmp_path / "watches.json"
    edit(memo, {"todo": "milk"})
    model = script(
        tmp_path, [{"tool_calls": [_watch_start("todo")]}, {"text": "watching"}, {"text": "{input}"}]
    )
    env = tagged_env(tmp_path, **WATCH_ENV)
    async with run_agentd(_loop_args(model, memo, state), env=env) as first:
        await first.wait_event("watch.started")
        await first.wait_event("turn.end")

        second = await trio.run_process(
            agentd_cmd(*_loop_args(model, memo, state)),
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=str(REPO),
            env={**os.environ, **env},
        )
        err = second.stderr.decode()
        assert second.returncode == ExitCode.CONFIG, err
        assert f"another agentd (pid {first.proc.pid}) is using it" in err
        assert "give each agentd its own --watch-state file" in err
        assert "supervisor.start" not in err  # refused before anything started: no server, no write

        # The first one is untouched: its watch still turns a change into a notice.
        edit(memo, {"todo": "bread"})
        await first.wait_event("turn.end", count=2)
        first.signal()
        assert await first.wait_exit() == 0, first.tail()
    assert "MODIFIED todo" in first.out
    got = load(state)
    assert ([s.name for s in got.specs], got.warnings) == (["todo"], [])
    assert leftover_temps(state) == []

    # Once the first is gone, the file is free again.
    async with run_agentd(
        _loop_args(script(tmp_path, [{"text": "up"}], name="up.json"), memo, state), env=env
    ) as a:
        restored = await a.wait_event("watch.restored")
        a.signal()
        assert await a.wait_exit() == 0, a.tail()
    assert restored["restored"] == ["root:todo"]
    assert lock_path(state).exists()  # kept between runs by design (never unlinked: no race)


_WRITER = textwrap.dedent(
    """
    import sys
    from agentd.watches.state import WatchSpec, load, save
    path, me, rounds = sys.argv[1], sys.argv[2], int(sys.argv[3])
    mine = [WatchSpec(name=me, uri="memo://" + me, on_event="x" * 50_000)]
    for _ in range(rounds):
        save(path, mine)
        got = load(path)  # whichever writer won, the file is whole
        specs = got.specs
        assert not got.warnings and got.moved_aside is None, got
        assert len(specs) == 1 and specs[0].name in ("a", "b"), got
    """
)


async def test_two_writers_sharing_a_file_never_corrupt_it(tmp_path: Path) -> None:
    """The real writer in two real processes at once (what a lock-less filesystem would allow)."""
    state = tmp_path / "watches.json"
    results: dict[str, subprocess.CompletedProcess[bytes]] = {}

    async def writer(name: str) -> None:
        results[name] = await trio.run_process(
            [sys.executable, "-c", _WRITER, str(state), name, "150"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=str(REPO),
        )

    with trio.fail_after(120):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(writer, "a")
            nursery.start_soon(writer, "b")
    for name, proc in results.items():
        assert proc.returncode == 0, f"writer {name}: {proc.stderr.decode()[-2000:]}"
    got = load(state)
    assert got.warnings == []
    assert [s.name for s in got.specs] in (["a"], ["b"])
    assert leftover_temps(state) == []


# ------------------------------------------------------------------ paths agentd must not use


def _check_and_start(tmp_path: Path, state: Path) -> list[subprocess.CompletedProcess[str]]:
    """``agentd check`` and a start, each with ``--watch-state state``: both must refuse it (exit CONFIG)."""
    model = script(tmp_path, [{"text": "up"}])
    memo = tmp_path / "notes.json"
    edit(memo, {})
    results = [
        run_tagged(args, tmp_path, REFUSE_TIMEOUT_S)
        for args in (["check", *_loop_args(model, memo, state)], _loop_args(model, memo, state))
    ]
    for result in results:
        assert result.returncode == ExitCode.CONFIG, result.stderr
    return results


async def test_a_file_that_is_not_agentds_is_refused_by_check_and_at_start(tmp_path: Path) -> None:
    notes = tmp_path / "todo.json"  # the user's own file, passed by mistake
    content = b'{"todo": ["milk", "bread"], "owner": "me"}\n'
    notes.write_bytes(content)
    for result in _check_and_start(tmp_path, notes):
        assert (
            f"--watch-state: {str(notes)!r} is not valid: exists and is not an agentd watch-state file"
            in (result.stderr)
        )
        assert "never overwrites or moves a file it did not write" in result.stderr
        assert result.stdout == ""
    assert notes.read_bytes() == content
    assert list(await trio.Path(tmp_path).glob("*todo.json.*")) == []  # no .corrupt-* copy, no temp


@pytest.mark.parametrize("kind", ["dev-zero", "directory", "fifo"])
async def test_a_path_that_is_not_a_regular_file_is_refused_by_check_and_at_start(
    tmp_path: Path, kind: str
) -> None:
    if kind == "dev-zero":
        path, what = Path("/dev/zero"), "a character device"
    elif kind == "directory":
        path, what = tmp_path / "state", "a directory"
        path.mkdir()
    else:
        path, what = tmp_path / "state.fifo", "a FIFO (named pipe)"
        os.mkfifo(path)
    for result in _check_and_start(tmp_path, path):
        assert f"--watch-state: {str(path)!r} is not valid: is {what}, not a regular file" in result.stderr
    if kind == "fifo":
        path.unlink()


# ------------------------------------------------------------------ SIGKILL mid-write

_SAVER = textwrap.dedent(
    """
    import os, sys
    from agentd.watches.state import WatchSpec, save
    path = sys.argv[1]
    specs = []
    for i in range(1_000_000):
        specs.append(WatchSpec(name=f"w{i}", uri=f"memo://{i}", owner="root", on_event=repr("x" * 20_000)))
        save(path, specs)
        os.write(1, f"{i}\\n".encode())  # acknowledged: save returned, the file holds w0..wi
    """
)


@pytest.mark.parametrize("after", [1, 5, 12, 30])
async def test_sigkill_during_watch_state_writes_loses_no_acknowledged_watch(
    tmp_path: Path, after: int
) -> None:
    """A real writer on agentd's save path, killed at once after ``after`` acknowledged saves."""
    state = tmp_path / "watches.json"
    proc = await trio.lowlevel.open_process(
        [sys.executable, "-c", _SAVER, str(state)], stdout=subprocess.PIPE, cwd=str(REPO)
    )
    assert proc.stdout is not None
    buf = b""
    with trio.fail_after(REFUSE_TIMEOUT_S):
        while buf.count(b"\n") < after:
            chunk = await proc.stdout.receive_some()
            assert chunk, "the writer ended early"
            buf += chunk
        proc.send_signal(signal.SIGKILL)
        assert await proc.wait() == -signal.SIGKILL
        while chunk := await proc.stdout.receive_some():
            buf += chunk
    await proc.stdout.aclose()
    acked = buf.count(b"\n")
    claim(state).release()  # the next owner: removes the temp file the kill may have left
    got = load(state)
    assert (got.warnings, got.moved_aside) == ([], None)  # whole: a crash is never damage
    names = [s.name for s in got.specs]
    assert len(names) in (acked, acked + 1)  # every acknowledged watch; the one in flight may be there
    assert names == [f"w{i}" for i in range(len(names))]
    assert leftover_temps(state) == []

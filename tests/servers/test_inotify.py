"""The ctypes inotify wrapper against the real kernel (no sleeps: waits are bounded by fail_after)."""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest
import trio
import trio.testing

from agentd.servers._inotify import (
    IN_CLOSE_WRITE,
    IN_CREATE,
    IN_ISDIR,
    Inotify,
    InotifyError,
    RecursiveWatcher,
    parse_events,
)

#: Kernel event delivery is immediate; the slack is for a loaded machine.
EVENT_TIMEOUT = 10.0


def test_parse_events_handles_names_and_padding() -> None:
    name = b"a.txt\0\0\0\0\0\0\0\0\0\0\0"
    buf = (
        struct.pack("iIII", 1, IN_CREATE, 0, len(name)) + name + struct.pack("iIII", 2, IN_CLOSE_WRITE, 7, 0)
    )
    first, second = parse_events(buf)
    assert (first.wd, first.mask, first.name) == (1, IN_CREATE, "a.txt")
    assert (second.wd, second.cookie, second.name) == (2, 7, "")
    with pytest.raises(ValueError, match="truncated inotify record"):
        parse_events(buf[:20])


def test_missing_path_error_says_what_to_do(tmp_path: Path) -> None:
    with (
        Inotify() as ino,
        pytest.raises(InotifyError, match=r"inotify_add_watch\('.*nope'\) failed: .*create it first"),
    ):
        ino.add_watch(tmp_path / "nope", IN_CREATE)


async def test_events_arrive_without_polling(tmp_path: Path) -> None:
    with Inotify() as ino:
        ino.add_watch(tmp_path, IN_CLOSE_WRITE)
        assert ino.read_nowait() == []
        (tmp_path / "f.txt").write_text("x")
        with trio.fail_after(EVENT_TIMEOUT):
            (ev,) = await ino.wait_events()
        assert ev.name == "f.txt"
        assert ev.path == str(tmp_path / "f.txt")
        assert ev.mask & IN_CLOSE_WRITE


async def test_close_wakes_a_waiter(tmp_path: Path) -> None:
    ino = Inotify()
    ino.add_watch(tmp_path, IN_CREATE)
    outcome: list[str] = []

    async def waiter() -> None:
        try:
            await ino.wait_events()
        except trio.ClosedResourceError:
            outcome.append("closed")

    with trio.fail_after(EVENT_TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(waiter)
            await trio.testing.wait_all_tasks_blocked()
            ino.close()
    assert outcome == ["closed"]


async def test_recursive_watcher_follows_new_directories(tmp_path: Path) -> None:
    (tmp_path / "old").mkdir()
    with RecursiveWatcher(tmp_path) as watcher:
        watcher.start()
        (tmp_path / "old" / "a.txt").write_text("1")
        with trio.fail_after(EVENT_TIMEOUT):
            batch = await watcher.wait_changes()
        assert str(tmp_path / "old" / "a.txt") in {e.path for e in batch}
        # A new directory with a file created before the watch can land: reported as synthetic IN_CREATE.
        new = tmp_path / "new"
        new.mkdir()
        (new / "b.txt").write_text("2")
        seen: set[str] = set()
        with trio.fail_after(EVENT_TIMEOUT):
            while str(new / "b.txt") not in seen:
                seen |= {e.path for e in await watcher.wait_changes()}
        assert str(new) in seen
        # And the new directory is itself watched now.
        (new / "c.txt").write_text("3")
        with trio.fail_after(EVENT_TIMEOUT):
            while str(new / "c.txt") not in seen:
                seen |= {e.path for e in await watcher.wait_changes()}


@pytest.mark.slow
async def test_overflow_is_reported_for_a_rescan(tmp_path: Path) -> None:
    limit = max_queued_events()
    if limit > 20_000:
        pytest.skip(f"max_queued_events is {limit}; overflowing it would take too long")
    with RecursiveWatcher(tmp_path) as watcher:
        watcher.start()
        create_files(tmp_path, limit + 10)  # distinct names: the kernel cannot merge them
        with trio.fail_after(EVENT_TIMEOUT):
            while not any(e.overflow for e in await watcher.wait_changes()):
                pass
        assert watcher.root == str(tmp_path)


def max_queued_events() -> int:
    return int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())


def create_files(directory: Path, n: int) -> None:
    for i in range(n):
        os.close(os.open(directory / f"f{i}", os.O_WRONLY | os.O_CREAT))


def test_isdir_flag() -> None:
    from agentd.servers._inotify import TreeEvent

    assert TreeEvent("/x", IN_CREATE | IN_ISDIR).is_dir

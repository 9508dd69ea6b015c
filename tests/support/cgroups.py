"""A pids cgroup made by a test, to make ``fork()`` fail for real (EAGAIN).

Root cannot be held back by ``RLIMIT_NPROC`` (the kernel does not enforce it
for uid 0 or CAP_SYS_RESOURCE), but a pids cgroup binds everyone: a process
in a cgroup whose ``pids.max`` is reached gets EAGAIN from ``fork()`` and
``clone()`` (new threads too). cgroup v1 (``/sys/fs/cgroup/pids``) and v2
(a root with the pids controller delegated) are supported; where neither is
writable, :func:`pids_cgroup` skips the test with the reason.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

_CANDIDATES = (
    (Path("/sys/fs/cgroup/pids"), "pids.max"),  # v1
    (Path("/sys/fs/cgroup"), "pids.max"),  # v2 unified at the root
    (Path("/sys/fs/cgroup/unified"), "pids.max"),  # v2 next to v1
)


class PidsCgroup:
    """One cgroup: :meth:`add` processes, :meth:`limit` their forks."""

    def __init__(self, root: Path, path: Path) -> None:
        self.root = root
        self.path = path

    def add(self, pid: int) -> None:
        """Move ``pid`` (all its threads) into the cgroup."""
        (self.path / "cgroup.procs").write_text(f"{pid}\n")

    def limit(self, value: int | str) -> None:
        """Set ``pids.max`` (an int, or ``"max"``). Below ``pids.current`` means: no new task at all."""
        (self.path / "pids.max").write_text(f"{value}\n")

    def pids(self) -> list[int]:
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]

    def remove(self) -> None:
        """Move every process back to the root cgroup and delete this one."""
        with contextlib.suppress(OSError):
            self.limit("max")
        for pid in self.pids():
            with contextlib.suppress(OSError):
                (self.root / "cgroup.procs").write_text(f"{pid}\n")
        with contextlib.suppress(OSError):
            self.path.rmdir()


@contextlib.contextmanager
def pids_cgroup() -> Iterator[PidsCgroup]:
    """A fresh pids cgroup, removed afterwards; skips the test where none can be made."""
    problems = []
    for root, control in _CANDIDATES:
        if not (root / "cgroup.procs").exists():
            continue
        path = root / f"agentd-test-{uuid.uuid4().hex[:12]}"
        try:
            path.mkdir()
        except OSError as exc:
            problems.append(f"{root}: {exc}")
            continue
        if not (path / control).exists() or not os.access(path / "cgroup.procs", os.W_OK):
            path.rmdir()
            problems.append(f"{root}: no writable pids controller")
            continue
        group = PidsCgroup(root, path)
        try:
            yield group
        finally:
            group.remove()
        return
    pytest.skip(
        f"no writable pids cgroup here (needs root and a pids controller): {problems or 'none found'}"
    )

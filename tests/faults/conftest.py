"""Fixtures shared by the fault catalog.

Every test in ``tests/faults`` is checked, after it ran, for two kinds of
leftovers (the catalog's point is that faults leave nothing behind):

* **processes**: nothing may still run whose command line mentions the test's
  ``tmp_path`` (upstream servers take their state files there), nor any
  process carrying the test's tag in its environment (``agentd`` started with
  :func:`tagged_env`, and what it forks: the zygote and every agent child).
  Processes that are on their way out get :data:`EXIT_BOUND` seconds, awaited
  on pidfds (no polling). Survivors are SIGKILLed and the test fails.
* **files**: nothing may be left in ``tmp_path`` except what the test made or
  declared with the ``allow_files`` fixture (half-written temporaries, stray
  sockets, ``*.tmp`` files fail the test).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import select
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

TAG = "AGENTD_FAULTS_TEST"
"""Environment variable naming the test that started a process (its ``tmp_path``)."""

EXIT_BOUND = 5.0
"""Seconds a process that belongs to a finished test may take to exit: agentd's own
shutdown ladder for a server is bounded by 2 s + 2 s (stdin close, SIGTERM)."""

DEFAULT_ALLOWED = ("*.json", "*.toml", "*.grandchild", ".*.json.lock")
"""Files the catalog's tests make on purpose: state files (and their ``--watch-state``
lock files, which outlive a run by design), scripts, configs."""


def tagged_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    """Environment for an ``agentd`` started by a test: tagged so its descendants can be found."""
    return {TAG: str(tmp_path), **extra}


def _belongs(proc: psutil.Process, marker: str) -> bool:
    try:
        if any(marker in part for part in proc.cmdline()):
            return True
        return proc.environ().get(TAG) == marker
    except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
        return False


def leftover_processes(marker: str) -> list[psutil.Process]:
    """Live (non-zombie) processes that belong to the test whose ``tmp_path`` is ``marker``."""
    me = os.getpid()
    found = []
    for proc in psutil.process_iter():
        if proc.pid == me:
            continue
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess):
            if proc.status() != psutil.STATUS_ZOMBIE and _belongs(proc, marker):
                found.append(proc)
    return found


def wait_gone(pids: list[int], bound: float) -> list[int]:
    """Wait up to ``bound`` s for every pid to exit (pidfds, one blocking poll); returns the survivors."""
    fds: dict[int, int] = {}
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            fds[os.pidfd_open(pid)] = pid
    try:
        poller = select.poll()
        for fd in fds:
            poller.register(fd, select.POLLIN)
        pending = set(fds)
        deadline = _monotonic() + bound
        while pending:
            left = deadline - _monotonic()
            if left <= 0:
                break
            for fd, _ in poller.poll(left * 1000):
                pending.discard(fd)
                poller.unregister(fd)
        survivors = []
        for fd in pending:
            pid = fds[fd]
            with contextlib.suppress(psutil.NoSuchProcess):
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    survivors.append(pid)
        return survivors
    finally:
        for fd in fds:
            os.close(fd)


def _monotonic() -> float:
    import time

    return time.monotonic()


class AllowedFiles:
    """Glob patterns (relative to ``tmp_path``) of files a test may leave behind."""

    def __init__(self) -> None:
        self.patterns: list[str] = list(DEFAULT_ALLOWED)

    def __call__(self, *patterns: str) -> None:
        self.patterns.extend(patterns)

    def unexpected(self, root: Path) -> list[str]:
        out = []
        for path in sorted(root.rglob("*")):
            if path.is_dir():
                continue
            rel = str(path.relative_to(root))
            if not any(fnmatch.fnmatch(rel, p) or fnmatch.fnmatch(path.name, p) for p in self.patterns):
                out.append(rel)
        return out


@pytest.fixture
def allow_files() -> AllowedFiles:
    """Declare extra files (globs) a test may leave in ``tmp_path``."""
    return AllowedFiles()


@pytest.fixture(autouse=True)
def _no_leftovers(tmp_path: Path, allow_files: AllowedFiles) -> Iterator[None]:
    yield
    marker = str(tmp_path)
    procs = leftover_processes(marker)
    survivors = wait_gone([p.pid for p in procs], EXIT_BOUND) if procs else []
    described = []
    for pid in survivors:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            described.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline())[:200]}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    stray = allow_files.unexpected(tmp_path)
    problems = []
    if described:
        problems.append("processes outlived the test:\n  " + "\n  ".join(described))
    if stray:
        problems.append(f"unexpected files left in {tmp_path}: {stray}")
    if problems:
        pytest.fail("\n".join(problems))

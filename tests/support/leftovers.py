"""Finding what a test left running: processes tagged with the test's ``tmp_path``.

The fault catalog's ``conftest.py`` checks, after every test, that nothing
carrying the test's tag still runs; tests start ``agentd`` with
:func:`tagged_env` so its descendants (zygote, agent children) can be found.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import select
import subprocess
import time
from pathlib import Path

import psutil

TAG = "AGENTD_FAULTS_TEST"
"""Environment variable naming the test that started a process (its ``tmp_path``)."""

EXIT_BOUND = 5.0
"""Seconds a process that belongs to a finished test may take to exit: agentd's own
shutdown ladder for a server is bounded by 2 s + 2 s (stdin close, SIGTERM)."""


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
        deadline = time.monotonic() + bound
        while pending:
            left = deadline - time.monotonic()
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


DEFAULT_ALLOWED = ("*.json", "*.toml", "*.grandchild", ".*.json.lock")
"""Files the catalog's tests make on purpose: state files (and their ``--watch-state``
lock files, which outlive a run by design), scripts, configs."""


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


def run_tagged(args: list[str], tmp: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``agentd ARGS`` run to its end from the repository, tagged with ``tmp`` (:func:`tagged_env`).

    ``PWD`` is left out of its environment: agentd would take it for a password
    and redact its value in messages, and the tests name paths in full.
    """
    from tests.support.agentd_proc import REPO, agentd_cmd

    return subprocess.run(
        agentd_cmd(*args),
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
        env={**{k: v for k, v in os.environ.items() if k != "PWD"}, **tagged_env(tmp)},
        check=False,
    )

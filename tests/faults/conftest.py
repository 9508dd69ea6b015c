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
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.support.leftovers import EXIT_BOUND, AllowedFiles, leftover_processes, wait_gone


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

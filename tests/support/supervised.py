"""Run the real ``agentd`` command and prove afterwards that no process it started survived it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import psutil
import trio

from tests.support.agentd_proc import Agentd, run_agentd

#: A whole run on this shared 2-core machine: interpreter and zygote start-up
#: (~2 s under load) plus the seconds of virtual work each test asks for.
RUN_TIMEOUT = 40.0


def _descendants(pid: int) -> set[int]:
    try:
        return {p.pid for p in psutil.Process(pid).children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def alive(pid: int) -> psutil.Process | None:
    try:
        p = psutil.Process(pid)
        return None if p.status() == psutil.STATUS_ZOMBIE else p
    except psutil.NoSuchProcess:
        return None


def tree_of(a: Agentd) -> list[psutil.Process]:
    """Every process below agentd: zygote, agents, MCP servers, sandbox workers."""
    return psutil.Process(a.proc.pid).children(recursive=True)


def survivors(procs: list[psutil.Process]) -> list[str]:
    """Those of ``procs`` still running (not zombies), as ``pid [cmdline]``."""

    def running(p: psutil.Process) -> bool:
        try:
            return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    return [f"{p.pid} {p.cmdline()}" for p in procs if running(p)]


def assert_no_orphans(seen: set[int], tmp_path: Path) -> None:
    """No process agentd started (seen while it ran), and none naming ``tmp_path``, is still alive."""
    left = [p for p in (alive(pid) for pid in sorted(seen)) if p is not None]
    marker = str(tmp_path)
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = " ".join(p.info["cmdline"] or [])
        if marker in cmd and p.pid not in seen and alive(p.pid) is not None:
            left.append(p)
    described = [f"{p.pid}: {' '.join(p.cmdline())[:200]}" for p in left if alive(p.pid) is not None]
    assert not described, "processes outlived agentd:\n" + "\n".join(described)


@asynccontextmanager
async def tracking(
    args: Sequence[str], *, env: dict[str, str] | None = None, cwd: Path | None = None
) -> AsyncIterator[tuple[Agentd, set[int]]]:
    """Run agentd; yields it and the pids of its descendants, recorded on every telemetry line while it runs."""
    seen: set[int] = set()
    async with run_agentd(list(args), env=env, cwd=cwd) as a:

        async def track() -> None:
            while a.proc.returncode is None:
                seen.update(_descendants(a.proc.pid))
                await a._changed.wait()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(track)
            try:
                yield a, seen
            finally:
                nursery.cancel_scope.cancel()


@asynccontextmanager
async def supervised(
    args: Sequence[str], tmp_path: Path, *, env: dict[str, str] | None = None
) -> AsyncIterator[Agentd]:
    """Run agentd (:func:`tracking`); afterwards assert none of its descendants survived."""
    async with tracking(args, env=env) as (a, seen):
        yield a
    assert_no_orphans(seen, tmp_path)

"""An opt-in timeline of a spawn or a wake across processes, for the benchmarks.

With ``AGENTD_TIMELINE=FILE`` in the environment, :func:`mark` appends one
line per call to ``FILE``: ``MONOTONIC CPU PID NAME [KEY]`` (CPU: the process's CPU seconds). Every process of
the tree (supervisor, zygote, children) writes to the same file with
``O_APPEND`` and the same clock (``CLOCK_MONOTONIC``, the clock of
``time.perf_counter`` in the benchmark too), so the lines of one wake line up:
the notification at the upstream connection, the reactor's decision, the
spawn request to the zygote, the fork, the child's start, its model
client, the request leaving. ``bench_reactive --wake --timeline`` and
``bench_spawn --measure P --timeline`` print the stages' medians.

Unset (the normal case), :func:`mark` returns at once: one global read. A
path that cannot be opened, or a write that fails (a full disk), turns the
timeline off in that process; it never raises into agentd.
"""

from __future__ import annotations

import os
import time

#: The variable naming the timeline file.
TIMELINE_ENV = "AGENTD_TIMELINE"

_fd: int | None = None


def reopen() -> None:
    """Read the variable again (done at import; a benchmark that sets it later calls this)."""
    global _fd
    path = os.environ.get(TIMELINE_ENV)
    _fd = None
    if path:
        try:
            _fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        except OSError:
            _fd = None  # a diagnostic: a path it cannot open turns it off, never stops agentd


def mark(name: str, key: str = "") -> None:
    """Append ``name`` (and ``key``: an agent id, a URI) with the time now; nothing when unset."""
    global _fd
    if _fd is None:
        return
    key = key.replace("\n", " ").replace("\r", " ")  # a URI cannot forge a line
    try:
        os.write(
            _fd, f"{time.monotonic():.6f} {time.process_time():.6f} {os.getpid()} {name} {key}\n".encode()
        )
    except OSError:
        _fd = None  # a full disk turns the timeline off in this process; the run goes on


reopen()

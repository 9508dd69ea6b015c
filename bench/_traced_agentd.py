"""``agentd`` with tracemalloc on and a SIGUSR2 handler that writes a heap snapshot (bench_soak's ``--heap``).

Run: ``python bench/_traced_agentd.py DIR [agentd arguments...]``. The
supervisor is this process (same pid), so the bench samples it as usual.
The first SIGUSR2 starts tracing (from
start-up on, 25 frames a block make the imports alone take minutes on a busy
machine; what is retained per agent is allocated after the first agents
anyway). Each later one runs a full garbage collection (what only waits for
the cycle collector is not retention), then writes ``DIR/heap-N.pickle`` (a
:class:`tracemalloc.Snapshot` of what was allocated since tracing started
and is still alive, N counting from 0) and appends ``N traced_bytes`` to
``DIR/heap.txt``. Nothing in agentd polls or knows of
this: the handler runs on the main thread between bytecodes, when the signal
arrives. Forked children (the zygote's, if any) turn tracing off at once.
"""

from __future__ import annotations

import ctypes
import gc
import os
import signal
import sys
import tracemalloc
from pathlib import Path
from types import FrameType


class _MallInfo2(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena",
            "ordblks",
            "smblks",
            "hblks",
            "hblkhd",
            "usmblks",
            "fsmblks",
            "uordblks",
            "fordblks",
            "keepcost",
        )
    ]


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _glibc() -> str:
    """``in_use free rss rss_after_trim`` (bytes), after the trim; zeros where glibc is not the allocator."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        libc.mallinfo2.restype = _MallInfo2
        info = libc.mallinfo2()
        before = _rss()
        libc.malloc_trim(0)
        return f"{info.uordblks + info.hblkhd} {info.fordblks} {before} {_rss()}"
    except (OSError, AttributeError):
        return f"0 0 {_rss()} {_rss()}"


#: Frames kept per allocation: enough to see past trio's and the SDK's own frames to agentd's.
FRAMES = 25


def main() -> int:
    out = Path(sys.argv[1])
    del sys.argv[1]
    count = 0

    def dump(signum: int, frame: FrameType | None) -> None:
        nonlocal count
        if not tracemalloc.is_tracing():
            gc.collect()
            tracemalloc.start(FRAMES)
            return
        gc.collect()
        snap = tracemalloc.take_snapshot()
        snap.dump(str(out / f"heap-{count}.pickle"))
        traced, _peak = tracemalloc.get_traced_memory()
        with (out / "heap.txt").open("a") as f:
            f.write(f"{count} {traced} {_glibc()}\n")
        count += 1

    os.register_at_fork(after_in_child=tracemalloc.stop)
    signal.signal(signal.SIGUSR2, dump)
    sys.argv[0] = "agentd"
    from agentd.cli import main as agentd_main

    return agentd_main()


if __name__ == "__main__":
    raise SystemExit(main())

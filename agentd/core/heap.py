"""The heap: glibc's mmap threshold fixed for a long run (rfcs/0355); start-up objects frozen (rfcs/0367).

glibc serves a block of at least ``M_MMAP_THRESHOLD`` bytes (128 KiB by
default) with its own ``mmap`` and gives it back when it is freed. Unless
the threshold was set, every such block freed *raises* the threshold to its
size (up to 32 MiB), so later blocks of that size come from the heap
instead. A supervisor reads its children's channels with large buffers that
Python shrinks to what arrived: from the heap, each read leaves a hole
between what lives on, and over thousands of agents the heap's free space
and the process's RSS creep up while the bytes in use stay flat (the
soak, ``bench/bench_soak.py --heap``). Setting the threshold, to its own
default, turns the rise off: those reads are mapped and unmapped whole.

Only the supervisor calls this (a long-lived process); elsewhere (musl, no
``mallopt``) it does nothing.

**Start-up objects are frozen** (rfcs/0367). The imports of a run (the MCP
SDK's ~550 pydantic models, trio, agentd) leave ~100,000 objects the cyclic
collector tracks, nearly all of them alive until the process ends, and
~2,400 of garbage. The collector walked them again and again: during the
imports (each pass over the oldest generation), and after, in every process
forked from the supervisor. The ``agentd`` command pauses the collector
before its imports (:func:`pause_collector`); once they are done
(:func:`start_collector`) it moves what exists into the permanent generation
(``gc.freeze``: never walked again, never copied by a child's collector)
and starts the collector for what the run allocates: the supervisor before
it forks anything, a bundled server before it serves, the status view before
its loop. A short command (``check``, an error) ends with it paused.
"""

from __future__ import annotations

import ctypes
import gc

#: ``mallopt``'s parameter number for the threshold (``<malloc.h>``).
M_MMAP_THRESHOLD = -3

#: glibc's default threshold: the value is unchanged, only its rise is turned off.
MMAP_THRESHOLD = 128 * 1024


def fix_mmap_threshold() -> bool:
    """Fix glibc's mmap threshold at :data:`MMAP_THRESHOLD`; False where there is no glibc ``mallopt``."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
    mallopt.restype = ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD))


def pause_collector() -> None:
    """Pause the cyclic collector for the start-up imports (reference counting frees as ever)."""
    gc.disable()


def start_collector() -> None:
    """Freeze every object that exists now (start-up state) and run the collector for the rest."""
    gc.freeze()
    gc.enable()


__all__ = ["MMAP_THRESHOLD", "M_MMAP_THRESHOLD", "fix_mmap_threshold", "pause_collector", "start_collector"]

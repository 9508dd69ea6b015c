"""The supervisor's C heap over a long run: glibc's mmap threshold fixed at its default (rfcs/0355).

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
"""

from __future__ import annotations

import ctypes

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


__all__ = ["MMAP_THRESHOLD", "M_MMAP_THRESHOLD", "fix_mmap_threshold"]

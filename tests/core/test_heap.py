"""agentd.core.heap: the supervisor's glibc mmap threshold stays at its default (rfcs/0355).

Each case runs in a fresh interpreter: the threshold is process-wide.
"""

from __future__ import annotations

import platform
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.process  # a fresh interpreter per case

# After a 4 MiB block is freed, is a 256 KiB block mapped on its own (glibc's
# count of mapped blocks goes up) or carved from the heap?
PROBE = """
import ctypes, sys
from agentd.core.heap import fix_mmap_threshold

class MallInfo2(ctypes.Structure):
    _fields_ = [(n, ctypes.c_size_t) for n in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(None)
libc.mallinfo2.restype = MallInfo2
if sys.argv[1] == "fixed":
    assert fix_mmap_threshold()
big = bytearray(4 << 20)
del big  # a mapped block freed: unless the threshold was set, glibc raises it to 4 MiB
before = libc.mallinfo2().hblks
block = bytearray(256 << 10)
print(libc.mallinfo2().hblks - before)
"""

glibc = pytest.mark.skipif(
    sys.platform != "linux" or platform.libc_ver()[0] != "glibc", reason="glibc's mallopt and mallinfo2"
)


def probe(mode: str) -> int:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, mode], capture_output=True, text=True, cwd=REPO, timeout=60, check=True
    )
    return int(done.stdout)


@glibc
def test_a_large_read_buffer_is_mapped_after_a_larger_block_was_freed() -> None:
    assert probe("fixed") == 1


@glibc
def test_without_it_glibc_carves_the_buffer_from_the_heap() -> None:
    """The control: what the supervisor did before (the threshold rose to 4 MiB)."""
    assert probe("default") == 0

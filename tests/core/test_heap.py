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


COLLECTOR = """
import gc, sys
from agentd.core.heap import pause_collector, start_collector

pause_collector()
assert not gc.isenabled()
import agentd.supervisor.app  # what a run imports
start_collector()
assert gc.isenabled()
print(gc.get_freeze_count())
"""


def test_start_up_objects_are_frozen_and_the_collector_runs_after_the_imports() -> None:
    """rfcs/0367: what the imports built is in the permanent generation (never walked again);
    the collector runs for what comes after."""
    done = subprocess.run(
        [sys.executable, "-c", COLLECTOR], capture_output=True, text=True, cwd=REPO, timeout=60, check=True
    )
    assert int(done.stdout) > 50_000  # ~100,000 objects of trio, the MCP SDK and agentd


def test_the_command_pauses_the_collector_only_when_it_owns_the_process() -> None:
    """``agentd.cli.main(argv)`` (an embedding, the tests) leaves the caller's collector alone."""
    probe = "import gc\nfrom agentd.cli import main\nmain(['--version'])\nprint(gc.isenabled())\n"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert done.stdout.strip().splitlines()[-1] == "True", done

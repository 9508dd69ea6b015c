"""``scripts/demo``'s run, as the README promises it: a memo edit wakes an agent, then a clean drain.

The install half of ``scripts/demo`` (``scripts/setup``) is measured by hand
from an empty cache (rfcs/0306); this runs the demo itself, offline, through
the real ``agentd`` command, and checks every step it announces happened in
order and that each progress line says how far in it is.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.support.doccommands import REPO

pytestmark = pytest.mark.slow

DEMO_TIMEOUT_S = 300
"""The demo bounds its own steps (180 s for a cold start); this only stops a hang."""


def test_the_demo_wakes_an_agent_on_a_memo_edit_and_drains_cleanly():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AGENTD_", "OPENAI_", "ANTHROPIC_"))}
    env["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, str(REPO / "examples" / "demo.py")],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=DEMO_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    assert all(re.match(r"^\[ *\d+\.\ds\] ", line) for line in lines), lines
    steps = [m.group(1) for line in lines if (m := re.match(r"^\[ *[\d.]+s\] (\d)\. ", line))]
    assert steps == ["1", "2", "3", "4", "5", "6"], done.stdout
    assert "The notes now say: {}" in done.stdout  # the start-up re-read
    assert '"todo":"ship the release"' in done.stdout  # the woken agent's answer
    assert "drained cleanly, exit code 0" in done.stdout
    assert "agentd is up" in done.stdout  # progress while it starts

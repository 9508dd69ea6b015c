"""Fault catalog: a number in other digits, through the real ``agentd`` command (issue 37, item 3).

``str.isdigit()`` is true for ``²``, and ``int("²")`` raises: a port given so, or a
``WATCHDOG_USEC`` set so, was a traceback. A flag is refused with exit 2 and one line;
``WATCHDOG_USEC`` (set by the service manager, never by the user) is ignored with a
warning, as systemd's own ``sd_watchdog_enabled()`` does, and the run goes on.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path

import pytest

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import run_cli, script
from tests.support.leftovers import tagged_env

pytestmark = [pytest.mark.fault, pytest.mark.process]


def test_status_with_a_superscript_port_is_one_line_and_exit_2(tmp_path: Path) -> None:
    done = run_cli(["status", "--addr", "127.0.0.1:²"], cwd=tmp_path, env=tagged_env(tmp_path))
    assert done.returncode == ExitCode.CONFIG, done.stderr
    assert done.stderr == (
        "agentd: error: status: --addr '127.0.0.1:²' is not valid — fix: give HOST:PORT with the port in "
        "ASCII digits 1-65535, e.g. 127.0.0.1:8080 (the daemon's --health-addr)\n"
    )
    assert done.stdout == ""


def test_a_superscript_watchdog_usec_is_ignored_with_a_warning_and_the_run_goes_on(
    tmp_path: Path, allow_files
) -> None:
    allow_files("notify", "script.json")
    address = str(tmp_path / "notify")
    manager = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    manager.bind(address)
    manager.setblocking(False)
    try:
        done = run_cli(
            ["--model", script(tmp_path, [{"text": "done"}]), "--output", "json", "say done"],
            cwd=tmp_path,
            env=tagged_env(tmp_path, NOTIFY_SOCKET=address, WATCHDOG_USEC="²"),
        )
        received = []
        while True:
            try:
                received.append(manager.recv(65536).decode())
            except BlockingIOError:
                break
    finally:
        manager.close()
    assert done.returncode == ExitCode.OK, done.stderr
    assert "Traceback" not in done.stderr
    assert json.loads(done.stdout)["result"] == "done"
    events = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    (warning,) = [e for e in events if e.get("event") == "sdnotify.unsupported"]
    assert warning["variable"] == "WATCHDOG_USEC"
    assert "WATCHDOG_USEC='²' is not a positive number of microseconds in ASCII digits" in warning["error"]
    # The manager is still told the rest: ready, and stopping.
    assert any("READY=1" in m.split("\n") for m in received), received
    assert not any("WATCHDOG=1" in m.split("\n") for m in received)

"""Fault catalog: a file agentd is told to read (``@FILE``, ``--config``, ``--mcp-config``, ``script:``) is a FIFO,
a device or a directory.

Through the real ``agentd`` command: ``agentd check`` and a start both exit 2
at once, naming the flag, the path, what it is and the fix; nothing waits on
a FIFO (before, ``--instruction @FIFO`` blocked ``agentd check`` forever).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import script
from tests.support.leftovers import run_tagged

pytestmark = [pytest.mark.fault, pytest.mark.process]  # agentd runs through run_tagged

#: Bound on a command that must be refused before it starts anything (a FIFO must not hang it).
REFUSE_TIMEOUT_S = 30.0

_READS_ONLY = "agentd reads only regular files (a FIFO would wait for a writer, a device may never end)"


def _thing(tmp_path: Path, kind: str) -> tuple[Path, str]:
    if kind == "fifo":
        path = tmp_path / "task.fifo"
        os.mkfifo(path)
        return path, "a FIFO (named pipe)"
    if kind == "directory":
        return tmp_path, "a directory"
    return Path("/dev/zero"), "a character device"


def _fix(what: str, *, at_file: bool) -> str:
    if what == "a directory":
        return "name a file inside it"
    fix = f"{_READS_ONLY}: save the content to a file and name that"
    return fix + ", or write @@ to start literal text with @" if at_file else fix


@pytest.mark.parametrize("kind", ["fifo", "directory", "device"])
@pytest.mark.parametrize(
    "flag", ["--instruction", "--system", "route system", "--config", "--mcp-config", "script"]
)
def test_a_file_to_read_that_is_not_a_regular_file_is_refused_at_once(
    tmp_path: Path, allow_files, flag: str, kind: str
) -> None:
    allow_files("task.fifo")
    path, what = _thing(tmp_path, kind)
    model = script(tmp_path, [{"text": "done"}])
    base = ["--model", model]
    if flag in ("--instruction", "--system"):
        args = [*base, flag, f"@{path}"] + (["the task"] if flag == "--system" else [])
        expected = (
            f"{flag}: {'@' + str(path)!r} is not valid: the {flag[2:]} file {str(path)!r} is {what}, "
            f"not a regular file; {_fix(what, at_file=True)}"
        )
    elif flag == "route system":
        config = tmp_path / "agentd.toml"
        config.write_text(f'[[routes]]\nmatch = "memo://x"\nsystem = "@{path}"\n')
        args = [*base, "--mode", "reactive", "--config", str(config), "the task"]
        expected = (
            f"{config}: routes[0].system: {'@' + str(path)!r} is not valid: the system file {str(path)!r} "
            f"is {what}, not a regular file; {_fix(what, at_file=True)}"
        )
    elif flag == "script":
        args = ["--model", f"script:{path}", "the task"]
        expected = (
            f"--model: {'script:' + str(path)!r} is not valid: the script file {str(path)!r} is {what}, "
            f"not a regular file; {_fix(what, at_file=False)}"
        )
    else:
        args = [*base, flag, str(path), "the task"]
        expected = f"{flag}: {str(path)!r} is not valid: it is {what}, not a regular file; {_fix(what, at_file=False)}"
    for command in (["check", *args], args):
        result = run_tagged(command, tmp_path, REFUSE_TIMEOUT_S)
        assert result.returncode == ExitCode.CONFIG, result.stderr
        assert expected in result.stderr
        assert result.stdout == ""

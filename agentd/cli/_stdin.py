"""Standard input as the instruction (``-``, ``@-``) or as context piped with one (rfcs/0301).

* ``agentd -`` / ``agentd @-`` / ``--instruction -``: the instruction is
  all of stdin, read to its end (a terminal too: end it with Ctrl-D).
* ``cmd | agentd "INSTRUCTION"`` (a once run, stdin a pipe or a file): what
  ``cmd`` writes is added to the instruction as context; with no instruction
  at all it is the instruction (``echo "the task" | agentd -m …``). A pipe that stays
  silent for :data:`FIRST_BYTE_WAIT` is taken as "nothing to add": a run
  started with an inherited pipe nobody writes to (a CI step, a parent's
  ``subprocess.run``) must not wait for ever; it says so on stderr.
  A terminal, ``/dev/null`` and other devices are never read.

Either way at most :data:`MAX_STDIN_BYTES` are taken; more is a usage
error (exit 2) naming the cap and the fix. This is the one place that reads
stdin; ``@FILE`` itself is :mod:`agentd.config`'s.
"""

from __future__ import annotations

import os
import select
import stat
from typing import Final, Literal

from agentd.core.errors import ConfigError

#: Largest instruction or context taken from stdin: the cap of an ``@FILE``
#: instruction, far beyond a useful prompt, and it stops ``< /dev/zero``.
MAX_STDIN_BYTES: Final = 1024 * 1024

#: How long a once run waits for the first byte of a pipe it was not told to
#: read (no ``-``): a command piping into agentd writes at once or within a
#: moment; an inherited pipe that nobody writes to would otherwise hold the
#: run for ever. Claude Code waits the same three seconds.
FIRST_BYTE_WAIT: Final = 3.0

Source = Literal["terminal", "pipe", "file", "none"]
"""What stdin is: a terminal, a pipe or socket, a regular file, or nothing readable (``/dev/null``)."""

#: The marker lines around piped context in the instruction.
CONTEXT_OPEN: Final = "<stdin>"
CONTEXT_CLOSE: Final = "</stdin>"

INSTRUCTION_WORDS: Final = ("-", "@-")
"""The instruction values that read the instruction from stdin."""


def source(fd: int = 0) -> Source:
    """What ``fd`` is (see :data:`Source`)."""
    try:
        if os.isatty(fd):
            return "terminal"
        mode = os.fstat(fd).st_mode
    except OSError:
        return "none"
    if stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode):
        return "pipe"
    if stat.S_ISREG(mode):
        return "file"
    return "none"


def _read_all(fd: int, setting: str) -> bytes:
    """Everything until end of file, at most :data:`MAX_STDIN_BYTES` (more is an error)."""
    chunks: list[bytes] = []
    size = 0
    while True:
        try:
            chunk = os.read(fd, min(1 << 16, MAX_STDIN_BYTES + 1 - size))
        except OSError as exc:
            raise ConfigError(
                setting, "-", f"stdin cannot be read ({exc.strerror or exc}); pipe the input again"
            ) from None
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_STDIN_BYTES:
            raise ConfigError(
                setting,
                "-",
                f"more than {MAX_STDIN_BYTES} bytes arrived on stdin; pipe less (head -c, grep), or save it "
                "to a file and let the agent read it with a tool (agentd serve files)",
            )
    return b"".join(chunks)


def _text(data: bytes, setting: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            setting, "-", f"stdin is not UTF-8 text (byte {exc.start}); pipe text, or convert it (iconv)"
        ) from None


def instruction(fd: int = 0) -> str:
    """The instruction read from stdin (for ``-`` / ``@-``), ready to be a setting's value.

    A text that starts with ``@`` is escaped (``@@``), so it stays text
    instead of naming a file.

    Raises:
        ConfigError: stdin was empty, not UTF-8, unreadable or over the cap.
    """
    text = _text(_read_all(fd, "INSTRUCTION"), "INSTRUCTION")
    if not text.strip():
        raise ConfigError(
            "INSTRUCTION",
            "-",
            "stdin was empty; pipe the instruction in (echo 'the task' | agentd -), or give it as the argument",
        )
    return "@" + text if text.startswith("@") else text


def context(fd: int = 0) -> tuple[str | None, bool]:
    """Text piped on stdin to add to the instruction: (text or None, whether a pipe stayed silent).

    Reads only a pipe or a regular file; a pipe is waited on for
    :data:`FIRST_BYTE_WAIT` at most.

    Raises:
        ConfigError: not UTF-8, unreadable or over the cap.
    """
    kind = source(fd)
    if kind not in ("pipe", "file"):
        return None, False
    if kind == "pipe":
        ready, _, _ = select.select([fd], [], [], FIRST_BYTE_WAIT)
        if not ready:
            return None, True
    text = _text(_read_all(fd, "stdin"), "stdin")
    return (text if text.strip() else None), False


def with_context(instruction_text: str, piped: str) -> str:
    """The instruction followed by the piped context, marked so the model tells them apart."""
    return f"{instruction_text}\n\n{CONTEXT_OPEN}\n{piped.rstrip(chr(10))}\n{CONTEXT_CLOSE}"


__all__ = [
    "FIRST_BYTE_WAIT",
    "INSTRUCTION_WORDS",
    "MAX_STDIN_BYTES",
    "context",
    "instruction",
    "source",
    "with_context",
]

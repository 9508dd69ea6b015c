"""Run the real ``agentd`` with its stderr on a pseudo-terminal: what a person at a terminal sees.

``async with on_a_terminal(args, columns=80) as t:`` starts agentd with
stderr on a pty of that size (stdin /dev/null, stdout a pipe, as in
``agentd … > answer.txt`` or a shell's command substitution), reads both as
they come, and always reaps it. ``await t.wait_for("text")`` waits (no
sleeping) until the terminal showed it; ``await t.wait_exit()`` returns the
exit code once everything written was read. ``t.screen`` is what the
terminal received (CRLF as LF), ``t.out`` the answer on stdout.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import signal
import struct
import subprocess
import termios
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio

from tests.support.agentd_proc import REPO, agentd_cmd

#: SGR sequences (colours) a terminal line may hold; every other control is a defect.
SGR = re.compile(r"\x1b\[[0-9;]*m")


@dataclass
class OnTerminal:
    """A running agentd whose stderr is a terminal."""

    proc: trio.Process
    raw: bytearray = field(default_factory=bytearray)
    stdout: bytearray = field(default_factory=bytearray)
    closed: bool = False
    _changed: trio.Event = field(default_factory=trio.Event)

    @property
    def screen(self) -> str:
        """Everything the terminal received, CRLF as LF."""
        return self.raw.decode(errors="replace").replace("\r\n", "\n")

    @property
    def plain(self) -> str:
        """The screen without its colours."""
        return SGR.sub("", self.screen)

    @property
    def lines(self) -> list[str]:
        """The screen's non-empty lines, without colours."""
        return [line for line in self.plain.split("\n") if line]

    @property
    def out(self) -> str:
        return self.stdout.decode(errors="replace")

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, text: str, *, timeout: float = 30) -> None:
        """Wait until the terminal showed ``text`` (colours aside)."""
        with trio.fail_after(timeout):
            while text not in self.plain:
                if self.closed:
                    raise AssertionError(f"agentd's terminal closed before {text!r}:\n{self.plain}")
                await self._changed.wait()

    async def wait_exit(self, timeout: float = 60) -> int:
        """The exit code, once everything agentd wrote on the terminal was read."""
        with trio.fail_after(timeout):
            code = await self.proc.wait()
            while not self.closed:
                await self._changed.wait()
        return code

    def signal(self, sig: int = signal.SIGTERM) -> None:
        self.proc.send_signal(sig)


@asynccontextmanager
async def on_a_terminal(
    args: Sequence[str], *, env: dict[str, str] | None = None, columns: int = 100, rows: int = 40
) -> AsyncIterator[OnTerminal]:
    """Start agentd with stderr on a ``columns`` × ``rows`` pseudo-terminal (``TERM=xterm``, colours allowed)."""
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, columns, 0, 0))
    full_env = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "COLUMNS")}
    full_env.update({"TERM": "xterm", **(env or {})})
    try:
        proc = await trio.lowlevel.open_process(
            agentd_cmd(*args),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=slave,
            env=full_env,
            cwd=str(REPO),
        )
    finally:
        os.close(slave)
    t = OnTerminal(proc)
    terminal = trio.lowlevel.FdStream(master)

    async def read_terminal() -> None:
        try:
            while data := await terminal.receive_some(65536):
                t.raw += data
                t._wake()
        except (
            trio.BrokenResourceError,
            OSError,
        ) as exc:  # EIO: every holder of the pty's other end closed it
            cause = exc.__cause__ if isinstance(exc, trio.BrokenResourceError) else exc
            if not isinstance(cause, OSError) or cause.errno != errno.EIO:
                raise
        finally:
            t.closed = True
            t._wake()

    async def read_stdout() -> None:
        assert proc.stdout is not None
        while data := await proc.stdout.receive_some(65536):
            t.stdout += data

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(read_terminal)
            nursery.start_soon(read_stdout)
            try:
                yield t
            finally:
                if proc.returncode is None:
                    proc.kill()
                with trio.CancelScope(shield=True), trio.move_on_after(10):
                    await proc.wait()
                    while not t.closed:
                        await t._changed.wait()
                nursery.cancel_scope.cancel()
    finally:
        await terminal.aclose()

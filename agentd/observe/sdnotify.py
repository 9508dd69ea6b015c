"""The service manager's notification protocol (systemd's ``sd_notify``), without libsystemd.

Under a unit with ``Type=notify`` systemd sets ``NOTIFY_SOCKET`` to a unix
datagram socket: an absolute path, or ``@name`` for a name in the abstract
namespace. A notification is one datagram of newline-separated ``VAR=VALUE``
assignments. With ``WatchdogSec=`` it also sets ``WATCHDOG_USEC`` (the
timeout) and ``WATCHDOG_PID`` (the process meant to ping).

What agentd sends, and when (:class:`Notifier`):

- ``READY=1`` the first time the reactor finds agentd ready: the moment
  ``/readyz`` first answers 200 (required servers connected, declared
  subscriptions established). ``systemctl start`` returns then.
- ``STATUS=…`` on every flip of readiness (``ready``, ``not ready: REASON``),
  at the drain and at exit: what ``systemctl status`` shows.
- ``STOPPING=1`` when the drain starts (the first SIGTERM/SIGINT), or at exit
  if agentd ends on its own.
- ``WATCHDOG=1`` every half ``WATCHDOG_USEC`` (systemd's advice), and only
  after a probe sent through the reactor's channel was answered within that
  interval, as ``/healthz`` does: a ping proves the reactor turns, not merely
  that a timer fired. A missed probe sends nothing (systemd then acts on its
  ``WatchdogSec``) and writes ``watchdog.missed``. The timer is armed only
  when the watchdog was asked for: without it agentd makes no wake-ups.

The variables are removed from agentd's environment when read, so children
(servers, agents, a nested agentd) never notify in agentd's name. A send never
blocks the reactor: the socket is non-blocking, and a message the socket
cannot take is lost and reported once per cause (``sdnotify.failed``).
Outside systemd (no ``NOTIFY_SOCKET``) every method is a no-op.
"""

from __future__ import annotations

import errno
import os
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Protocol

import trio

from agentd.core.durations import ascii_int
from agentd.core.redact import redact

__all__ = [
    "STATUS_MAX",
    "WATCHDOG_FRACTION",
    "Notifier",
    "parse_address",
]

WATCHDOG_FRACTION = 0.5
"""Ping at this fraction of ``WATCHDOG_USEC``: systemd's advice (half the
timeout), which leaves one missed interval of slack before it acts."""

STATUS_MAX = 512
"""Longest ``STATUS=`` text sent (characters): a readiness reason names at
most five URIs, and ``systemctl status`` shows one line anyway."""

_VARIABLES = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")


class _Telemetry(Protocol):
    def emit(self, event: str, /, **fields: object) -> None: ...


def parse_address(value: str) -> str:
    """The socket address ``NOTIFY_SOCKET`` names.

    Args:
        value: an absolute path, or ``@name`` for the abstract namespace.

    Returns:
        The address for ``sendto`` (abstract names start with a NUL byte).

    Raises:
        ValueError: neither form (e.g. ``vsock:…``, which agentd does not speak).
    """
    if value.startswith("/"):
        return value
    if value.startswith("@") and len(value) > 1:
        return "\0" + value[1:]
    raise ValueError(f"NOTIFY_SOCKET={value!r} is not an absolute path or an @abstract name")


class Notifier:
    """Sends agentd's life cycle to the service manager.

    Args:
        address: the socket address (:func:`parse_address`); None disables
            every send.
        watchdog_interval: seconds between ``WATCHDOG=1`` pings; None when
            the watchdog is off.
        telemetry: where send failures and missed pings are reported.
    """

    def __init__(
        self, address: str | None, *, watchdog_interval: float | None = None, telemetry: _Telemetry
    ) -> None:
        self.address = address
        self.watchdog_interval = watchdog_interval if address is not None else None
        self._telemetry = telemetry
        self._sock: socket.socket | None = None
        self._ready_sent = False
        self._stopping_sent = False
        self._failures: set[str] = set()
        self._watchdog_scope = trio.CancelScope()
        if address is not None:
            # Datagrams, never blocking; close-on-exec so no exec'd child holds it.
            self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._sock.setblocking(False)

    @classmethod
    def from_environ(
        cls, env: MutableMapping[str, str], *, telemetry: _Telemetry, pid: int | None = None
    ) -> Notifier:
        """Read (and remove) ``NOTIFY_SOCKET``, ``WATCHDOG_USEC`` and ``WATCHDOG_PID`` from ``env``.

        A malformed value is reported (``sdnotify.unsupported``) and that
        part stays off; agentd runs either way. The watchdog is on only when
        ``WATCHDOG_USEC`` is a positive integer and ``WATCHDOG_PID``, if set,
        is this process.
        """
        raw = {name: env.pop(name, None) for name in _VARIABLES}
        address: str | None = None
        if raw["NOTIFY_SOCKET"]:
            try:
                address = parse_address(raw["NOTIFY_SOCKET"])
            except ValueError as exc:
                telemetry.emit("sdnotify.unsupported", variable="NOTIFY_SOCKET", error=str(exc))
        interval: float | None = None
        usec = raw["WATCHDOG_USEC"]
        if address is not None and usec is not None:
            watchdog_pid = raw["WATCHDOG_PID"]
            try:
                micros = ascii_int(usec)  # never isdigit()/int(): "²" passes one and fails the other
            except ValueError:
                micros = 0
            if micros == 0:
                # Ignored with a warning, not refused: the service manager sets it, never
                # the user, and systemd's own sd_watchdog_enabled() reports a malformed
                # value as an error the daemon runs on without a watchdog. Refusing to
                # start would turn a variable agentd cannot use into an outage.
                telemetry.emit(
                    "sdnotify.unsupported",
                    variable="WATCHDOG_USEC",
                    error=f"WATCHDOG_USEC={usec!r} is not a positive number of microseconds in ASCII "
                    "digits; no watchdog pings (systemd sets it from WatchdogSec=)",
                )
            elif watchdog_pid is None or watchdog_pid == str(os.getpid() if pid is None else pid):
                interval = micros / 1e6 * WATCHDOG_FRACTION
        notifier = cls(address, watchdog_interval=interval, telemetry=telemetry)
        if address is not None:
            telemetry.emit("sdnotify.enabled", socket=raw["NOTIFY_SOCKET"], watchdog_s=interval)
        return notifier

    @property
    def enabled(self) -> bool:
        """True when agentd runs under a service manager that listens."""
        return self._sock is not None

    def notify(self, *assignments: str) -> bool:
        """Send one datagram of ``VAR=VALUE`` lines; True if the socket took it. Never blocks or raises."""
        if self._sock is None or self.address is None:
            return False
        try:
            self._sock.sendto("\n".join(assignments).encode(), self.address)
        except OSError as exc:
            cause = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            if cause not in self._failures:  # once per cause: a gone manager must not flood stderr
                self._failures.add(cause)
                self._telemetry.emit(
                    "sdnotify.failed", sent=assignments[0].partition("=")[0], error=f"{cause}: {exc}"
                )
            return False
        return True

    def _status(self, text: str) -> str:
        return "STATUS=" + redact(" ".join(text.split()))[:STATUS_MAX]

    # -- the reactor's hooks (synchronous, never blocking) -----------------------

    def readiness(self, ready: bool, reason: str) -> None:
        """The ``/readyz`` answer flipped: ``READY=1`` the first time it is ready, a status line always."""
        if self._stopping_sent:
            return  # the drain said it all
        if ready and not self._ready_sent:
            self._ready_sent = self.notify("READY=1", self._status("ready"))
        elif ready:
            self.notify(self._status("ready"))
        else:
            self.notify(self._status(f"not ready: {reason}"))

    def draining(self) -> None:
        """The drain started: ``STOPPING=1``."""
        if not self._stopping_sent:
            self._stopping_sent = True
            self.notify("STOPPING=1", self._status("draining: finishing running turns"))

    def stopped(self, code: int) -> None:
        """The run ended with exit code ``code``: ``STOPPING=1`` if the drain did not send it.

        The last call: the pings stop and the socket is closed.
        """
        self._watchdog_scope.cancel()
        if not self._stopping_sent:
            self._stopping_sent = True
            self.notify("STOPPING=1", self._status(f"stopping: exit code {code}"))
        else:
            self.notify(self._status(f"stopping: exit code {code}"))
        self.close()

    # -- the watchdog ----------------------------------------------------------------

    async def watchdog(self, probe: Callable[[], Awaitable[bool]]) -> None:
        """Ping ``WATCHDOG=1`` once per interval, each after ``probe()`` answered within it.

        One timer per interval: at each tick the probe is sent and given
        until the next tick; an answer pings at once, no answer writes
        ``watchdog.missed`` and pings nothing. Pings go on through the drain
        (a reactor stuck while draining is caught too) and stop at
        :meth:`stopped`, when the reactor no longer turns by design.
        """
        interval = self.watchdog_interval
        if interval is None:
            return
        with self._watchdog_scope:
            tick = trio.current_time()
            while True:
                deadline = tick + interval
                answered = False
                with trio.move_on_at(deadline):
                    answered = await probe()
                if answered:
                    self.notify("WATCHDOG=1")
                else:
                    self._telemetry.emit(
                        "watchdog.missed",
                        interval_s=interval,
                        reason="the reactor did not answer a probe within the interval; no ping sent",
                    )
                await trio.sleep_until(deadline)
                tick = deadline

    def close(self) -> None:
        """Close the socket (sends after this do nothing)."""
        if self._sock is not None:
            self._sock.close()
            self._sock = None

"""agentd.observe.sdnotify: addresses, the environment, the messages in order, and the watchdog's timer in virtual time.

The protocol end to end (the real command, a socket the test listens on) is
in ``tests/packaging/test_systemd.py``.
"""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from agentd.observe.sdnotify import STATUS_MAX, Notifier, parse_address


class Recorded:
    """Telemetry that keeps every event."""

    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    def emit(self, event: str, /, **fields: Any) -> None:
        self.events.append((event, fields))

    def named(self, name: str) -> list[dict[str, Any]]:
        return [f for e, f in self.events if e == name]


class Listener:
    """A bound datagram socket: the service manager's end."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.sock.setblocking(False)

    def drain(self) -> list[str]:
        out = []
        while True:
            try:
                out.append(self.sock.recv(65536).decode())
            except BlockingIOError:
                return out


@pytest.fixture
def listener(tmp_path: Path):
    lst = Listener(tmp_path / "notify")
    yield lst
    lst.sock.close()


@pytest.fixture(autouse=True)
def _close_notifiers(monkeypatch):
    """Close every notifier a test made (agentd closes its own at exit, in stopped())."""
    made: list[Notifier] = []
    original = Notifier.__init__

    def init(self: Notifier, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(Notifier, "__init__", init)
    yield
    for n in made:
        n.close()


# --- addresses and the environment ------------------------------------------------------


def test_parse_address_path_and_abstract():
    assert parse_address("/run/user/1000/systemd/notify") == "/run/user/1000/systemd/notify"
    assert parse_address("@/org/freedesktop/systemd1/notify/123") == "\0/org/freedesktop/systemd1/notify/123"


@pytest.mark.parametrize("value", ["vsock:2:1234", "relative/path", "@", ""])
def test_parse_address_refuses_what_agentd_does_not_speak(value):
    with pytest.raises(ValueError, match="not an absolute path or an @abstract name"):
        parse_address(value)


def test_from_environ_removes_the_variables_so_children_never_inherit_them(listener, tmp_path):
    env = {
        "NOTIFY_SOCKET": str(tmp_path / "notify"),
        "WATCHDOG_USEC": "30000000",
        "WATCHDOG_PID": "42",
        "X": "1",
    }
    telemetry = Recorded()
    n = Notifier.from_environ(env, telemetry=telemetry, pid=42)
    assert env == {"X": "1"}
    assert n.enabled
    assert n.watchdog_interval == 15.0  # half of WatchdogSec=30s
    assert telemetry.named("sdnotify.enabled") == [{"socket": str(tmp_path / "notify"), "watchdog_s": 15.0}]


def test_watchdog_meant_for_another_process_is_off(listener, tmp_path):
    env = {"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}
    n = Notifier.from_environ(env, telemetry=Recorded(), pid=42)
    assert n.enabled
    assert n.watchdog_interval is None


@pytest.mark.parametrize("usec", ["0", "-5", "30s", ""])
def test_a_bad_watchdog_usec_is_reported_and_off(listener, tmp_path, usec):
    telemetry = Recorded()
    n = Notifier.from_environ(
        {"NOTIFY_SOCKET": str(tmp_path / "notify"), "WATCHDOG_USEC": usec}, telemetry=telemetry
    )
    assert n.watchdog_interval is None
    (event,) = telemetry.named("sdnotify.unsupported")
    assert event["variable"] == "WATCHDOG_USEC"
    assert repr(usec) in event["error"]


def test_no_socket_means_nothing_at_all():
    telemetry = Recorded()
    env = {"WATCHDOG_USEC": "1000000"}
    n = Notifier.from_environ(env, telemetry=telemetry)
    assert env == {}
    assert not n.enabled
    assert n.watchdog_interval is None  # nothing to ping: no timer
    assert n.notify("READY=1") is False
    n.readiness(True, "ok")
    n.draining()
    n.stopped(0)
    assert telemetry.events == []


def test_an_unsupported_socket_is_reported_and_agentd_runs_without():
    telemetry = Recorded()
    n = Notifier.from_environ({"NOTIFY_SOCKET": "vsock:2:99"}, telemetry=telemetry)
    assert not n.enabled
    assert telemetry.named("sdnotify.unsupported")[0]["variable"] == "NOTIFY_SOCKET"


# --- the messages -------------------------------------------------------------------


def test_life_cycle_messages_in_order(listener, tmp_path):
    n = Notifier(str(tmp_path / "notify"), telemetry=Recorded())
    n.readiness(False, "required server 'memo' is starting")
    n.readiness(True, "ok")
    n.readiness(False, "subscriptions not established: memo:memo://notes")
    n.readiness(True, "ok")  # ready again: a status line, never a second READY=1
    n.draining()
    n.readiness(False, "draining")  # the drain already said so
    n.draining()
    n.stopped(0)
    assert listener.drain() == [
        "STATUS=not ready: required server 'memo' is starting",
        "READY=1\nSTATUS=ready",
        "STATUS=not ready: subscriptions not established: memo:memo://notes",
        "STATUS=ready",
        "STOPPING=1\nSTATUS=draining: finishing running turns",
        "STATUS=stopping: exit code 0",
    ]


def test_stopping_is_sent_at_exit_when_no_drain_sent_it(listener, tmp_path):
    n = Notifier(str(tmp_path / "notify"), telemetry=Recorded())
    n.readiness(True, "ok")
    n.stopped(6)
    assert listener.drain() == ["READY=1\nSTATUS=ready", "STOPPING=1\nSTATUS=stopping: exit code 6"]


def test_status_is_one_redacted_bounded_line(listener, tmp_path):
    n = Notifier(str(tmp_path / "notify"), telemetry=Recorded())
    n.readiness(
        False, "subscriptions not established:\nweb:https://bob:hunter2-secret@example.org/feed " + "x" * 2000
    )
    (message,) = listener.drain()
    assert "\n" not in message
    assert "hunter2-secret" not in message
    assert len(message) == len("STATUS=") + STATUS_MAX


def test_abstract_namespace_socket(tmp_path):
    name = f"agentd-unit-{tmp_path.name}"
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind("\0" + name)
    try:
        n = Notifier.from_environ({"NOTIFY_SOCKET": "@" + name}, telemetry=Recorded())
        assert n.notify("READY=1")
        assert sock.recv(100) == b"READY=1"
    finally:
        sock.close()


def test_a_missing_socket_fails_quietly_once_per_cause(tmp_path):
    telemetry = Recorded()
    n = Notifier(str(tmp_path / "gone"), telemetry=telemetry)
    for _ in range(5):
        assert n.notify("WATCHDOG=1") is False
    (failed,) = telemetry.named("sdnotify.failed")
    assert failed["sent"] == "WATCHDOG"
    assert failed["error"].startswith("ENOENT")


def test_a_full_socket_never_blocks(listener, tmp_path):
    telemetry = Recorded()
    n = Notifier(str(tmp_path / "notify"), telemetry=telemetry)
    sent = 0
    while n.notify("STATUS=" + "x" * 4096):  # nobody reads: the queue fills, then sends fail
        sent += 1
        assert sent < 100_000
    assert telemetry.named("sdnotify.failed")[0]["error"].startswith("EAGAIN")


# --- the watchdog, in virtual time ----------------------------------------------------------


class Pings(Notifier):
    """A notifier that records when each message would have been sent (virtual time)."""

    def __init__(self, interval: float) -> None:
        super().__init__("/nonexistent", watchdog_interval=interval, telemetry=Recorded())
        self.sent: list[tuple[float, str]] = []

    def notify(self, *assignments: str) -> bool:
        self.sent.append((trio.current_time(), "\n".join(assignments)))
        return True


async def test_watchdog_pings_each_interval_after_the_probe_answers(autojump_clock: trio.testing.MockClock):
    n = Pings(interval=15.0)
    probes: list[float] = []

    async def probe() -> bool:
        probes.append(trio.current_time())
        await trio.sleep(0.25)  # the reactor takes its time to answer
        return True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(n.watchdog, probe)
        await trio.sleep(46)
        n.stopped(0)  # the run ended: the pings stop and the task returns
    start = probes[0]
    assert [t - start for t in probes] == [0.0, 15.0, 30.0, 45.0]
    pings = [t - start for t, m in n.sent if m == "WATCHDOG=1"]
    assert pings == [0.25, 15.25, 30.25, 45.25]


async def test_no_ping_while_the_reactor_does_not_answer(autojump_clock: trio.testing.MockClock):
    n = Pings(interval=10.0)
    stuck = True
    answered = trio.Event()

    async def probe() -> bool:
        while stuck:
            await answered.wait()
        return True

    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(n.watchdog, probe)
        await trio.sleep(35)  # three intervals end unanswered
        assert [m for _t, m in n.sent] == []
        missed = n._telemetry.named("watchdog.missed")  # type: ignore[attr-defined]
        assert len(missed) == 3
        assert missed[0]["interval_s"] == 10.0
        stuck = False
        answered.set()  # the probe sent at 30 s is answered at 35 s, inside its interval
        await trio.sleep(10)
        n.stopped(0)
    assert [(t - start, m) for t, m in n.sent if m == "WATCHDOG=1"] == [
        (35.0, "WATCHDOG=1"),
        (40.0, "WATCHDOG=1"),
    ]


async def test_no_watchdog_no_timer(autojump_clock: trio.testing.MockClock):
    n = Pings(interval=10.0)
    n.watchdog_interval = None

    async def probe() -> bool:
        raise AssertionError("never probed")

    with trio.fail_after(0.001):  # returns at once: no timer armed
        await n.watchdog(probe)

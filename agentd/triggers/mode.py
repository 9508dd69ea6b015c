"""The four drivers: once, loop, reactive, schedule, as exit predicates.

One reactor, one inner loop; a driver only decides (rfcs/0013,
rfcs/0032):

* what to do at start (:meth:`Driver.on_start` → actions),
* what to do when a root ends (:meth:`Driver.on_root_terminal` →
  :data:`RootDisposition`),
* whether the process should exit now (:meth:`Driver.exit_predicate`).

Drivers never block and never do I/O; the reactor fills a read-only
:class:`SupervisorView` before each call and carries out what comes back.
Interval/backoff arithmetic for ``loop`` is recorded in RFC 0012.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Final, Literal, Protocol, TypeAlias

from agentd.core.exitcodes import ExitCode, TerminalStatus, code_for_status
from agentd.triggers.router import Mode
from agentd.triggers.timer import CronSource, IntervalSource, validate_cron

SessionMode = Literal["fresh", "warm"]
"""Loop re-entry: a fresh root per shift, or the same warm root session."""

IDLE_BACKOFF_BASE: Final = 1.0
"""First wait after an idle shift: long enough not to spin, short enough to feel live."""
IDLE_BACKOFF_CAP_DEFAULT: Final = 60.0
"""Longest idle wait when ``--interval 0``: an idle work-until-done loop checks in once a minute."""


# --------------------------------------------------------------------------- decisions


@dataclass(frozen=True, slots=True)
class Done:
    """Stop touching this root; the exit predicate decides about the process."""


@dataclass(frozen=True, slots=True)
class ReEnterAfter:
    """Run the next shift ``delay`` seconds from now (fresh or warm: :meth:`Loop.reentry`)."""

    delay: float


@dataclass(frozen=True, slots=True)
class Quiesce:
    """Nothing to do now; the router or a clock fire starts the next work."""


@dataclass(frozen=True, slots=True)
class Restart:
    """The root crashed: ask the restart governor; if it allows, restart the root."""


RootDisposition: TypeAlias = Done | ReEnterAfter | Quiesce | Restart


@dataclass(frozen=True, slots=True)
class SpawnRoot:
    """Start a fresh root subagent with the configured instruction."""


@dataclass(frozen=True, slots=True)
class ContinueRoot:
    """Give the warm root session its next turn (loop ``--session warm``)."""


@dataclass(frozen=True, slots=True)
class FireCoalesced:
    """A clock fire arrived while a root ran; it is pending (log it, do nothing)."""

    pending: bool = True


Action: TypeAlias = SpawnRoot | ContinueRoot | FireCoalesced


@dataclass(frozen=True, slots=True)
class SupervisorView:
    """What the reactor knows, read-only, at the moment it consults a driver.

    Attributes:
        draining: SIGTERM (or equivalent) received; no new work is started.
        drain_timed_out: the drain grace period passed with work still running,
            or a second signal asked to stop at once.
        children_running: live subagent processes (mid-turn or waiting warm).
        turns_running: subagents mid-turn (their model and tool calls in flight).
        warm_sessions: live warm sessions (busy or waiting between turns).
        budget_spent: which tree-wide ceiling is spent, if any.
        deadline_reached: the global wall-clock deadline passed.
        fatal_infra: the model provider is unusable (auth, unreachable after retries).
        required_server_failed: a server marked required could not (re)connect.
        breaker_open: the restart governor gave up.
        root_status: ``once``: the root's terminal status, once it ended.
        root_partial: ``once``: the root left a usable partial result.
    """

    draining: bool = False
    drain_timed_out: bool = False
    children_running: int = 0
    turns_running: int = 0
    warm_sessions: int = 0
    budget_spent: Literal["tokens", "steps", "usd"] | None = None
    deadline_reached: bool = False
    fatal_infra: bool = False
    required_server_failed: bool = False
    breaker_open: bool = False
    root_status: TerminalStatus | None = None
    root_partial: bool = False

    @property
    def nothing_running(self) -> bool:
        """No child mid-turn and no warm session left."""
        return self.children_running == 0 and self.warm_sessions == 0


class Driver(Protocol):
    """The per-mode decisions the reactor asks for (see the module docstring)."""

    mode: Mode

    def on_start(self, view: SupervisorView) -> list[Action]:
        """Actions to take once servers are connected, before the first wait."""
        ...

    def on_root_terminal(
        self, view: SupervisorView, status: TerminalStatus, *, idle: bool, now: float
    ) -> RootDisposition:
        """A root ended with ``status``; ``idle`` = its shift changed nothing (rfcs/0280).

        A shift is idle when no tool call that may change state succeeded
        (only reads: tools annotated ``readOnlyHint: true``) and it carried
        no routed delivery; what it answered does not matter.
        """
        ...

    def exit_predicate(self, view: SupervisorView) -> ExitCode | None:
        """The exit code if the process should end now, else None."""
        ...


# --------------------------------------------------------------------------- backoff


class IdleBackoff:
    """Exponential wait for idle shifts: ``base``, 2×, 4× … up to ``cap``; reset on real work."""

    __slots__ = ("_cur", "base", "cap")

    def __init__(self, base: float = IDLE_BACKOFF_BASE, cap: float = IDLE_BACKOFF_CAP_DEFAULT) -> None:
        if not (base > 0) or not (cap >= base):
            raise ValueError(f"idle backoff: base {base!r}, cap {cap!r} are not valid: need 0 < base <= cap")
        self.base = base
        self.cap = cap
        self._cur = base

    def next(self) -> float:
        """The wait for this idle shift; doubles the next one (up to ``cap``)."""
        d = self._cur
        self._cur = min(self._cur * 2, self.cap)
        return d

    def reset(self) -> None:
        """Real work happened: the next idle wait starts from ``base`` again."""
        self._cur = self.base

    @property
    def current(self) -> float:
        """What :meth:`next` would return (for telemetry)."""
        return self._cur


# --------------------------------------------------------------------------- exit predicates


def _hard_exit(view: SupervisorView) -> ExitCode | None:
    """What ends the process whatever the mode, in precedence order.

    A drain that timed out (or a second signal) stops at once; a required
    server that failed ends the run; an unusable model provider ends it once
    no turn is in flight (a running turn may still finish with its answer);
    the global deadline ends it.
    """
    if view.drain_timed_out:
        return ExitCode.DRAIN_TIMEOUT
    if view.required_server_failed:
        return ExitCode.REQUIRED_SERVER
    if view.fatal_infra and view.turns_running == 0:
        return ExitCode.FATAL_INFRA
    if view.deadline_reached:
        return ExitCode.DEADLINE
    return None


def _common_exit(view: SupervisorView, *, breaker: bool) -> ExitCode | None:
    """Exit conditions every daemon driver shares, in precedence order."""
    hard = _hard_exit(view)
    if hard is not None:
        return hard
    if view.draining:
        if view.nothing_running:
            return ExitCode.OK
        return None  # let the drain finish
    if view.fatal_infra:
        return ExitCode.FATAL_INFRA  # a daemon does not wait for its other turns
    if breaker and view.breaker_open:
        return ExitCode.CRASHED
    if view.budget_spent is not None and view.nothing_running:
        return ExitCode.BUDGET  # after warm sessions drained
    return None


# --------------------------------------------------------------------------- drivers


class Once:
    """One root; the process exits with the code its terminal status maps to."""

    mode: Mode = "once"

    def on_start(self, view: SupervisorView) -> list[Action]:
        return [] if view.draining else [SpawnRoot()]

    def on_root_terminal(
        self, view: SupervisorView, status: TerminalStatus, *, idle: bool, now: float
    ) -> RootDisposition:
        return Done()  # never restart a one-shot root, crashed included

    def exit_predicate(self, view: SupervisorView) -> ExitCode | None:
        hard = _hard_exit(view)
        if hard is not None:
            return hard
        if view.root_status is not None:
            return code_for_status(view.root_status, partial=view.root_partial)
        if view.fatal_infra:
            return ExitCode.FATAL_INFRA
        if view.draining and view.nothing_running:
            return ExitCode.OK  # drained before the root ever started
        return None


class Loop:
    """Shift after shift; see RFC 0012 for how ``interval`` and idle backoff combine.

    After a shift that did real work (a state-changing tool call succeeded,
    or it carried a routed delivery: rfcs/0280) the next starts after
    ``interval`` (0 = at once) and the backoff resets. After an idle shift
    (only reads and talk, ``stalled`` or ``refused``) the wait is
    ``max(interval, backoff.next())``; the backoff caps at ``interval``, or
    60 s when the interval is 0, so with ``interval > 0`` idle shifts keep
    the configured cadence and with ``interval == 0`` they back off 1, 2, 4
    … 60 s.
    """

    mode: Mode = "loop"

    def __init__(self, interval: float, session: SessionMode, backoff: IdleBackoff | None = None) -> None:
        if not (interval >= 0):
            raise ValueError(f"interval: {interval!r} is not valid: give seconds >= 0 (0 = re-enter at once)")
        self.interval = interval
        self.session: SessionMode = session
        self.backoff = backoff or IdleBackoff(
            IDLE_BACKOFF_BASE, max(IDLE_BACKOFF_BASE, interval) if interval > 0 else IDLE_BACKOFF_CAP_DEFAULT
        )

    def on_start(self, view: SupervisorView) -> list[Action]:
        return [] if view.draining else [SpawnRoot()]

    def on_delivery(self) -> None:
        """A routed change or a notice was delivered into the warm root: real work, so the idle backoff resets."""
        self.backoff.reset()

    def reentry(self) -> Action:
        """What a due :class:`ReEnterAfter` turns into."""
        return ContinueRoot() if self.session == "warm" else SpawnRoot()

    def on_root_terminal(
        self, view: SupervisorView, status: TerminalStatus, *, idle: bool, now: float
    ) -> RootDisposition:
        if status == "crashed":
            return Restart()
        if view.draining:
            return Quiesce()
        if status in ("exhausted_steps", "exhausted_tokens", "deadline") and (
            view.budget_spent is not None or view.deadline_reached
        ):
            return Quiesce()  # the exit predicate fires
        if status in ("stalled", "refused") or idle:  # a shift that ran out of steps reading is idle too
            return ReEnterAfter(max(self.interval, self.backoff.next()))
        self.backoff.reset()  # real work: state changed, or a delivery was handled
        return ReEnterAfter(self.interval)

    def exit_predicate(self, view: SupervisorView) -> ExitCode | None:
        return _common_exit(view, breaker=True)


class Reactive:
    """No root at start; the router spawns and continues on events. Never exits on its own."""

    mode: Mode = "reactive"

    def on_start(self, view: SupervisorView) -> list[Action]:
        return []

    def on_root_terminal(
        self, view: SupervisorView, status: TerminalStatus, *, idle: bool, now: float
    ) -> RootDisposition:
        # Spawn-route roots: the router owns their lifecycle (on_spawn_done);
        # the reactor records crashes with the governor for the breaker.
        return Quiesce()

    def exit_predicate(self, view: SupervisorView) -> ExitCode | None:
        return _common_exit(view, breaker=True)


class Schedule:
    """A root per clock fire; a fire while a root runs is coalesced (at most one pending)."""

    mode: Mode = "schedule"

    def __init__(self, source: IntervalSource | CronSource) -> None:
        self.source = source
        self.root_running = False
        self.pending_fire = False
        self.coalesced_fires = 0

    def on_start(self, view: SupervisorView) -> list[Action]:
        return []  # the first fire starts the first root

    def on_fire(self, view: SupervisorView, now: float) -> list[Action]:
        """A clock fire is due (the reactor already called ``source.fire``)."""
        if view.draining or view.budget_spent is not None or view.deadline_reached:
            return []
        if self.root_running:
            self.pending_fire = True
            self.coalesced_fires += 1
            return [FireCoalesced()]
        self.root_running = True
        return [SpawnRoot()]

    def on_root_terminal(
        self, view: SupervisorView, status: TerminalStatus, *, idle: bool, now: float
    ) -> RootDisposition:
        if status == "crashed" and not view.draining:
            return Restart()  # root_running stays true: the restart is this fire's retry
        self.root_running = False
        if (
            self.pending_fire
            and not view.draining
            and view.budget_spent is None
            and not view.deadline_reached
        ):
            self.pending_fire = False
            self.root_running = True
            return ReEnterAfter(0.0)
        self.pending_fire = False
        return Quiesce()

    def on_restart_refused(self) -> None:
        """The governor refused a restart: the fire is over."""
        self.root_running = False

    def exit_predicate(self, view: SupervisorView) -> ExitCode | None:
        return _common_exit(view, breaker=True)


AnyDriver: TypeAlias = Once | Loop | Reactive | Schedule


def make_driver(
    mode: Mode,
    *,
    interval: float | None = None,
    cron: str | None = None,
    session: SessionMode | None = None,
    now_mono: float = 0.0,
    now_wall: datetime | None = None,
) -> AnyDriver:
    """Build the driver for ``mode``.

    Args:
        mode: once | loop | reactive | schedule.
        interval: loop: seconds between shifts (default 0); schedule: the period.
        cron: schedule: a 5-field UTC expression (instead of ``interval``).
        session: loop: fresh | warm (default warm for interval 0, else fresh).
        now_mono: schedule: current monotonic time (first interval fire is now).
        now_wall: schedule with cron: current aware wall time.

    Raises:
        ValueError: an option that does not fit the mode; the message names it and the fix.
    """
    if mode == "once":
        _reject(mode, interval=interval, cron=cron, session=session)
        return Once()
    if mode == "reactive":
        _reject(mode, interval=interval, cron=cron, session=session)
        return Reactive()
    if mode == "loop":
        _reject(mode, cron=cron)
        iv = 0.0 if interval is None else interval
        return Loop(iv, session or ("warm" if iv == 0 else "fresh"))
    if mode == "schedule":
        _reject(mode, session=session)
        if (interval is None) == (cron is None):
            raise ValueError("--mode schedule needs exactly one of --interval SECONDS or --cron '<5 fields>'")
        if cron is not None:
            problem = validate_cron(cron)
            if problem is not None:
                raise ValueError(problem)
            if now_wall is None:
                raise ValueError("make_driver: now_wall is required with cron")
            return Schedule(CronSource(cron, now_mono=now_mono, now_wall=now_wall))
        assert interval is not None
        if not (interval > 0):
            raise ValueError(f"--interval {interval!r} is not valid with --mode schedule: give seconds > 0")
        return Schedule(IntervalSource(interval, start=now_mono))
    raise ValueError(f"--mode {mode!r} is not valid: use once, loop, reactive or schedule")


def _reject(mode: Mode, **given: object) -> None:
    for name, value in given.items():
        if value is not None:
            raise ValueError(f"--{name} {value!r} does not apply to --mode {mode}: remove it")

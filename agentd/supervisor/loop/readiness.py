"""Whether agentd is ready: the servers' and subscriptions' states, the zygote, and the start gate.

:class:`Readiness` owns where each upstream server and each subscription
stands, why the agent zygote is degraded, and the start gate: the run opens
(roots start, clocks fire, routes deliver) once every required server has
connected (rfcs/0135); until then ``reactor.waiting`` is written once. It
answers ``/readyz`` (:meth:`Readiness.ready`) and tells the health notifier
and the telemetry when that answer flips (:meth:`Readiness.report`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from agentd.events import ServerState
from agentd.observe.telemetry import Telemetry
from agentd.supervisor.loop.runstatus import RunStatus
from agentd.supervisor.routing.subscriptions import Subscriptions


@dataclass(slots=True, eq=False)
class Readiness:
    """Server, subscription and zygote states; the start gate; the ``/readyz`` answer and its flips."""

    required: frozenset[str]
    """Servers that must connect before the run opens (and be connected for ``/readyz``)."""
    subscriptions: Subscriptions
    """What is declared and what resolves to nothing (``/readyz`` waits for both)."""
    status: RunStatus
    telemetry: Telemetry
    notify: Callable[[bool, str], None]
    """The health notifier: the ``/readyz`` answer at start and on every flip."""
    server_states: dict[str, ServerState] = field(default_factory=dict, init=False)
    server_errors: dict[str, str | None] = field(default_factory=dict, init=False)
    """Why each server last failed or dropped (None once it connects): the exit summary names them."""
    subscription_states: dict[tuple[str, str], str] = field(default_factory=dict, init=False)
    _unestablished: set[tuple[str, str]] = field(default_factory=set, init=False)
    """The pairs of :attr:`subscription_states` not ``established`` (kept as states change)."""
    _missing: set[tuple[str, str]] = field(default_factory=set, init=False)
    """Declared pairs with no state at all, as of :attr:`_missing_version`."""
    _missing_version: int = field(default=-1, init=False)
    zygote_problem: str | None = field(default=None, init=False)
    """Why the agent zygote is unusable (None: ready, or not used)."""
    started: bool = field(default=False, init=False)
    """The driver's ``on_start`` ran (once every required server had connected, rfcs/0135)."""
    open: bool = field(default=False, init=False)
    """Every required server has connected once: roots, clock fires and deliveries may start."""
    _waiting_reported: bool = field(default=False, init=False)
    _reported: bool | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self.open = not self.required

    def on_server_states(self, states: Mapping[str, ServerState]) -> None:
        """Where the servers' first connection attempts left them (as the reactor starts)."""
        self.server_states.update(states)

    def on_server_state(self, server: str, state: ServerState, error: str | None = None) -> None:
        self.server_states[server] = state
        self.server_errors[server] = None if state is ServerState.CONNECTED else error

    def on_subscription_state(self, server: str, uri: str, state: str) -> None:
        pair = (server, uri)
        self.subscription_states[pair] = state
        if state == "established":
            self._unestablished.discard(pair)
        else:
            self._unestablished.add(pair)
        self._missing.discard(pair)

    def forget(self, pairs: Iterable[tuple[str, str]]) -> None:
        """These pairs are no longer declared: their states no longer count."""
        for pair in pairs:
            self.subscription_states.pop(pair, None)
            self._unestablished.discard(pair)

    def _declared_missing(self) -> set[tuple[str, str]]:
        """Declared pairs with no state (recomputed only when the declared pairs changed)."""
        if self._missing_version != self.subscriptions.version:
            self._missing_version = self.subscriptions.version
            states = self.subscription_states
            self._missing = {pair for pair in self.subscriptions.pairs if pair not in states}
        return self._missing

    def _is_ready(self) -> bool:
        """:meth:`ready`'s answer without its reason: O(servers), whatever the number of subscriptions."""
        return (
            self.status.running
            and all(self.server_states.get(n) is ServerState.CONNECTED for n in self.required)
            and not self._unestablished
            and not self._declared_missing()
            and not self.subscriptions.unresolved_required
            and self.zygote_problem is None
        )

    def on_zygote(self, problem: str | None) -> None:
        self.zygote_problem = problem

    def open_gate(self) -> bool:
        """True once, when every required server has connected: the driver's ``on_start`` runs now.

        While one is missing, ``reactor.waiting`` names them (once).
        """
        if self.started:
            return False
        states = self.server_states
        waiting = sorted(n for n in self.required if states.get(n) is not ServerState.CONNECTED)
        if waiting:
            if not self._waiting_reported:
                self._waiting_reported = True
                self.telemetry.emit(
                    "reactor.waiting",
                    servers=waiting,
                    note="required servers are not connected: no agent starts until they are",
                )
            return False
        self.open = self.started = True
        return True

    def ready(self) -> tuple[bool, str]:
        """Readiness: required servers connected, declared subscriptions established, not draining."""
        if not self.status.running:
            return False, "draining"
        for name in self.required:
            if self.server_states.get(name) is not ServerState.CONNECTED:
                return (
                    False,
                    f"required server {name!r} is {self.server_states.get(name, ServerState.STARTING).value}",
                )
        # A declared subscription with no state at all was released or never
        # made: the daemon would be deaf to it, so it is not ready either.
        bad = self._unestablished | self._declared_missing()
        if bad:
            named = ", ".join(f"{s}:{u}" for s, u in heapq.nsmallest(5, bad))
            more = f" and {len(bad) - 5} more" if len(bad) > 5 else ""
            return False, f"subscriptions not established: {named}{more}"
        if self.subscriptions.unresolved_required:
            pattern = sorted(self.subscriptions.unresolved_required)[0]
            return (
                False,
                f"declared subscription {pattern!r} resolves to nothing: {self.subscriptions.unresolved[pattern]}",
            )
        if self.zygote_problem is not None:
            return (
                False,
                f"agent zygote degraded ({self.zygote_problem}); agents start as fresh interpreters "
                "until its replacement is ready",
            )
        return True, "ok"

    def report(self) -> None:
        """Write ``ready.changed`` when the ``/readyz`` answer flips (not on every reason change).

        Written by the reactor after it applied the event, so whoever reads it
        (an operator, a test) knows the next ``/readyz`` gives that answer.
        """
        if self._is_ready() == self._reported:
            return  # the common case, in O(1): called after every event
        ready, reason = self.ready()
        if ready != self._reported:
            self._reported = ready
            self.telemetry.emit("ready.changed", ready=ready, reason=reason)
            self.notify(ready, reason)

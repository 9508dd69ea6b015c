"""Whether agentd is ready: the servers' and subscriptions' states, the zygote, and the start gate.

:class:`Readiness` owns where each upstream server and each subscription
stands, why the agent zygote is degraded, and the start gate: the run opens
(roots start, clocks fire, routes deliver) once every required server has
connected (rfcs/0135); until then ``reactor.waiting`` is written once. It
answers ``/readyz`` (:meth:`Readiness.ready`) and tells the health notifier
and the telemetry when that answer flips (:meth:`Readiness.report`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

from agentd.events import ServerState
from agentd.supervisor.runstatus import RunStatus
from agentd.supervisor.subscriptions import Subscriptions
from agentd.telemetry import Telemetry


class Readiness:
    """Server, subscription and zygote states; the start gate; the ``/readyz`` answer and its flips."""

    __slots__ = (
        "_notify",
        "_reported",
        "_required",
        "_status",
        "_subscriptions",
        "_telemetry",
        "_waiting_reported",
        "open",
        "server_states",
        "started",
        "subscription_states",
        "zygote_problem",
    )

    def __init__(
        self,
        required: frozenset[str],
        subscriptions: Subscriptions,
        status: RunStatus,
        telemetry: Telemetry,
        notify: Callable[[bool, str], None],
    ) -> None:
        self._required = required
        self._subscriptions = subscriptions
        self._status = status
        self._telemetry = telemetry
        self._notify = notify
        self.server_states: dict[str, ServerState] = {}
        self.subscription_states: dict[tuple[str, str], str] = {}
        self.zygote_problem: str | None = None
        """Why the agent zygote is unusable (None: ready, or not used)."""
        self.started = False
        """The driver's ``on_start`` ran (once every required server had connected, rfcs/0135)."""
        self.open = not required
        """Every required server has connected once: roots, clock fires and deliveries may start."""
        self._waiting_reported = False
        self._reported: bool | None = None

    def on_server_states(self, states: Mapping[str, ServerState]) -> None:
        """Where the servers' first connection attempts left them (as the reactor starts)."""
        self.server_states.update(states)

    def on_server_state(self, server: str, state: ServerState) -> None:
        self.server_states[server] = state

    def on_subscription_state(self, server: str, uri: str, state: str) -> None:
        self.subscription_states[(server, uri)] = state

    def forget(self, pairs: Iterable[tuple[str, str]]) -> None:
        """These pairs are no longer declared: their states no longer count."""
        for pair in pairs:
            self.subscription_states.pop(pair, None)

    def on_zygote(self, problem: str | None) -> None:
        self.zygote_problem = problem

    def open_gate(self) -> bool:
        """True once, when every required server has connected: the driver's ``on_start`` runs now.

        While one is missing, ``reactor.waiting`` names them (once).
        """
        if self.started:
            return False
        states = self.server_states
        waiting = sorted(n for n in self._required if states.get(n) is not ServerState.CONNECTED)
        if waiting:
            if not self._waiting_reported:
                self._waiting_reported = True
                self._telemetry.emit(
                    "reactor.waiting",
                    servers=waiting,
                    note="required servers are not connected: no agent starts until they are",
                )
            return False
        self.open = self.started = True
        return True

    def ready(self) -> tuple[bool, str]:
        """Readiness: required servers connected, declared subscriptions established, not draining."""
        if not self._status.running:
            return False, "draining"
        for name in self._required:
            if self.server_states.get(name) is not ServerState.CONNECTED:
                return (
                    False,
                    f"required server {name!r} is {self.server_states.get(name, ServerState.STARTING).value}",
                )
        bad = [f"{s}:{u}" for (s, u), st in self.subscription_states.items() if st != "established"]
        # A declared subscription with no state at all was released or never
        # made: the daemon would be deaf to it, so it is not ready either.
        bad += [f"{s}:{u}" for (s, u) in self._subscriptions.pairs if (s, u) not in self.subscription_states]
        if bad:
            return False, f"subscriptions not established: {', '.join(sorted(bad)[:5])}"
        if self._subscriptions.unresolved_required:
            pattern = sorted(self._subscriptions.unresolved_required)[0]
            return (
                False,
                f"declared subscription {pattern!r} resolves to nothing: {self._subscriptions.unresolved[pattern]}",
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
        ready, reason = self.ready()
        if ready != self._reported:
            self._reported = ready
            self._telemetry.emit("ready.changed", ready=ready, reason=reason)
            self._notify(ready, reason)

"""The ``block`` overflow's backpressure: pause the servers feeding a full route, resume them once it has room.

:class:`Backpressure` owns which servers are paused and for which blocked
routes (rfcs/0131); the router says which routes are blocked and which
servers' events they hold, and ``pause`` (the reactor's hook) stops or
resumes reading a server's update streams.
"""

from __future__ import annotations

from collections.abc import Callable

from agentd.observe.telemetry import Telemetry
from agentd.triggers.router import Router


class Backpressure:
    """Which servers are paused for which blocked routes; :meth:`apply` after every event."""

    __slots__ = ("_blocked", "_pause", "_router", "_telemetry", "paused")

    def __init__(self, router: Router, pause: Callable[[str, bool], None], telemetry: Telemetry) -> None:
        self._router = router
        self._pause = pause
        self._telemetry = telemetry
        self.paused: dict[str, set[str]] = {}
        """Server -> the blocked routes it is paused for."""
        self._blocked: frozenset[str] = frozenset()

    def apply(self) -> None:
        """Pause the servers feeding a ``block`` route whose queue is full; resume them once it has room."""
        blocked = self._router.blocked_routes()
        if not blocked and not self._blocked:
            return  # the common case: nothing is blocked, nothing to resume
        # Every server whose events a blocked route holds is paused, including
        # one whose first event arrived after the route blocked.
        for route_id in sorted(blocked):
            for server in sorted(self._router.held_servers(route_id)):
                routes = self.paused.setdefault(server, set())
                if route_id in routes:
                    continue
                if not routes:
                    self._pause(server, True)
                    self._telemetry.emit("upstream.paused", server=server, route=route_id)
                routes.add(route_id)
        for route_id in sorted(self._blocked - blocked):
            for server in sorted(self.paused):
                routes = self.paused[server]
                routes.discard(route_id)
                if not routes:
                    del self.paused[server]
                    self._pause(server, False)
                    self._telemetry.emit("upstream.resumed", server=server, route=route_id)
        self._blocked = blocked

"""The run's counters: one typed set that ``/metrics`` and ``supervisor.exit`` both read.

Every count agentd reports about its run is incremented here and nowhere
else, so the Prometheus families (:mod:`agentd.observe.metrics`) and the totals of
the ``supervisor.exit`` line (and a JSON result's usage) can never disagree:
they are two views of one object. The app creates it first (like the
reactor's channel) and passes it to what counts: the reactor (routing,
usage, turns, restarts), the router (drops, through its ``on_drop``) and the
upstream connections (updates nobody subscribed to).

The schema is closed: the fields are slots, incremented only through the
methods below, and :meth:`RunCounters.totals` names the ``supervisor.exit``
keys. Pure: no trio, no I/O; the reactor's thread alone writes it.

Two counts belong to the writers that lose lines and are read from them by
both views: ``telemetry_dropped`` (:attr:`agentd.observe.telemetry.Telemetry.dropped`)
and ``outputs_lost`` (:attr:`agentd.observe.output.LineWriter.dropped`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from agentd.core.limits import MODEL_LIMITS, ModelLimit
from agentd.observe.activity import Activity

__all__ = ["RunCounters"]


@dataclass(slots=True, eq=False)
class RunCounters:
    """Counts of one run; they only grow (see the module docstring)."""

    routed: Counter[str] = field(default_factory=Counter)
    """Changes a route took, by route label (a declared route's id; ``self`` or ``watch`` for
    the routes sessions make: :func:`agentd.triggers.router.metric_route`)."""
    coalesced: Counter[str] = field(default_factory=Counter)
    """Changes merged into one already queued for the same URI, by route label."""
    dropped: Counter[str] = field(default_factory=Counter)
    """Queued changes lost, by the router's reason (``coalesce_cap``, ``drop_oldest``, ``route_removed``, ...)."""
    dropped_by_route: Counter[str] = field(default_factory=Counter)
    """Changes a full queue lost, by route id (the status view; ``dropped`` has them by reason)."""
    unrouted: int = 0
    """Changes no route took, and updates of URIs nobody subscribed to."""
    server_restarts: Counter[str] = field(default_factory=Counter)
    """Reconnects of upstream MCP servers, by server name."""
    agent_restarts: int = 0
    """Restarts of the root agent the restart governor allowed."""
    model_calls: int = 0
    """Model calls of the whole tree."""
    turns: int = 0
    """Turns ended by any agent."""
    input_tokens: int = 0
    """Model input tokens of the whole tree."""
    output_tokens: int = 0
    """Model output tokens of the whole tree."""
    cached_input_tokens: int = 0
    """The part of the input tokens read from a prompt cache."""
    cache_creation_input_tokens: int = 0
    """The part of the input tokens written to a prompt cache."""
    unpriced_calls: int = 0
    """Model calls whose price is unknown."""
    limit_refusals: Counter[ModelLimit] = field(default_factory=Counter)
    """A model's requests refused by a cap on what it may create, by cap (rfcs/0265)."""
    subscribe_failures: Counter[str] = field(default_factory=Counter)
    """Subscriptions a model asked for (``subscribe``, ``watch_start``) that the server refused
    or did not confirm, by server (a bundled server's cap on its watchers among them)."""
    activity: Activity = field(default_factory=Activity)
    """The last routing decisions and per-minute counts of the last hour (bounded; the status view)."""

    # -- increments -------------------------------------------------------------------

    def route(self, route_id: str) -> None:
        """A route took a change."""
        self.routed[route_id] += 1

    def coalesce(self, route_id: str) -> None:
        """A change merged into one already queued on ``route_id``."""
        self.coalesced[route_id] += 1

    def drop(self, reason: str, n: int = 1) -> None:
        """``n`` queued changes were lost for ``reason`` (the router's ``on_drop``)."""
        self.dropped[reason] += n

    def drop_on(self, route_id: str) -> None:
        """A full queue of ``route_id`` lost a change (counted by reason through :meth:`drop`)."""
        self.dropped_by_route[route_id] += 1

    def unroute(self) -> None:
        """A change no route took (or an update nobody subscribed to)."""
        self.unrouted += 1

    def server_restart(self, server: str) -> None:
        """``server``'s connection is restarting."""
        self.server_restarts[server] += 1

    def agent_restart(self) -> None:
        """The root agent is restarted."""
        self.agent_restarts += 1

    def model_call(
        self,
        *,
        input_tokens: int,
        output_tokens: int,
        cached_input_tokens: int,
        cache_creation_input_tokens: int,
        priced: bool,
    ) -> None:
        """One model call and its usage."""
        self.model_calls += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens
        self.cached_input_tokens += cached_input_tokens
        self.cache_creation_input_tokens += cache_creation_input_tokens
        if not priced:
            self.unpriced_calls += 1

    def turn(self) -> None:
        """An agent ended a turn."""
        self.turns += 1

    def refuse(self, limit: ModelLimit) -> None:
        """A model's request was refused by the cap ``limit``."""
        self.limit_refusals[limit] += 1

    def subscribe_failed(self, server: str) -> None:
        """``server`` refused (or did not confirm) a subscription a model asked for."""
        self.subscribe_failures[server] += 1

    # -- views --------------------------------------------------------------------------

    def dropped_by_reason(self) -> dict[str, int]:
        """Lost changes by reason, non-zero only."""
        return {reason: n for reason, n in sorted(self.dropped.items()) if n}

    def refusals_by_limit(self) -> dict[str, int]:
        """Refusals by cap, every cap listed (0 until it refuses), so a rate can be alerted on from the start."""
        return {limit: self.limit_refusals[limit] for limit in MODEL_LIMITS}

    def totals(self) -> dict[str, int]:
        """The ``counters`` of ``supervisor.exit`` (``outputs_lost`` is added by the app)."""
        return {
            "routed": self.routed.total(),
            "unrouted": self.unrouted,
            "coalesced": self.coalesced.total(),
            "dropped_events": self.dropped.total(),
            "restarts": self.agent_restarts,
            "model_calls": self.model_calls,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_input_tokens": self.cached_input_tokens,
            "cache_creation_input_tokens": self.cache_creation_input_tokens,
            "unpriced_calls": self.unpriced_calls,
            "limit_refusals": self.limit_refusals.total(),
            "subscribe_failures": self.subscribe_failures.total(),
        }

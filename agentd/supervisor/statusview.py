"""The status document (``GET /status``): what the daemon is doing now, read from what the reactor owns.

:func:`status_document` is a pure function over the reactor's own state (the
agent table, the router's routes and queues, readiness, the budget, the
run's counters and their bounded :class:`~agentd.observe.activity.Activity`), the
upstream connections, the hub's tool calls in flight and the watches. It
keeps nothing of its own (ARCHITECTURE decision 19); the schema is in
``docs/status.md`` (``"schema": "agentd.status/1"``).

What a person may see (rfcs/0336): instruction texts and tool arguments
only when the daemon runs with ``--status-show-content``; credentials never
(the whole document goes through :func:`agentd.core.redact.redact`); text from
outside (URIs, errors) stays data, escaped where it is shown.

:func:`start_health` serves it, with ``/healthz``, ``/readyz`` and ``/metrics``.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Protocol

import trio

from agentd.config import Settings, read_status_token
from agentd.core.jsonvalue import JSONObject, JSONValue
from agentd.core.redact import redact
from agentd.observe.telemetry import Telemetry
from agentd.supervisor.hub import ToolCallNow
from agentd.supervisor.loop.agents import Agent, AgentPhase, ExitedAgent
from agentd.supervisor.loop.reactor import Reactor
from agentd.triggers.router import Continue, Route, Spawn
from agentd.upstream.connection import Upstream

if TYPE_CHECKING:
    from agentd.observe.metrics import MetricsSnapshot

__all__ = ["SCHEMA", "RunFacts", "WatchView", "start_health", "status_document"]

SCHEMA = "agentd.status/1"
"""The document's schema name; a change that removes or renames a field bumps it."""

RECENT_SHOWN = 50
"""Routing decisions in the document (all that :class:`~agentd.observe.activity.Activity` keeps)."""


class WatchView(Protocol):
    """What the document reads of a watch (:class:`agentd.watches.manager.Watch`)."""

    name: str
    uri: str
    session: str

    @property
    def route_id(self) -> str: ...

    def describe(self) -> JSONObject: ...


@dataclass(frozen=True, slots=True)
class RunFacts:
    """What does not change while the daemon runs."""

    version: str
    mode: str
    model: str | None
    pid: int
    started: float
    """trio time the run started (uptime counts from it)."""
    show_content: bool
    """``--status-show-content``: instruction texts and tool arguments are shown."""


def _iso(wall: float) -> str:
    return _dt.datetime.fromtimestamp(wall, _dt.UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def status_document(
    reactor: Reactor,
    facts: RunFacts,
    *,
    upstreams: Mapping[str, Upstream],
    tools_running: Mapping[str, Sequence[ToolCallNow]],
    watches: Sequence[WatchView],
    now: float,
    wall: float,
) -> JSONObject:
    """The status document at ``now`` (trio time; ``wall`` is the same instant as epoch seconds)."""

    def at(t: float | None) -> str | None:
        return None if t is None else _iso(wall - (now - t))

    ready, reason = reactor.ready()
    counters = reactor.counters
    activity = counters.activity
    budget = reactor.budget
    doc: JSONObject = {
        "schema": SCHEMA,
        "version": facts.version,
        "mode": facts.mode,
        "model": facts.model,
        "pid": facts.pid,
        "now": _iso(wall),
        "started_at": at(facts.started),
        "uptime_s": round(now - facts.started, 3),
        "phase": reactor.status.phase.value,
        "ready": ready,
        "ready_reason": reason,
        "content_shown": facts.show_content,
        "servers": [_server(name, up, reactor) for name, up in upstreams.items()],
        "routes": [_route(r, reactor, at) for r in reactor.router.routes()],
        "agents": [
            _agent(a, tools_running.get(a.id, ()), facts.show_content, now, at) for a in reactor.agents.live()
        ],
        "finished": [_finished(a, at) for a in reactor.agents.recent()],
        "budget": {
            "steps": budget.steps,
            "max_steps": budget.max_steps,
            "tokens": budget.tokens,
            "max_tokens": budget.max_tokens,
            "cost_usd": budget.cost_usd(),
            "max_usd": budget.max_usd,
            "deadline_at": at(budget.deadline_at),
        },
        "totals": dict(counters.totals()),
        "watches": [_watch(w) for w in watches],
        "recent": [
            {"at": at(d.at), "uri": d.uri, "route": d.route, "outcome": d.outcome, "agent": d.agent}
            for d in activity.decisions()[-RECENT_SHOWN:]
        ],
        "per_minute": [
            {"minute": _iso(wall - (now - m.minute * 60)), "wakes": m.wakes, "model_calls": m.model_calls}
            for m in activity.per_minute(now)
        ],
    }
    shown: JSONObject = redact(doc)
    return shown


def _server(name: str, up: Upstream, reactor: Reactor) -> JSONObject:
    states = reactor.readiness.subscription_states
    held = up.subscriptions
    negotiated = up.negotiated
    return {
        "name": name,
        "state": up.state.value,
        "transport": negotiated.transport if negotiated is not None else _transport(up),
        "protocol_version": up.protocol_version,
        "era": negotiated.era if negotiated is not None else None,
        "subscriptions": len(held),
        "subscriptions_established": sum(
            1 for (s, _u), st in states.items() if s == name and st == "established"
        ),
        "last_error": up.last_error,
    }


def _transport(up: Upstream) -> str:
    spec = up.spec
    return "stdio" if spec.command is not None else str(getattr(spec, "transport", "http"))


def _route(route: Route, reactor: Reactor, at: object) -> JSONObject:
    assert callable(at)
    disp = route.disposition
    out: JSONObject = {
        "id": route.id,
        "kind": route.kind,
        "match": "@timer" if route.spec.timer else route.spec.match,
        "owner": route.owner,
        "queued": len(route.queue),
        "held": len(route.held),
        "routed": reactor.counters.routed[route.id],
        "coalesced": reactor.counters.coalesced[route.id],
        "dropped": reactor.counters.dropped_by_route[route.id],
        "last_wake": at(reactor.counters.activity.last_wake(route.id)),
    }
    if isinstance(disp, Spawn):
        out.update(disposition="spawn", in_flight=route.inflight, max_in_flight=disp.max_inflight)
    elif isinstance(disp, Continue):
        busy = reactor.router.session_busy(disp.session)
        out.update(disposition="continue", session=disp.session, in_flight=int(busy), max_in_flight=1)
    return out


def _agent(
    agent: Agent, calls: Sequence[ToolCallNow], show_content: bool, now: float, at: object
) -> JSONObject:
    assert callable(at)
    doing: JSONObject
    if agent.phase is AgentPhase.IDLE:
        doing = {"kind": "idle"}
    elif agent.phase is AgentPhase.EXITING:
        doing = {"kind": "exiting"}
    elif calls:
        call = calls[-1]
        doing = {"kind": "tool", "tool": call.name, "since_s": round(max(0.0, now - call.started), 3)}
        if show_content:
            arguments: JSONValue = _json(call.arguments)
            doing["arguments"] = arguments
        if len(calls) > 1:
            doing["parallel"] = len(calls)
    else:
        doing = {"kind": "model", "since_s": round(max(0.0, now - agent.turn_started_at), 3)}
    out: JSONObject = {
        "id": agent.id,
        "role": agent.role,
        "route": agent.route,
        "session": agent.session,
        "parent": agent.parent,
        "depth": agent.depth,
        "type": agent.type,
        "phase": agent.phase.value,
        "started_at": at(agent.started_at),
        "age_s": round(max(0.0, now - agent.started_at), 3),
        "woken_by": list(agent.woken_by),
        "woken_route": agent.woken_route,
        "woken_at": at(agent.woken_at),
        "turns": agent.turns,
        "steps": agent.steps,
        "tokens": agent.tokens,
        "cost_usd": "unknown" if agent.unpriced_calls else round(agent.cost_usd, 8),
        # What it and the agents it started spent (its limits count these; rfcs/0370).
        "tree": {
            "steps": agent.tree_steps,
            "tokens": agent.tree_tokens,
            "cost_usd": "unknown" if agent.tree_unpriced else round(agent.tree_usd, 8),
        },
        "subscriptions": len(agent.subscriptions),
        "doing": doing,
    }
    if show_content:
        out["instruction"] = agent.instruction
    return out


def _finished(agent: ExitedAgent, at: object) -> JSONObject:
    assert callable(at)
    return {
        "id": agent.id,
        "role": agent.role,
        "route": agent.route,
        "session": agent.session,
        "parent": agent.parent,
        "depth": agent.depth,
        "type": agent.type,
        "status": agent.status,
        "started_at": at(agent.started_at),
        "exited_at": at(agent.exited_at),
        "duration_s": round(max(0.0, agent.exited_at - agent.started_at), 3),
        "woken_by": list(agent.woken_by),
        "woken_route": agent.woken_route,
        "turns": agent.turns,
        "steps": agent.steps,
        "tokens": agent.tokens,
        "cost_usd": "unknown" if agent.cost_usd is None else round(agent.cost_usd, 8),
    }


def _watch(w: WatchView) -> JSONObject:
    described = w.describe()
    return {**described, "session": w.session, "route": w.route_id}


def _json(value: object) -> JSONValue:
    """A tool call's arguments as JSON (they came from a model: anything not JSON is shown as text)."""
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, Mapping):
        return {str(k): _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    return repr(value)


async def start_health(
    settings: Settings,
    reactor: Reactor,
    telemetry: Telemetry,
    nursery: trio.Nursery,
    snapshot: Callable[[], MetricsSnapshot],
    status: Callable[[], JSONObject],
) -> None:
    """Serve /healthz and /readyz (and /metrics, /status and the page) without ever blocking the reactor."""
    # Imported only here: a run without probes never loads the HTTP and metrics stack (rfcs/0225).
    from agentd.observe.health import StatusAccess, reactor_probe, serve_health, serve_metrics

    token = read_status_token(settings.status_token_file) if settings.status_token_file else None

    same = settings.metrics_addr is None or settings.metrics_addr == settings.health_addr
    if settings.health_addr:
        port = await nursery.start(
            partial(
                serve_health,
                settings.health_addr,
                probe=reactor_probe(reactor.send),
                ready=reactor.ready,
                snapshot=snapshot if same and settings.metrics_addr else None,
                status=status,
                status_token=token,
            )
        )
        access = StatusAccess.for_bind(settings.health_addr, token)
        telemetry.emit(
            "health.listening",
            addr=settings.health_addr,
            port=port,
            status="on" if access.enabled else "off: not loopback and no --status-token-file",
        )
    if settings.metrics_addr and not (same and settings.health_addr):
        port = await nursery.start(partial(serve_metrics, settings.metrics_addr, snapshot=snapshot))
        telemetry.emit("metrics.listening", addr=settings.metrics_addr, port=port)

"""The hub: how the supervisor answers its children's self-MCP requests.

Each child's self-MCP handler task calls :meth:`SupervisorHub.call` with
whatever tool call its model made. Only the tools the supervisor offers
(upstream tools namespaced ``server__tool``, and the self-tools) are
answered; any other name is an "unknown tool" result, whatever it looks
like: usage reports and turn ends are control frames on another channel
(:mod:`agentd.supervisor.children.channel`), never tools a model could call.

Upstream tool calls and resource reads are plain I/O on the shared upstream
connections and run in the handler's task. Self-tools that touch supervisor
state (subscribe/unsubscribe, watch routes) become a typed request
(:data:`~agentd.events.SelfToolRequest`) for the reactor, which answers
with its typed reply through a one-slot channel.

A call that succeeded and may have changed state (any tool not annotated
``readOnlyHint: true``, self-tools included) is told to the reactor as
:class:`~agentd.events.ToolChangedState` before its result goes back to the
child: the loop's idle rule reads it (rfcs/0280).
"""

from __future__ import annotations

import contextlib
import fnmatch
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TypedDict, TypeVar

import mcp_types as types
import orjson
import trio

from agentd.config import AgentDefinition
from agentd.core.errors import AgentdError, RouteError
from agentd.core.jsonvalue import JSONObject, JSONValue, loads
from agentd.events import (
    Acknowledged,
    AgentLookup,
    AgentLookupKind,
    AgentRecords,
    AgentStart,
    ReactorEvent,
    Refused,
    Reply,
    RouteAdded,
    SelfSubscribe,
    SelfUnsubscribe,
    SessionOf,
    StartSpec,
    ToolChangedState,
    Unsubscribed,
    WatchRouteAdd,
    WatchRouteRemove,
    WatchSession,
)
from agentd.observe.counters import RunCounters
from agentd.observe.telemetry import Telemetry
from agentd.observe.tracing import active as active_tracing
from agentd.selfmcp.protocol import AGENT_TOOL_NAMES, unknown_tool_text
from agentd.selfmcp.server import text_result
from agentd.supervisor.loop.subagents import AGENT_SCHEME, agent_id_of, valid_number
from agentd.supervisor.toolpolicy import ToolPolicy
from agentd.upstream.connection import Upstream
from agentd.upstream.naming import ToolNameMap
from agentd.upstream.resolve import resolve_server_for_uri, resource_listing
from agentd.watches.manager import WatchManager

R = TypeVar("R")

_OBJ: JSONObject = {"type": "object"}

#: The annotation of the self-tools that only read (rfcs/0280): their calls leave a loop shift idle.
_READ_ONLY = types.ToolAnnotations(read_only_hint=True)


def _tool(
    name: str, description: str, arg: str | None = None, annotations: types.ToolAnnotations | None = None
) -> types.Tool:
    """A self-tool that takes one string argument, ``arg``, or none."""
    schema = (
        _OBJ
        if arg is None
        else {"type": "object", "properties": {arg: {"type": "string"}}, "required": [arg]}
    )
    return types.Tool(name=name, description=description, input_schema=schema, annotations=annotations)


class ToolSpec(TypedDict):
    """One tool as the spawn payload carries it (:class:`agentd.selfmcp.protocol.ToolSpecFrame`'s fields)."""

    name: str
    description: str
    input_schema: dict[str, object]


SELF_TOOLS: list[types.Tool] = [
    types.Tool(
        name="subscribe",
        description=(
            "Wake me when an MCP resource changes. After this call, end your turn: the next change to URI "
            "arrives as a new message in this session."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "uri": {"type": "string", "description": "The resource URI to watch."},
                "server": {"type": "string", "description": "Optional server name, if several list the URI."},
            },
            "required": ["uri"],
        },
    ),
    _tool("unsubscribe", "Stop being woken for an MCP resource you subscribed to.", "uri"),
    _tool(
        "read_resource",
        "Read an MCP resource by URI. Returns parsed JSON when the body is JSON, else text.",
        "uri",
        _READ_ONLY,
    ),
    _tool(
        "list_resources",
        "List the resources and resource templates every connected MCP server offers.",
        annotations=_READ_ONLY,
    ),
    types.Tool(
        name="watch_start",
        description=(
            "Watch an MCP resource and get a short notice (a new message in this session) when it changes. "
            "The resource is re-read on every change and diffed (state resources) or its new events taken "
            "(event-log resources); each event can go through on_event, Python source run in a sandbox with "
            "`event` bound to a dict (type ADDED/MODIFIED/DELETED/CHANGED/GAP, key, old, new, changed, ...): "
            "its last expression (or what it prints) becomes the notice line, None drops the event. Changes "
            "are batched (a few seconds of quiet). After this call, end your turn. Returns "
            '{"name", "uri", "shape"}. Example: watch_start(name="todo", uri="memo://notes", '
            'on_event=\'f"{event["type"]} {event["key"]}" if event["key"] == "todo" else None\')'
        ),
        input_schema={
            "type": "object",
            "properties": {
                "name": {
                    "type": "string",
                    "description": "A short name for the watch, unique in this session.",
                },
                "uri": {"type": "string", "description": "The resource URI (see list_resources)."},
                "on_event": {
                    "type": ["string", "null"],
                    "description": "Optional Python source of the filter (text, not a function).",
                },
            },
            "required": ["name", "uri"],
        },
    ),
    _tool("watch_stop", "Stop a watch you started. Returns true if it existed.", "name"),
    _tool(
        "watch_list",
        'List this session\'s watches: [{"name", "uri", "shape", "events", "notices"}]; a watch that '
        "could not start again after a restart has restore_failed: true.",
        annotations=_READ_ONLY,
    ),
]

#: The self-tools that manage watches (answered by the WatchManager).
WATCH_TOOLS = frozenset({"watch_start", "watch_stop", "watch_list"})

#: The self-tools that start and follow agents (rfcs/0370); not offered at ``max_depth``.
AGENT_TOOLS = AGENT_TOOL_NAMES

#: Every self-tool's name (answered by agentd itself, not an upstream server).
_SELF_TOOL_NAMES = frozenset(
    {"subscribe", "unsubscribe", "read_resource", "list_resources", *WATCH_TOOLS, *AGENT_TOOLS}
)

#: Longest instruction a model may give a child (characters): a long brief, far from a context.
MAX_CHILD_INSTRUCTION_CHARS = 100_000

#: Most tool names or globs one ``agent_start`` may list.
MAX_CHILD_TOOL_PATTERNS = 64

#: Longest an ``agent_wait`` (or ``agent_start`` with ``wait``) holds the calling turn, in
#: seconds, when no deadline bounds it sooner: a waiting parent is never stuck for ever.
AGENT_WAIT_MAX = 3600.0

#: After ``agent_cancel``, how long the call waits for the child to be gone: the kill
#: ladder's SIGTERM and SIGKILL waits (2 s each) and slack.
CANCEL_WAIT = 6.0


def agent_tools(definitions: Mapping[str, AgentDefinition]) -> list[types.Tool]:
    """The agent self-tools; ``agent_start``'s description lists the defined agent types."""
    kinds = "".join(f"\n- {name}: {d.description[:300]}" for name, d in sorted(definitions.items())[:64])
    typed = (
        f" Defined agent types (pass one as type; each has its own instructions, tools and model):{kinds}"
        if kinds
        else ""
    )
    limit = {"type": "number", "exclusiveMinimum": 0}
    return [
        types.Tool(
            name="agent_start",
            description=(
                "Start another agent, in its own process, on a part of your task. It gets only the tools you "
                "have (or fewer), and what it spends counts against what you have left. Without wait it "
                "answers at once with the agent's id and URI (agent://ID) and you are woken with its result "
                "when it ends: start several, then end your turn. With wait=true the call answers with its "
                "result. Several agent_start calls in one reply run in parallel." + typed
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "instruction": {"type": "string", "description": "The task, complete in itself."},
                    "type": {"type": "string", "description": "A defined agent type (see above)."},
                    "tools": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "Only these of your tools (names or globs such as memo__*).",
                    },
                    "model": {"type": "string", "description": "One of the models this agentd names."},
                    "max_steps": {"type": "integer", "minimum": 1, "description": "Model calls it may make."},
                    "max_tokens": {"type": "integer", "minimum": 1, "description": "Tokens it may spend."},
                    "max_usd": {**limit, "description": "US dollars it may spend."},
                    "deadline_s": {**limit, "description": "Seconds it may run."},
                    "wait": {"type": "boolean", "description": "Answer with its result when it ends."},
                    "notify": {
                        "type": "boolean",
                        "description": "Wake you with its result when it ends (default true; not with wait).",
                    },
                },
                "required": ["instruction"],
            },
        ),
        types.Tool(
            name="agent_wait",
            description=(
                "Wait until agents you started have ended; answers their records (status, result, usage). "
                "At timeout_s, answers where they stand."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "ids": {
                        "anyOf": [{"type": "string"}, {"type": "array", "items": {"type": "string"}}],
                        "description": "An agent id (a3) or a list of them.",
                    },
                    "timeout_s": {**limit, "description": "Seconds to wait at most."},
                },
                "required": ["ids"],
            },
        ),
        _tool(
            "agent_cancel", "Stop an agent you started (and the agents it started); answers its record.", "id"
        ),
        _tool(
            "agent_list",
            'List the agents you started: [{"id", "status", "type", "usage", ...}], oldest first.',
            annotations=_READ_ONLY,
        ),
    ]


@dataclass(frozen=True, slots=True)
class AgentToolsConfig:
    """What the hub needs to offer and check the agent tools (rfcs/0370).

    Attributes:
        definitions: the defined agent types, by name.
        models: the model specs a child may be given (those the operator named).
        max_depth: agents at this depth are not offered the agent tools.
    """

    definitions: Mapping[str, AgentDefinition]
    models: frozenset[str]
    max_depth: int


#: The self-tools whose only effect is a later wake-up of the calling session.
#: A ``--mode once`` run ends with its root's answer: nothing can wake it
#: later, so these are not offered there.
WAKEUP_TOOLS = frozenset({"subscribe", "unsubscribe", *WATCH_TOOLS})

#: How long a self-MCP request may wait for the reactor's answer. The reactor
#: answers in microseconds; only a wedged reactor runs this out.
REACTOR_REPLY_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True, eq=False)
class ToolCallNow:
    """A tool call in flight: what the status view shows an agent doing."""

    name: str
    arguments: dict[str, object]
    started: float
    """trio time the call started."""


def policy_allows(policy: ToolPolicy, names: ToolNameMap, server: str, tool: types.Tool) -> bool:
    """Whether the global and per-server tool policy lets ``server``'s ``tool`` be used (watch filters)."""
    hint = tool.annotations.read_only_hint if tool.annotations is not None else None
    return policy.allows(
        None, names.add(server, tool.name), server=server, tool=tool.name, read_only_hint=hint
    )


class SupervisorHub:
    """Implements :class:`agentd.selfmcp.server.Hub` over the upstreams and the reactor channel.

    Args:
        events: the reactor's channel.
        upstreams: server name -> its connection.
        telemetry: ``tool.call`` events.
        watches: the watch manager; without it the watch tools report an error.
        offer_wakeups: offer the :data:`WAKEUP_TOOLS` (False for a once run,
            whose root nothing can wake later).
        counters: the run's counter set (a ``subscribe`` the server refused is
            counted there); a private one if not given.
        names: the provider-safe tool names agents see (a private map if not
            given); shared with the watch filters' :func:`policy_allows`.
    """

    def __init__(
        self,
        *,
        events: trio.MemorySendChannel[ReactorEvent],
        upstreams: Mapping[str, Upstream],
        telemetry: Telemetry,
        watches: WatchManager | None = None,
        policy: ToolPolicy | None = None,
        offer_wakeups: bool = True,
        counters: RunCounters | None = None,
        names: ToolNameMap | None = None,
        agents: AgentToolsConfig | None = None,
    ) -> None:
        self._events = events
        self._counters = counters if counters is not None else RunCounters()
        self._self_tools = [t for t in SELF_TOOLS if offer_wakeups or t.name not in WAKEUP_TOOLS]
        self._agents_config = agents
        if agents is not None:
            self._self_tools += agent_tools(agents.definitions)
        self.upstreams = upstreams
        self._telemetry = telemetry
        self.names = names if names is not None else ToolNameMap()
        self._policy = policy or ToolPolicy()
        self._routes: dict[str, str] = {}
        """Agent -> its route, for agents whose route narrows the tools (see :meth:`bind`)."""
        self._scopes: dict[str, tuple[frozenset[str] | None, bool]] = {}
        """Agent -> the tools a started agent was scoped to, and whether it may start agents (rfcs/0370)."""
        self._all: list[tuple[types.Tool, str | None, str | None]] | None = None
        self._catalogs: dict[
            tuple[str | None, frozenset[str] | None, bool],
            tuple[list[types.Tool], frozenset[str], list[ToolSpec] | None],
        ] = {}
        self._read_only: frozenset[str] = frozenset()
        """Names (as the model calls them) of the tools annotated ``readOnlyHint: true``."""
        self._tools_key: tuple[int, ...] = ()
        self.watches = watches
        self._running: dict[str, list[ToolCallNow]] = {}
        """Agent -> the tool calls it has in flight (the status view's "doing now")."""

    def running(self) -> dict[str, list[ToolCallNow]]:
        """The tool calls in flight, by agent (a copy: the status view reads it between calls)."""
        return {agent: list(calls) for agent, calls in self._running.items() if calls}

    # -- tools ----------------------------------------------------------------------

    def bind(
        self, agent: str, route: str | None, *, scope: frozenset[str] | None = None, depth: int = 0
    ) -> None:
        """Record ``agent``'s route before it starts (its catalog follows the route's tool policy).

        ``scope``: a started agent's tools (a subset of its parent's); ``depth``:
        at ``max_depth`` the agent tools are not offered (rfcs/0370).
        """
        key = self._policy.scoped(route)
        if key is not None:
            self._routes[agent] = key
        config = self._agents_config
        starts = config is not None and depth < config.max_depth
        if scope is not None or not starts:
            self._scopes[agent] = (scope, starts)

    def policy_allows(self, server: str, tool: types.Tool) -> bool:
        """Whether the global and per-server tool policy lets ``server``'s ``tool`` be used (watch filters)."""
        return policy_allows(self._policy, self.names, server, tool)

    def release(self, agent: str) -> None:
        """Forget ``agent`` (its channel closed)."""
        self._routes.pop(agent, None)
        self._scopes.pop(agent, None)

    def _catalog(self, agent: str) -> tuple[list[types.Tool], frozenset[str], list[ToolSpec] | None]:
        # Rebuilt only when an upstream's tool list changed (a connection came
        # up late, reconnected, or announced tools/list_changed): every
        # connection bumps its ``tools_version`` when it refreshes its tools.
        key = tuple(getattr(up, "tools_version", 0) for up in self.upstreams.values())
        if self._all is None or key != self._tools_key:
            every: list[tuple[types.Tool, str | None, str | None]] = [
                (t, None, None) for t in self._self_tools
            ]
            for server, up in self.upstreams.items():
                for tool in getattr(up, "tools", None) or []:
                    name = self.names.add(server, tool.name)
                    every.append((tool.model_copy(update={"name": name}), server, tool.name))
            self._all, self._tools_key, self._catalogs = every, key, {}
            # A tool without the annotation may change state (MCP's default): conservative.
            self._read_only = frozenset(
                t.name
                for t, _, _ in every
                if t.annotations is not None and t.annotations.read_only_hint is True
            )
        key = self._catalog_key(agent)
        found = self._catalogs.get(key)
        if found is None:
            route, scope, starts = key
            tools = [
                t
                for t, server, own in self._all
                if self._policy.allows(
                    route,
                    t.name,
                    server=server,
                    tool=own,
                    read_only_hint=t.annotations.read_only_hint if t.annotations is not None else None,
                )
                and (scope is None or t.name in scope)
                and (starts or t.name not in AGENT_TOOLS)
            ]
            found = self._catalogs[key] = (tools, frozenset(t.name for t in tools), None)
        return found

    def _catalog_key(self, agent: str) -> tuple[str | None, frozenset[str] | None, bool]:
        scope, starts = self._scopes.get(agent, (None, self._agents_config is not None))
        return self._routes.get(agent), scope, starts

    def tools_for(self, agent: str) -> list[types.Tool]:
        """The tools ``agent`` is offered (its route's policy applied)."""
        return self._catalog(agent)[0]

    def read_only(self, name: str) -> bool:
        """Whether the tool the model calls ``name`` says it only reads (``readOnlyHint: true``)."""
        return name in self._read_only

    def offers(self, agent: str, name: str) -> bool:
        """Whether ``name`` is a tool ``agent`` may call (an upstream tool or a self-tool)."""
        return name in self._catalog(agent)[1]

    def tool_specs(self, agent: str = "") -> list[ToolSpec]:
        """The tools as the spawn payload carries them (for the model's tool list); cached per catalog."""
        tools, names, specs = self._catalog(agent)
        if specs is None:
            specs = [
                {
                    "name": t.name,
                    "description": t.description or "",
                    "input_schema": dict(t.input_schema or _OBJ),
                }
                for t in tools
            ]
            self._catalogs[self._catalog_key(agent)] = (tools, names, specs)
        return specs

    # -- calls ----------------------------------------------------------------------

    async def ask_reactor(self, request: Callable[[Reply[R]], ReactorEvent]) -> R:
        """Send ``request(reply)`` to the reactor and wait (at most :data:`REACTOR_REPLY_TIMEOUT`) for its answer."""
        send, recv = trio.open_memory_channel[R](1)
        await self._events.send(request(Reply(send)))
        with trio.fail_after(REACTOR_REPLY_TIMEOUT):
            return await recv.receive()

    async def call(self, agent: str, name: str, arguments: dict[str, object]) -> types.CallToolResult:
        """Run one tool call for ``agent``; the step lines (stream-json, the human log format) frame it."""
        server, tool = self._display_name(name)
        self._telemetry.step(
            "tool_call", agent=agent, name=name, server=server, tool=tool, arguments=arguments
        )
        started = time.monotonic()
        tracing = active_tracing()
        now = ToolCallNow(name, arguments, trio.current_time())
        running = self._running.setdefault(agent, [])
        running.append(now)
        try:
            if tracing is None:
                result = await self._call(agent, name, arguments)
            else:
                with tracing.tool_span(agent, name, arguments) as span:
                    result = await self._call(agent, name, arguments)
                    tracing.tool_result(span, is_error=bool(result.is_error), text=_text_of(result))
        finally:
            running.remove(now)
            if not running and self._running.get(agent) is running:
                del self._running[agent]
        if not result.is_error and not self.read_only(name):
            # Before the result goes back: the child's turn end can only follow this fact.
            await self._events.send(ToolChangedState(agent, name))
        self._telemetry.step(
            "tool_result",
            agent=agent,
            name=name,
            is_error=bool(result.is_error),
            content=result.content,
            latency_ms=round((time.monotonic() - started) * 1000, 3),
        )
        return result

    def _display_name(self, name: str) -> tuple[str | None, str]:
        """The server and tool a person reads for ``name`` (``agentd`` for self-tools; None: unknown)."""
        if name in _SELF_TOOL_NAMES:
            return "agentd", name
        try:
            return self.names.resolve(name)
        except KeyError:
            return None, name

    async def _call(self, agent: str, name: str, arguments: dict[str, object]) -> types.CallToolResult:
        if not self.offers(agent, name):
            # Checked here as well as in the child: a child's code is not trusted either.
            return text_result(
                unknown_tool_text(name, [t.name for t in self.tools_for(agent)]), is_error=True
            )
        started = time.monotonic()
        server, tool = "agentd", name
        error: str | None = None
        try:
            if name in ("subscribe", "unsubscribe", "read_resource", "list_resources"):
                result = await self._self_tool(agent, name, arguments)
            elif name in AGENT_TOOLS:
                result = await self._agent_tool(agent, name, arguments)
            elif name in WATCH_TOOLS:
                result = await self._watch_tool(agent, name, arguments)
            else:
                try:
                    server, tool = self.names.resolve(name)
                except KeyError:
                    return text_result(
                        unknown_tool_text(name, [t.name for t in self.tools_for(agent)]), is_error=True
                    )
                up = self.upstreams.get(server)
                if up is None:
                    return text_result(f"server {server!r} is not configured", is_error=True)
                result = await up.call_tool(tool, arguments)
            if result.is_error:
                error = "tool returned an error"
            return result
        except AgentdError as exc:
            error = str(exc)
            return text_result(error, is_error=True)
        finally:
            elapsed = time.monotonic() - started
            self._telemetry.observe("tool_call", elapsed, server=server)
            self._telemetry.emit(
                "tool.call",
                agent=agent,
                server=server,
                tool=tool,
                latency_ms=round(elapsed * 1000, 3),
                error=error,
            )

    async def _self_tool(self, agent: str, name: str, args: Mapping[str, object]) -> types.CallToolResult:
        if name == "list_resources":
            return text_result(orjson.dumps(await self.list_resources()).decode())
        uri = args.get("uri")
        if not isinstance(uri, str) or not uri:
            return text_result(f"{name}: 'uri' must be a non-empty string, got {uri!r}", is_error=True)
        if uri.startswith(AGENT_SCHEME):
            return await self._own_resource(agent, name, uri)
        if name == "read_resource":
            value = await self.read_resource(uri)
            text = value if isinstance(value, str) else orjson.dumps(value).decode()
            return text_result(text)
        server = args.get("server") or self.server_for(uri)
        if server is not None and (not isinstance(server, str) or server not in self.upstreams):
            known = ", ".join(sorted(self.upstreams)) or "none"
            return text_result(
                f"{name}: 'server' must be the name of a configured server ({known}), got {server!r:.200}",
                is_error=True,
            )
        if name == "subscribe":
            if server is None:
                return text_result(
                    f"subscribe: no connected server offers {uri!r}; call list_resources", is_error=True
                )
            subscribed: Acknowledged | Refused = await self.ask_reactor(
                lambda reply: SelfSubscribe(agent, uri, server, reply)
            )
            if isinstance(subscribed, Refused):
                return text_result(subscribed.error, is_error=True)
            try:
                await self.upstreams[server].subscribe(uri)
            except AgentdError as exc:
                await self.ask_reactor(lambda reply: SelfUnsubscribe(agent, uri, None, reply))
                # A bundled server's cap on its watchers (rfcs/0265) arrives here, as any refusal does.
                self._counters.subscribe_failed(server)
                self._telemetry.emit(
                    "self.subscribe_failed", agent=agent, server=server, uri=uri, error=str(exc)
                )
                return text_result(f"subscribe {uri!r} failed: {exc}", is_error=True)
            return text_result(f"subscribed to {uri} on {server}; end your turn, a change wakes this session")
        answer: Unsubscribed = await self.ask_reactor(
            lambda reply: SelfUnsubscribe(agent, uri, server, reply)
        )
        # The reactor's subscriptions component decided: a declared subscription, another
        # route or a watch keeps the upstream subscription (releasing it would make the
        # daemon deaf to the URI).
        if server is not None and answer.existed and not answer.needed:
            with contextlib.suppress(AgentdError):
                await self.upstreams[server].unsubscribe(uri)
        return text_result("unsubscribed" if answer.existed else f"you were not subscribed to {uri!r}")

    # -- agents (rfcs/0370) -------------------------------------------------------------

    async def _own_resource(self, agent: str, name: str, uri: str) -> types.CallToolResult:
        """``read_resource`` / ``subscribe`` / ``unsubscribe`` of ``agent://ID``: agentd's own resources."""
        agent_id = agent_id_of(uri)
        if agent_id is None:
            return text_result(
                f"{name}: {uri[:200]!r} is no agent URI: agentd's agents are agent://ID", is_error=True
            )
        if name == "unsubscribe":
            answer: Unsubscribed = await self.ask_reactor(
                lambda reply: SelfUnsubscribe(agent, uri, None, reply)
            )
            return text_result("unsubscribed" if answer.existed else f"you were not subscribed to {uri!r}")
        kind: AgentLookupKind = "subscribe" if name == "subscribe" else "read"
        found = await self._lookup(agent, kind, (agent_id,))
        if isinstance(found, Refused):
            return text_result(f"{name}: {found.error}", is_error=True)
        if kind == "subscribe":
            return text_result(f"subscribed to {uri}; end your turn, its end wakes this session")
        return text_result(orjson.dumps(found.records[0]).decode())

    async def _lookup(
        self, agent: str, kind: AgentLookupKind, ids: tuple[str, ...], wake: trio.Event | None = None
    ) -> AgentRecords | Refused:
        answer: AgentRecords | Refused = await self.ask_reactor(
            lambda reply: AgentLookup(agent, kind, ids, reply, wake)
        )
        return answer

    async def _agent_tool(self, agent: str, name: str, args: Mapping[str, object]) -> types.CallToolResult:
        if self._agents_config is None:
            return text_result(f"{name}: agent tools are not available in this agentd", is_error=True)
        if name == "agent_list":
            listed = await self._lookup(agent, "list", ())
            if isinstance(listed, Refused):
                return text_result(f"agent_list: {listed.error}", is_error=True)
            return text_result(orjson.dumps(list(listed.records)).decode())
        if name == "agent_start":
            return await self._agent_start(agent, args)
        if name == "agent_cancel":
            unknown = sorted(set(args) - {"id"})
            target = args.get("id")
            if unknown or not isinstance(target, str) or not target:
                return text_result(
                    f"agent_cancel takes one argument, id (an agent id such as 'a3'), got {_shown(args)}",
                    is_error=True,
                )
            cancelled = await self._lookup(agent, "cancel", (target,))
            if isinstance(cancelled, Refused):
                return text_result(f"agent_cancel: {cancelled.error}", is_error=True)
            if cancelled.running:
                cancelled = await self._wait(agent, (target,), CANCEL_WAIT)
            return _records_result(cancelled)
        # agent_wait
        unknown = sorted(set(args) - {"ids", "timeout_s"})
        ids = args.get("ids")
        if isinstance(ids, str):
            ids = [ids]
        if (
            unknown
            or not isinstance(ids, list)
            or not ids
            or len(ids) > MAX_CHILD_TOOL_PATTERNS
            or not all(isinstance(i, str) and 0 < len(i) <= 64 for i in ids)
        ):
            return text_result(
                f"agent_wait takes ids (an agent id, or a list of at most {MAX_CHILD_TOOL_PATTERNS}) and "
                f"optionally timeout_s (seconds), got {_shown(args)}",
                is_error=True,
            )
        timeout = args.get("timeout_s", AGENT_WAIT_MAX)
        if not valid_number(timeout, whole=False):
            return text_result(
                f"agent_wait: timeout_s must be a number of seconds > 0, got {timeout!r:.60}", is_error=True
            )
        assert isinstance(timeout, int | float)
        waited = await self._wait(
            agent, tuple(dict.fromkeys(str(i) for i in ids)), min(float(timeout), AGENT_WAIT_MAX)
        )
        if isinstance(waited, Refused):
            return text_result(f"agent_wait: {waited.error}", is_error=True)
        return _records_result(waited)

    async def _wait(self, agent: str, ids: tuple[str, ...], timeout: float) -> AgentRecords | Refused:
        """Until every agent in ``ids`` ended, or ``timeout``: their records (the last as they stand)."""
        deadline = trio.current_time() + timeout
        while True:
            wake = trio.Event()
            answer = await self._lookup(agent, "wait", ids, wake)
            if isinstance(answer, Refused) or not answer.running or trio.current_time() >= deadline:
                return answer
            with trio.move_on_at(deadline):
                await wake.wait()

    async def _agent_start(self, agent: str, args: Mapping[str, object]) -> types.CallToolResult:
        spec = self._start_spec(agent, args)
        if isinstance(spec, str):
            return text_result(f"agent_start: {spec}", is_error=True)
        wait = args.get("wait") is True
        started: AgentRecords | Refused = await self.ask_reactor(lambda reply: AgentStart(agent, spec, reply))
        if isinstance(started, Refused):
            return text_result(started.error, is_error=True)
        record = started.records[0]
        child = str(record["id"])
        if wait:
            bound = spec.deadline_s + CANCEL_WAIT if spec.deadline_s is not None else AGENT_WAIT_MAX
            return _records_result(await self._wait(agent, (child,), min(bound, AGENT_WAIT_MAX)), one=True)
        how = (
            "end your turn: you are woken with its result when it ends (or call agent_wait)"
            if spec.notify
            else "call agent_wait or read_resource on its uri for its result"
        )
        return text_result(orjson.dumps({**record, "next": how}).decode())

    def _start_spec(self, agent: str, args: Mapping[str, object]) -> StartSpec | str:
        """The model's ``agent_start`` arguments, checked for shape and against what ``agent`` holds."""
        config = self._agents_config
        assert config is not None
        allowed = {
            "instruction",
            "type",
            "tools",
            "model",
            "max_steps",
            "max_tokens",
            "max_usd",
            "deadline_s",
            "wait",
            "notify",
        }
        unknown = sorted(set(args) - allowed)
        if unknown:
            return (
                f"unknown argument(s) {', '.join(repr(u[:64]) for u in unknown[:8])}; it takes "
                f"{', '.join(sorted(allowed))} (depth, ids and scope are agentd's to set)"
            )
        instruction = args.get("instruction")
        if not isinstance(instruction, str) or not instruction.strip():
            return f"instruction must be a non-empty string, got {_shown({'instruction': instruction})}"
        if len(instruction) > MAX_CHILD_INSTRUCTION_CHARS:
            return (
                f"instruction has {len(instruction)} characters, more than {MAX_CHILD_INSTRUCTION_CHARS}; "
                "give the agent a shorter brief and let it read what it needs"
            )
        for flag in ("wait", "notify"):
            if flag in args and not isinstance(args[flag], bool):
                return f"{flag} must be true or false, got {args[flag]!r:.60}"
        kind = args.get("type")
        definition: AgentDefinition | None = None
        if kind is not None:
            definition = config.definitions.get(kind) if isinstance(kind, str) else None
            if definition is None:
                known = ", ".join(sorted(config.definitions)[:64]) or "none are defined"
                return f"type {kind!r:.80} is no defined agent type; the types are: {known}"
        limits: dict[str, float | None] = {}
        asked: set[str] = set()
        for key, whole, default in (
            ("max_steps", True, definition.max_steps if definition else None),
            ("max_tokens", True, definition.max_tokens if definition else None),
            ("max_usd", False, definition.max_usd if definition else None),
            ("deadline_s", False, definition.deadline if definition else None),
        ):
            value = args.get(key)
            if value is None:
                limits[key] = default
                continue
            if not valid_number(value, whole=whole):
                kind_of = "a whole number" if whole else "a number"
                return f"{key} must be {kind_of} > 0, got {value!r:.60}"
            assert isinstance(value, int | float)
            if default is not None and value > default:
                return f"{key} = {value:g} is more than the type {kind!r} allows ({default:g}); ask for at most that"
            limits[key] = value
            asked.add(key)
        model = args.get("model")
        if model is not None:
            if not isinstance(model, str) or model not in config.models:
                named = ", ".join(sorted(config.models)) or "none"
                return f"model {model!r:.120} is not one this agentd names; the models are: {named}"
        elif definition is not None:
            model = definition.model
        scope = self._child_scope(agent, definition, args.get("tools"))
        if isinstance(scope, str):
            return scope
        wait = args.get("wait") is True
        return StartSpec(
            instruction=instruction,
            type=definition.name if definition is not None else None,
            scope=scope,
            model=model,
            system=definition.system if definition is not None else None,
            max_steps=_whole(limits["max_steps"]),
            max_tokens=_whole(limits["max_tokens"]),
            max_usd=limits["max_usd"],
            deadline_s=limits["deadline_s"],
            notify=not wait and args.get("notify", True) is True,
            asked=frozenset(asked),
        )

    def _child_scope(
        self, agent: str, definition: AgentDefinition | None, asked: object
    ) -> frozenset[str] | str:
        """The tools a child of ``agent`` is offered: a subset of ``agent``'s; why not, if it asked for more."""
        held = [t.name for t in self.tools_for(agent)]
        scope = list(held)
        if definition is not None:
            if definition.tools is not None:
                scope = [n for n in scope if any(fnmatch.fnmatchcase(n, p) for p in definition.tools)]
            scope = [
                n for n in scope if not any(fnmatch.fnmatchcase(n, p) for p in definition.disallowed_tools)
            ]
        if asked is None:
            return frozenset(scope)
        if (
            not isinstance(asked, list)
            or len(asked) > MAX_CHILD_TOOL_PATTERNS
            or not all(isinstance(p, str) and 0 < len(p) <= 256 for p in asked)
        ):
            return (
                f"tools must be a list of at most {MAX_CHILD_TOOL_PATTERNS} tool names or globs, "
                f"got {_shown({'tools': asked})}"
            )
        chosen: set[str] = set()
        for pattern in asked:
            assert isinstance(pattern, str)
            matched = [n for n in scope if fnmatch.fnmatchcase(n, pattern)]
            if not matched:
                mine = ", ".join(scope[:40]) + (" ..." if len(scope) > 40 else "")
                return (
                    f"tools: {pattern!r:.80} names none of the tools you may give (you hold "
                    f"{'these' if scope else 'none'}: {mine}); a child gets only tools you have"
                )
            chosen.update(matched)
        return frozenset(chosen)

    # -- watches --------------------------------------------------------------------

    async def _watch_tool(self, agent: str, name: str, args: Mapping[str, object]) -> types.CallToolResult:
        manager = self.watches
        if manager is None:
            return text_result(f"{name}: watches are not available in this agentd", is_error=True)
        answer: SessionOf | Refused = await self.ask_reactor(
            lambda reply: WatchSession(agent, name == "watch_start", reply)
        )
        if isinstance(answer, Refused):
            return text_result(answer.error, is_error=True)
        session = answer.session
        routes = ReactorRoutes(self, agent)
        if name == "watch_list":
            return text_result(orjson.dumps(manager.listing(session)).decode())
        if name == "watch_stop":
            stopped = await manager.stop(session=session, name=args.get("name"), routes=routes)
            return text_result(orjson.dumps(stopped).decode())
        unknown = sorted(set(args) - {"name", "uri", "on_event"})
        if unknown:
            return text_result(
                f"watch_start: unknown argument(s) {', '.join(map(repr, unknown))}; it takes name, uri, on_event",
                is_error=True,
            )
        started = await manager.start(
            session=session,
            name=args.get("name"),
            uri=args.get("uri"),
            on_event=args.get("on_event"),
            routes=routes,
        )
        return text_result(orjson.dumps(started).decode())

    # -- resources ------------------------------------------------------------------

    def server_for(self, uri: str) -> str | None:
        """Which server a URI goes to: listed exactly, else template match, else first that can subscribe."""
        return server_for(self.upstreams, uri)

    async def read_resource(self, uri: str) -> JSONValue:
        """Read ``uri`` from the server that offers it: its JSON value when the body is JSON, else its text."""
        server = self.server_for(uri)
        if server is None:
            raise AgentdError(f"no connected server offers {uri!r}; call list_resources to see what exists")
        result = await self.upstreams[server].read_resource(uri)
        parts = []
        for c in result.contents:
            text = getattr(c, "text", None)
            parts.append(text if text is not None else f"[binary {getattr(c, 'mime_type', '')}]")
        body = "\n".join(parts)
        try:
            return loads(body)
        except orjson.JSONDecodeError:
            return body

    async def list_resources(self) -> list[dict[str, object]]:
        # Shared with watch filters' list_resources, so both see the same fields.
        return resource_listing(self.upstreams)


class ReactorRoutes:
    """A watch's route in the reactor's router, added and removed through the reactor channel.

    Implements :class:`agentd.watches.manager.RouteTable` for one calling agent.
    """

    def __init__(self, hub: SupervisorHub, agent: str) -> None:
        self._hub = hub
        self._agent = agent

    async def add(self, *, session: str, name: str, uri: str) -> None:
        agent = self._agent
        answer: RouteAdded | Refused = await self._hub.ask_reactor(
            lambda reply: WatchRouteAdd(agent, session, name, uri, reply)
        )
        if isinstance(answer, Refused):
            raise RouteError(answer.error)

    async def remove(self, *, session: str, name: str) -> None:
        agent = self._agent
        # The answer says only that the route is gone (the manager asks the subscriptions component next).
        await self._hub.ask_reactor(lambda reply: WatchRouteRemove(agent, session, name, reply))


def server_for(upstreams: Mapping[str, Upstream], uri: str) -> str | None:
    """Which server a URI goes to: listed exactly, else template match, else first that can subscribe."""
    catalogs = {name: up.catalog() for name, up in upstreams.items()}
    return resolve_server_for_uri(uri, catalogs)


def _records_result(answer: AgentRecords | Refused, *, one: bool = False) -> types.CallToolResult:
    """The records an agent tool answers with, as the model reads them."""
    if isinstance(answer, Refused):
        return text_result(answer.error, is_error=True)
    if one:
        return text_result(orjson.dumps(answer.records[0]).decode())
    body: dict[str, object] = {"agents": list(answer.records)}
    if answer.running:
        body["still_running"] = sorted(answer.running)
    return text_result(orjson.dumps(body).decode())


def _shown(args: object) -> str:
    """A model's arguments in an error, cut short (they are untrusted and may be huge)."""
    text = orjson.dumps(args, default=repr).decode() if args is not None else "nothing"
    return text if len(text) <= 200 else text[:200] + "..."


def _whole(value: float | None) -> int | None:
    return None if value is None else int(value)


def _text_of(result: types.CallToolResult) -> str:
    """A tool result's text blocks, joined (for a span, with content capture on)."""
    return "\n".join(b.text for b in result.content if isinstance(b, types.TextContent))

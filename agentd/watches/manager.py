"""The watch manager: one task per watch, from "changed" to a notice for the reactor.

Size: over 600 lines because it owns every watch's lifecycle (start, stop,
list, restore, the per-watch task and the declared-route stages that share
it); the stage's pure steps live in ``stage.py``, ``extract.py``,
``notices.py`` and ``sandbox.py``.

A watch is a self-subscribe route with an extraction and filter stage
(ARCHITECTURE decision 8). The reactor owns the route (``watch:<session>:<name>``,
exact, debounce 0); when it is due, the reactor hands the URIs to
:meth:`WatchManager.on_changed` without waiting. Each watch's own task then:

1. re-reads the resource (bounded by the upstream's request timeout; a failed
   read becomes an ``ERROR`` line),
2. runs :meth:`agentd.watches.stage.WatchStage.process_read` (extraction, the
   sandboxed ``on_event`` filter in a worker thread, dedupe, debounce buffer),
3. waits for the stage's debounce deadline (``trio.move_on_at``, armed only
   by an event: an idle watch makes no wakeups),
4. on flush posts a :class:`~agentd.events.WatchNotice` into the
   reactor's channel, which turns it into one turn of the owning session.

Lifecycle of one watch (:class:`WatchStatus`)::

    STARTING --baseline read, route, subscribe--> RUNNING
    RUNNING  --upstream gave up resubscribing---> FAILED --re-established--> RUNNING
    (restore) --transient failure---------------> RESTORE_FAILED (listed, kept in the file)
    any      --watch_stop / owner exited---------> (removed)

``--watch-state``: specs (name, URI, filter, owner, baseline) are written on
every start and stop and after every notice, by one writer task, in a worker
thread. The baseline written is the one as of the last notice handed to the
reactor, so a restart reports again what no notice has carried yet (rfcs/0076).

Declared routes with ``extract`` / ``on_event`` (rfcs/0078) get the same stage
per (route id, concrete URI): :meth:`WatchManager.declare_routes` at startup,
:meth:`WatchManager.on_route_subscribed` takes the baseline read when the
subscription is established, :meth:`WatchManager.on_route_changed` wakes the
stage, and its notices go to the reactor as
:class:`~agentd.events.RouteNotice`. With ``--watch-state`` their
baselines are saved as specs with no owner named ``route:<route id>:<uri>``.
"""

from __future__ import annotations

import contextlib
import enum
import html
import re
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn, Protocol, TypeAlias

import orjson
import trio

from agentd.counters import RunCounters
from agentd.errors import AgentdError, ConfigError, FilterRejected, WatchError, WatchStateError
from agentd.events import ReactorEvent, RouteNotice, SubscriptionStateChanged, WatchNotice
from agentd.jsonvalue import JSONObject, JSONValue, loads
from agentd.limits import ModelLimit
from agentd.telemetry import Telemetry
from agentd.upstream.naming import namespaced
from agentd.upstream.resolve import resource_listing
from agentd.watches import state as state_file
from agentd.watches.extract import Shape, shape_of
from agentd.watches.limits import WatchLimits
from agentd.watches.limits import watch_limits as watch_limits  # its old home: callers import it here too
from agentd.watches.notices import error_line
from agentd.watches.stage import StagedRoute, WatchStage
from agentd.watches.state import WatchSpec

if TYPE_CHECKING:  # the sandbox (pydantic-monty) is imported only when a watch filters
    from mcp import types

    from agentd.upstream.connection import Upstream
    from agentd.watches.sandbox import CatalogFunction, FilterPool, WatchFilter

#: An async catalog function: called with the filter's own arguments (checked
#: by the function), its result goes back into the sandbox.
AsyncCatalogFunction: TypeAlias = "Callable[..., Awaitable[object]]"


#: Watch names: short, safe in a route id, an XML attribute and a log line.
WATCH_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")

#: Bound on one catalog call a filter makes (``read_resource``, a read-only
#: tool), on top of the filter run's own time limit (which usually ends it
#: first, rfcs/0151): 5 s is far above a healthy call (~1 ms) and well below
#: the upstream's own 30 s request timeout, so a hung server costs a filter
#: an error line, not half a minute, even with a long ``filter_timeout``.
CATALOG_CALL_TIMEOUT_SECS: Final = 5.0

#: How long shutdown waits for the sandbox pool to stop its worker processes.
#: Monty kills them itself; this only bounds a wedged worker.
POOL_CLOSE_TIMEOUT_SECS: Final = 5.0

#: ``--watch-state`` names of declared-route stages start with this (watch names cannot hold ``:``).
ROUTE_SPEC_PREFIX: Final = "route:"

#: The instruction after a restore notice.
RESTORE_INSTRUCTION: Final = (
    "agentd restarted and started again the watches you had set up (listed above). "
    "Changes made while it was down follow as watch events. "
    "If nothing here needs action, answer with exactly NO_REPLY and nothing else."
)


class WatchStatus(enum.Enum):
    """Where one watch is in its lifecycle."""

    STARTING = "starting"
    """watch_start is validating, reading the baseline and subscribing."""
    RUNNING = "running"
    """Subscribed; every change is re-read and filtered."""
    FAILED = "failed"
    """The upstream gave up resubscribing; resumes if the subscription comes back."""
    RESTORE_FAILED = "restore_failed"
    """A spec from ``--watch-state`` that could not start (e.g. its server is down)."""


class RouteTable(Protocol):
    """How the manager adds and removes a watch's route (the reactor owns the router)."""

    async def add(self, *, session: str, name: str, uri: str) -> None:
        """Add the exact route ``watch:<session>:<name>`` for ``uri``.

        Raises:
            AgentdError: the route cannot be added (e.g. the URI is owned by a subscription).
        """
        ...

    async def remove(self, *, session: str, name: str) -> None:
        """Remove the route ``watch:<session>:<name>`` (idempotent); returns once it is gone."""
        ...


class SubscriptionHolds(Protocol):
    """Where a watch reports that it holds an upstream subscription, and asks whether to release it.

    :class:`agentd.supervisor.subscriptions.Subscriptions`, the one place that
    decides whether a subscription may be released (rfcs/0253, rfcs/0258):
    the manager reports each watch's hold and performs the answer it gets
    back when the hold ends, never deciding itself.
    """

    def watch_started(self, key: tuple[str, str], server: str, uri: str) -> None:
        """Watch ``key`` (session, name) picked ``server`` for ``uri``: it holds the pair from now on."""
        ...

    def watch_stopped(self, key: tuple[str, str]) -> bool:
        """Watch ``key`` stopped, or never started, its route (if it had one) gone: its hold is gone.

        Returns:
            Whether the manager unsubscribes the pair the watch held: nothing
            else (a declared subscription, a route, another watch) needs it.
        """
        ...


class _NoHolds:
    """No one to tell (a manager run without the reactor, in tests and benchmarks)."""

    def watch_started(self, key: tuple[str, str], server: str, uri: str) -> None:
        pass

    def watch_stopped(self, key: tuple[str, str]) -> bool:
        return False  # nobody to ask: keep


@dataclass(eq=False)
class Watch:
    """One watch, as the manager tracks it."""

    name: str
    uri: str
    session: str
    on_event: str | None
    status: WatchStatus = WatchStatus.STARTING
    server: str | None = None
    shape: Shape | None = None
    stage: WatchStage | None = None
    events: int = 0
    """Events extracted so far (before the filter)."""
    notices: int = 0
    """Notices handed to the reactor."""
    saved_baseline: JSONObject | None = None
    """The baseline as of the last notice (what ``--watch-state`` stores)."""
    error: str | None = None
    """Why a restore failed (RESTORE_FAILED)."""
    changed: bool = False
    """A change arrived that the task has not read yet (coalesces bursts)."""
    wake_send: trio.MemorySendChannel[None] | None = None
    wake_recv: trio.MemoryReceiveChannel[None] | None = None
    scope: trio.CancelScope = field(default_factory=trio.CancelScope)
    route: StagedRoute | None = None
    """The declared route this stage serves (``name`` is then the route id, ``session`` empty)."""
    subscribed: bool = False
    """The upstream subscription is established as far as this watch reported (``watch.subscribed``
    once per establishment, ``watch.resubscribing`` once per loss)."""

    @property
    def route_id(self) -> str:
        if self.route is not None:
            return self.route.route_id
        return f"watch:{self.session}:{self.name}"

    def spec(self) -> WatchSpec:
        if self.route is not None:
            return WatchSpec(
                name=route_spec_name(self.route.route_id, self.uri),
                uri=self.uri,
                on_event=self.on_event,
                owner=None,
                baseline=self.saved_baseline,
            )
        return WatchSpec(
            name=self.name,
            uri=self.uri,
            on_event=self.on_event,
            owner=self.session,
            baseline=self.saved_baseline,
        )

    def describe(self) -> JSONObject:
        out: JSONObject = {
            "name": self.name,
            "uri": self.uri,
            "shape": self.shape,
            "events": self.events,
            "notices": self.notices,
        }
        if self.status is WatchStatus.RESTORE_FAILED:
            out["restore_failed"] = True
            out["error"] = self.error
        elif self.status is WatchStatus.FAILED:
            out["failed"] = True
        return out

    def wake(self) -> None:
        if self.wake_send is not None:
            # A wake-up already pending is enough: the task reads the current state anyway.
            with contextlib.suppress(trio.WouldBlock):
                self.wake_send.send_nowait(None)


class WatchManager:
    """Every watch of the process: start, stop, list, restore, and their tasks.

    Args:
        upstreams: Server name -> connection (:class:`agentd.upstream.Upstream`).
        events: The reactor's channel (notices are posted there).
        telemetry: NDJSON telemetry.
        limits: Watch limits.
        server_for: URI -> server name (the hub's routing rule).
        state_path: ``--watch-state`` file, or ``None`` (watches in memory only).
        pool: The sandbox pool for filters; default: one opened on first use.
        routes: The staged declared routes (as :meth:`declare_routes`).
        counters: The run's counter set: refusals by a watch cap and subscriptions
            the server refused are counted there (rfcs/0265); a private one if not given.

    Run :meth:`run` in a nursery (``await nursery.start(manager.run)``) before
    starting watches.
    """

    def __init__(
        self,
        *,
        upstreams: Mapping[str, Upstream],
        events: trio.MemorySendChannel[ReactorEvent],
        telemetry: Telemetry,
        limits: WatchLimits | None = None,
        server_for: Callable[[str], str | None],
        state_path: Path | None = None,
        pool: FilterPool | None = None,
        routes: Iterable[StagedRoute] = (),
        tool_allowed: Callable[[str, types.Tool], bool] | None = None,
        holds: SubscriptionHolds | None = None,
        counters: RunCounters | None = None,
    ) -> None:
        self.upstreams = upstreams
        self._counters = counters if counters is not None else RunCounters()
        self._refusing: set[tuple[ModelLimit, str]] = set()
        """Watch caps refusing now, by (limit, session; "" for the total): told once per hit (rfcs/0265)."""
        self._holds: SubscriptionHolds = holds or _NoHolds()
        """The subscriptions component: each watch's hold on its upstream subscription."""
        self._tool_allowed = tool_allowed
        """The tool policy (server, tool) -> offered; a filter never reaches a tool agents are denied."""
        self._events = events
        self._telemetry = telemetry
        self.limits = limits or WatchLimits()
        self._server_for = server_for
        self.state_path = state_path
        self._pool = pool
        self._own_pool = pool is None
        self._pool_lock = trio.Lock()
        self._watches: dict[tuple[str, str], Watch] = {}
        self._closing: set[WatchFilter] = set()
        """Filters of released watches whose close is still to run (closed at shutdown if it never ran)."""
        self._kept: dict[tuple[str, str], WatchSpec] = {}
        """Specs whose owner exited: kept in ``--watch-state`` for the next start."""
        self._nursery: trio.Nursery | None = None
        self._save_wanted = trio.Event()
        self._state_problem: str | None = None
        self._routes: dict[str, StagedRoute] = {r.route_id: r for r in routes}
        """Staged declared routes by id (:meth:`declare_routes`)."""
        self._declared: dict[tuple[str, str], Watch] = {}
        """Declared-route stages by (route id, URI)."""
        self._route_baselines: dict[tuple[str, str], WatchSpec] = {}
        """Restored declared-route specs whose stage has not started yet."""

    # ------------------------------------------------------------------ run

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host the watch tasks until cancelled; then write the state file and close the pool."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._saver)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                await self._write_state()
                # A filter whose close was scheduled but cancelled by the shutdown still holds a
                # sandbox worker that the pool's close would not stop: close them all first.
                filters = [*self._closing, *(w.stage.filter for w in self._watches.values() if w.stage)]
                self._closing.clear()
                pool = self._pool if self._own_pool else None
                self._pool = None if self._own_pool else self._pool

                def shut() -> None:
                    for f in filters:
                        if f is not None:
                            f.close()
                    if pool is not None:
                        pool.close()

                with trio.move_on_after(POOL_CLOSE_TIMEOUT_SECS):
                    await trio.to_thread.run_sync(shut, abandon_on_cancel=True)

    def _require_nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise WatchError(
                "the watch manager is not running; start it with `await nursery.start(manager.run)`"
            )
        return self._nursery

    async def _filter_pool(self) -> FilterPool:
        async with self._pool_lock:
            if self._pool is None:
                from agentd.watches.sandbox import FilterPool  # lazy: loads pydantic-monty

                pool = FilterPool()
                # Entering starts a sandbox worker process: keep it off the event loop.
                await trio.to_thread.run_sync(pool.__enter__)
                self._pool = pool
            return self._pool

    # ------------------------------------------------------------------ views

    def watches(self, session: str | None = None) -> list[Watch]:
        """Watches of ``session`` (all sessions when ``None``), in start order."""
        return [w for (s, _), w in self._watches.items() if session is None or s == session]

    def get(self, session: str, name: str) -> Watch | None:
        return self._watches.get((session, name))

    def listing(self, session: str) -> list[JSONObject]:
        """``watch_list()`` for ``session``."""
        return [w.describe() for w in self.watches(session)]

    def has_watches(self, session: str) -> bool:
        return any(s == session for s, _ in self._watches)

    # ------------------------------------------------------------------ start

    async def start(
        self,
        *,
        session: str,
        name: object,
        uri: object,
        on_event: object = None,
        routes: RouteTable,
        baseline: JSONObject | None = None,
    ) -> JSONObject:
        """``watch_start``: validate, read the baseline, add the route, subscribe, start the task.

        Everything happens inside the call, so every failure is reported to the
        caller in the same turn and leaves nothing behind (no route, no
        subscription, no task).

        Args:
            session: The owning session.
            name, uri, on_event: As the model passed them (checked here).
            routes: Adds/removes the watch's route in the reactor.
            baseline: A persisted baseline (restore): the first read is diffed
                against it, so changes made meanwhile are reported.

        Returns:
            ``{"name", "uri", "shape"}``.

        Raises:
            WatchError: bad name or URI, name taken, over the limit, no server,
                the read failed, the route or the subscription was refused.
            FilterRejected: ``on_event`` is not usable source.
        """
        nursery = self._require_nursery()
        if not isinstance(name, str) or not WATCH_NAME_RE.fullmatch(name):
            raise WatchError(
                f"watch_start: name {name!r} is not valid: give 1-64 letters, digits, '.', '_' or '-', e.g. 'notes'"
            )
        if not isinstance(uri, str) or not uri.strip():
            raise WatchError(
                f"watch_start {name!r}: uri {uri!r} is not valid: give a resource URI from list_resources"
            )
        key = (session, name)
        previous = self._watches.get(key)
        if previous is not None and previous.status is not WatchStatus.RESTORE_FAILED:
            raise WatchError(
                f"watch_start: this session already has a watch named {name!r} (on {previous.uri!r}); "
                f"call watch_stop({name!r}) first or choose another name"
            )
        active = [w.name for w in self.watches(session) if w.status is not WatchStatus.RESTORE_FAILED]
        if len(active) >= self.limits.max_watches:
            self._refuse(
                "watches.max_watches",
                session,
                name,
                uri,
                f"watch_start {name!r}: this session already has {len(active)} watches "
                f"({', '.join(sorted(active))}), the limit (watches.max_watches = {self.limits.max_watches}); "
                "stop one with watch_stop(name) first (an operator raises the limit with [watches] "
                "max_watches / AGENTD_WATCHES__MAX_WATCHES)",
            )
        running = sum(1 for w in self._watches.values() if w.status is not WatchStatus.RESTORE_FAILED)
        if running >= self.limits.max_watches_total:
            self._refuse(
                "watches.max_watches_total",
                session,
                name,
                uri,
                f"watch_start {name!r}: the sessions of this agentd already hold {running} watches together, "
                f"the limit (watches.max_watches_total = {self.limits.max_watches_total}); stop a watch you "
                "no longer need with watch_stop(name), or try again later (an operator raises the limit "
                "with [watches] max_watches_total / AGENTD_WATCHES__MAX_WATCHES_TOTAL)",
                # Others' watches may stop: the same call can pass later (a restored one is kept and listed).
                transient=True,
            )
        w = Watch(name=name, uri=uri, session=session, on_event=None)
        # Reserve the name before the first await: concurrent calls cannot both pass the checks.
        self._watches[key] = w
        filt: WatchFilter | None = None
        routed = False
        try:
            source: str | None = None
            if on_event is not None:
                from agentd.watches.sandbox import check_source  # lazy: loads pydantic-monty

                source = check_source(on_event)
            server = self._server_for(uri)
            if server is None or server not in self.upstreams:
                raise WatchError(
                    f"watch_start {name!r}: no connected server offers {uri!r}; "
                    "call list_resources and pass one of its URIs (or fill in a template)",
                    transient=True,
                )
            up = self.upstreams[server]
            w.server = server
            self._holds.watch_started(key, server, uri)  # from now on, nothing releases the subscription
            catalog, denied = self.filter_catalog()
            if source is not None:
                from agentd.watches.sandbox import WatchFilter, sample_event  # loaded by check_source

                pool = await self._filter_pool()
                source = await pool.avalidate(
                    source,
                    limits=self.limits,
                    catalog_names=catalog.keys(),
                    denied=denied,
                    sample=sample_event(watch=name, uri=uri),
                )
                filt = WatchFilter(source, pool=pool, limits=self.limits, catalog=catalog, denied=denied)
            w.on_event = source
            try:
                body, mime = await self._read(server, uri)
            except AgentdError as exc:
                raise WatchError(
                    f"watch_start {name!r}: reading {uri!r} on server {server!r} failed, so nothing was "
                    f"subscribed: {exc}",
                    transient=True,
                ) from exc
            w.shape = shape_of(mime)
            try:
                w.stage = WatchStage(
                    name, uri, shape=w.shape, limits=self.limits, filter=filt, baseline=baseline
                )
            except ValueError:
                # A persisted baseline that does not parse: start fresh rather than not at all.
                w.stage = WatchStage(name, uri, shape=w.shape, limits=self.limits, filter=filt)
            restored = baseline is not None and w.stage.baseline() is not None
            if restored:
                # Diff against the persisted baseline: changes made while agentd was down.
                await self._process_body(w, body)
            else:
                try:
                    w.stage.extractor.feed(body)
                except AgentdError as exc:
                    raise WatchError(f"watch_start {name!r}: {exc}", transient=True) from exc
            w.saved_baseline = w.stage.baseline() if not restored else baseline
            try:
                await routes.add(session=session, name=name, uri=uri)
            except AgentdError as exc:
                raise WatchError(f"watch_start {name!r}: {exc}", transient=True) from exc
            routed = True
            try:
                await up.subscribe(uri)
            except AgentdError as exc:
                # A bundled server's cap on its watchers (rfcs/0265) arrives here, as any refusal does.
                self._counters.subscribe_failed(server)
                self._telemetry.emit(
                    "self.subscribe_failed",
                    session=session,
                    watch=name,
                    server=server,
                    uri=uri,
                    error=str(exc),
                )
                raise WatchError(
                    f"watch_start {name!r}: subscribing to {uri!r} on server {server!r} failed: {exc}",
                    transient=True,
                ) from exc
        except BaseException:
            if self._watches.get(key) is w:
                if previous is not None:
                    self._watches[key] = previous
                else:
                    del self._watches[key]
            with trio.CancelScope(shield=True):
                # A release asked for while this watch held the pair was kept for it:
                # if nothing else needs the pair now, it is made here (idempotent).
                if w.server is not None and await self._unhold(w, routed=routed, routes=routes):
                    with contextlib.suppress(AgentdError):
                        await self.upstreams[w.server].unsubscribe(uri)
                if filt is not None:
                    await filt.aclose()
            raise
        if previous is not None:
            self._close_quietly(previous)
        w.wake_send, w.wake_recv = trio.open_memory_channel[None](1)
        w.status = WatchStatus.RUNNING  # STARTING -> RUNNING
        self._below_caps(session)
        # One re-read after subscribing: a change between the baseline read and the
        # subscription is not lost (an unchanged resource yields no events).
        w.changed = True
        w.wake()
        nursery.start_soon(self._run_watch, w)
        fields = self._fields(w)
        self._telemetry.emit("watch.started", **fields, shape=w.shape, filter=w.on_event is not None)
        # The upstream's own "established" for this subscription may reach on_subscription_state
        # before or after this point; the flag makes it one watch.subscribed either way.
        w.subscribed = True
        self._telemetry.emit("watch.subscribed", **fields)
        self._request_save()
        return {"name": name, "uri": uri, "shape": w.shape}

    def _refuse(
        self, limit: ModelLimit, session: str, name: str, uri: str, message: str, *, transient: bool = False
    ) -> NoReturn:
        """A watch cap refuses ``session``'s ``watch_start``: counted, said once per hit (rfcs/0265), raised."""
        self._counters.refuse(limit)
        per_session = limit == "watches.max_watches"
        key = (limit, session if per_session else "")
        if key not in self._refusing:
            self._refusing.add(key)
            value = self.limits.max_watches if per_session else self.limits.max_watches_total
            self._telemetry.emit(
                "limit.reached", limit=limit, value=value, session=session, watch=name, uri=uri
            )
        raise WatchError(message, transient=transient)

    def _below_caps(self, session: str) -> None:
        """A watch of ``session`` started or stopped: a later refusal is a new hit."""
        self._refusing.discard(("watches.max_watches", session))
        self._refusing.discard(("watches.max_watches_total", ""))

    def filter_catalog(self) -> tuple[dict[str, CatalogFunction], set[str]]:
        """The filter's read-only catalog and the names it is denied (mutating tools).

        Catalog functions are called from a filter's worker thread; each runs
        its call on the event loop, bounded by the run's time left
        (:func:`agentd.watches.sandbox.call_on_loop`).
        """
        catalog: dict[str, CatalogFunction] = {
            "read_resource": self._sync_call(self._catalog_read),
            "list_resources": self._sync_call(self._catalog_list),
        }
        denied: set[str] = set()
        for server, up in self.upstreams.items():
            for tool in getattr(up, "tools", None) or []:
                exposed = namespaced(server, tool.name)
                annotations = getattr(tool, "annotations", None)
                allowed = self._tool_allowed is None or self._tool_allowed(server, tool)
                if allowed and annotations is not None and annotations.read_only_hint is True:
                    catalog[exposed] = self._sync_call(self._tool_caller(server, tool.name))
                else:
                    denied.add(exposed)
        return catalog, denied

    def _sync_call(self, fn: AsyncCatalogFunction) -> CatalogFunction:
        """A callable for the filter's worker thread that runs ``fn`` on the event loop.

        Bounded by what is left of the filter run's time and by
        :data:`CATALOG_CALL_TIMEOUT_SECS`, whichever ends first.
        """

        def call(*args: object, **kwargs: object) -> object:
            from agentd.watches.sandbox import call_on_loop  # loaded: a filter is calling

            return call_on_loop(lambda: fn(*args, **kwargs), cap=CATALOG_CALL_TIMEOUT_SECS)

        return call

    async def _catalog_read(self, uri: str) -> JSONValue:
        server = self._server_for(uri)
        if server is None:
            raise KeyError(f"no connected server offers {uri!r}")
        body, _ = await self._read(server, uri)
        try:
            return loads(body)
        except orjson.JSONDecodeError:
            return body

    async def _catalog_list(self) -> Sequence[Mapping[str, object]]:
        # The same entries as the list_resources self-tool.
        return resource_listing(self.upstreams)

    def _tool_caller(self, server: str, tool: str) -> AsyncCatalogFunction:
        async def call(*args: object, **kwargs: object) -> object:
            if args:
                raise TypeError("call tools with keyword arguments, e.g. memo__memo_get(key='todo')")
            result = await self.upstreams[server].call_tool(tool, kwargs)
            text = "\n".join(getattr(c, "text", "") or "" for c in result.content)
            if result.is_error:
                raise RuntimeError(text or "the tool returned an error")
            if result.structured_content is not None:
                return result.structured_content
            try:
                return loads(text)
            except orjson.JSONDecodeError:
                return text

        return call

    async def _read(self, server: str, uri: str) -> tuple[str, str | None]:
        """Read ``uri`` (bounded by the upstream's request timeout); return (body, mime type)."""
        result = await self.upstreams[server].read_resource(uri)
        parts: list[str] = []
        mime: str | None = None
        for c in result.contents:
            mime = mime or getattr(c, "mime_type", None)
            text = getattr(c, "text", None)
            parts.append(text if text is not None else "")
        return "\n".join(parts), mime

    # ------------------------------------------------------------------ the watch task

    async def _run_watch(self, w: Watch) -> None:
        assert w.wake_recv is not None
        assert w.stage is not None
        with w.scope:
            while True:
                deadline = w.stage.deadline()
                with trio.move_on_at(float("inf") if deadline is None else deadline):
                    await w.wake_recv.receive()
                if w.changed:
                    w.changed = False
                    await self._reread(w)
                await self._flush(w)

    async def _reread(self, w: Watch) -> None:
        assert w.stage is not None
        assert w.server is not None
        try:
            body, _ = await self._read(w.server, w.uri)
        except AgentdError as exc:
            message = f"re-reading {w.uri!r} failed: {exc}"
            w.stage.buffer.add([error_line(w.name, message)], trio.current_time(), pinned=True)
            self._telemetry.emit(
                "watch.event", **self._fields(w), type="ERROR", outcome="error", error=message
            )
            return
        await self._process_body(w, body)

    async def _process_body(self, w: Watch, body: str) -> None:
        assert w.stage is not None
        report = await w.stage.process_read(body, trio.current_time())
        w.events += len(report.events)
        fields = self._fields(w)
        for i, ev in enumerate(report.events):
            outcome = report.outcomes[i].kind if report.outcomes else "lines"
            self._telemetry.emit(
                "watch.event",
                **fields,
                type=ev.get("type"),
                outcome={"lines": "kept", "dropped": "dropped"}.get(outcome, "error"),
                error=report.outcomes[i].error if report.outcomes else None,
            )
        if report.error is not None and not report.events:
            self._telemetry.emit("watch.event", **fields, type="ERROR", outcome="error", error=report.error)

    async def _flush(self, w: Watch) -> None:
        assert w.stage is not None
        due = w.stage.flush(trio.current_time())
        if due is None:
            return
        notice, text = due
        w.notices += 1
        w.saved_baseline = w.stage.baseline()
        self._telemetry.emit(
            "watch.notice",
            **self._fields(w),
            lines=len(notice.lines),
            total=notice.total,
            waited_s=round(notice.flushed_at - notice.first_at, 3),
        )
        self._request_save()
        if w.route is not None:
            await self._post(RouteNotice(route=w.route.route_id, uri=w.uri, server=w.server, text=text))
            return
        await self._post(WatchNotice(session=w.session, watch=w.name, uri=w.uri, text=text))

    async def _post(self, event: ReactorEvent) -> None:
        # Broken/closed: the reactor is gone (shutdown); nobody is left to tell.
        with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
            await self._events.send(event)

    # ------------------------------------------------------------------ declared routes

    def declare_routes(self, routes: Iterable[StagedRoute]) -> None:
        """Register the staged declared routes (once, at startup, before :meth:`restore`)."""
        self._routes = {r.route_id: r for r in routes}

    def declared(self) -> list[Watch]:
        """The declared-route stages started so far, in start order."""
        return list(self._declared.values())

    async def check_routes(self) -> None:
        """Dry-run every declared route's ``on_event`` once, as ``watch_start`` does (call at startup).

        Raises:
            ConfigError: a filter the sandbox refuses; the setting is
                ``routes[i].on_event`` and the message says why and how to fix it.
        """
        with_filter = [r for r in self._routes.values() if r.on_event is not None]
        if not with_filter:
            return
        from agentd.watches.sandbox import sample_event  # lazy: loads pydantic-monty

        pool = await self._filter_pool()
        catalog, denied = self.filter_catalog()
        for r in with_filter:
            try:
                await pool.avalidate(
                    r.on_event,
                    limits=self.limits,
                    catalog_names=catalog.keys(),
                    denied=denied,
                    sample=sample_event(
                        watch=r.route_id,
                        uri=r.match,
                        shape="event-log" if r.extract == "event-log" else "state",
                    ),
                )
            except FilterRejected as exc:
                raise ConfigError(f"routes[{r.index}].on_event", r.on_event, str(exc)) from None

    def on_route_subscribed(self, route_id: str, server: str, uri: str) -> None:
        """``uri`` of staged route ``route_id`` is subscribed: start its stage (never blocks).

        The stage's task takes the baseline read at once, so the first change
        after the subscription is reported. A re-established subscription
        keeps its stage (the synthetic change that follows re-reads it).
        """
        self._declared_stage(route_id, uri, server)

    def on_route_changed(self, route_id: str, changes: Iterable[tuple[str, str | None]]) -> None:
        """Staged route ``route_id`` is due: wake the stage of every ``(uri, server)`` (never blocks).

        A URI with no stage yet (no ``established`` was seen) gets one now; its
        baseline is this read, so this one change is not reported.
        """
        for uri, server in changes:
            w = self._declared_stage(route_id, uri, server)
            if w is not None:
                w.changed = True
                w.wake()

    def _declared_stage(self, route_id: str, uri: str, server: str | None) -> Watch | None:
        w = self._declared.get((route_id, uri))
        if w is not None:
            return w
        route = self._routes.get(route_id)
        server = server or self._server_for(uri)
        if route is None or server is None or server not in self.upstreams or self._nursery is None:
            return None
        w = Watch(name=route_id, uri=uri, session="", on_event=route.on_event, server=server, route=route)
        w.wake_send, w.wake_recv = trio.open_memory_channel[None](1)
        self._declared[(route_id, uri)] = w
        self._nursery.start_soon(self._run_declared, w)
        return w

    async def _run_declared(self, w: Watch) -> None:
        # Declared stages live as long as the manager (routes are configuration).
        assert w.wake_recv is not None
        while w.stage is None:
            await self._start_declared(w)
            if w.stage is None:
                # The baseline read failed (reported); the next change tries again.
                await w.wake_recv.receive()
        w.status = WatchStatus.RUNNING  # STARTING -> RUNNING
        # A change that arrived during the baseline read left a wake-up: it is re-read first.
        await self._run_watch(w)

    async def _start_declared(self, w: Watch) -> None:
        """Baseline read and stage for a declared route's URI (diffed against a restored baseline)."""
        assert w.route is not None
        assert w.server is not None
        route = w.route
        w.changed = False  # a change during this read sets it again, and is re-read
        try:
            body, mime = await self._read(w.server, w.uri)
        except AgentdError as exc:
            self._telemetry.emit(
                "watch.event",
                **self._fields(w),
                type="ERROR",
                outcome="error",
                error=f"reading {w.uri!r} for the baseline failed: {exc}",
            )
            return
        filt: WatchFilter | None = None
        if route.on_event is not None:
            from agentd.watches.sandbox import WatchFilter  # lazy: loads pydantic-monty

            catalog, denied = self.filter_catalog()
            filt = WatchFilter(
                route.on_event,
                pool=await self._filter_pool(),
                limits=self.limits,
                catalog=catalog,
                denied=denied,
            )
        w.shape = shape_of(mime) if route.extract == "auto" else route.extract
        saved = self._route_baselines.pop((route.route_id, w.uri), None)
        baseline = saved.baseline if saved is not None else None
        try:
            stage = WatchStage(
                w.name, w.uri, shape=w.shape, limits=self.limits, filter=filt, baseline=baseline
            )
        except ValueError:
            # A persisted baseline that does not parse: start fresh rather than not at all.
            stage = WatchStage(w.name, w.uri, shape=w.shape, limits=self.limits, filter=filt)
        restored = baseline is not None and stage.baseline() is not None
        w.stage = stage
        if restored:
            # Diff against the persisted baseline: changes made while agentd was down.
            w.saved_baseline = baseline
            await self._process_body(w, body)
        else:
            try:
                stage.extractor.feed(body)
            except AgentdError as exc:
                self._telemetry.emit(
                    "watch.event", **self._fields(w), type="ERROR", outcome="error", error=str(exc)
                )
            w.saved_baseline = stage.baseline()
        self._telemetry.emit(
            "watch.started",
            **self._fields(w),
            shape=w.shape,
            filter=w.on_event is not None,
            restored=restored,
        )
        self._request_save()

    # ------------------------------------------------------------------ reactor hooks (sync)

    def on_changed(self, route_id: str, uris: Iterable[str]) -> None:
        """A watch route is due: wake every running watch on these URIs (never blocks).

        Several watches may watch one URI (the router delivers it to the first
        watch route); each re-reads and filters on its own.
        """
        wanted = set(uris)
        for w in self._watches.values():
            if w.uri in wanted and w.status in (WatchStatus.RUNNING, WatchStatus.FAILED):
                w.changed = True
                w.wake()

    def on_subscription_state(self, ev: SubscriptionStateChanged) -> None:
        """Report a watched subscription's state change as ``watch.*`` telemetry (never blocks).

        Once per change of the watch's view: ``watch.subscribed`` when it comes
        up, ``watch.resubscribing`` when it is lost (the upstream's ``lost`` and
        ``resubscribing`` for one loss are one event), ``watch.failed`` plus one
        ``ERROR`` line to the owning agent when the upstream gives up.
        """
        for w in self._watches.values():
            if (
                w.server != ev.server
                or w.uri not in ev.uris
                or w.status not in (WatchStatus.RUNNING, WatchStatus.FAILED)
            ):
                continue
            fields = self._fields(w)
            if ev.state == "established":
                if w.status is WatchStatus.FAILED:
                    w.status = WatchStatus.RUNNING  # FAILED -> RUNNING
                if not w.subscribed:
                    w.subscribed = True
                    self._telemetry.emit("watch.subscribed", **fields, attempt=ev.attempt)
            elif ev.state in ("lost", "resubscribing"):
                if w.subscribed:
                    w.subscribed = False
                    self._telemetry.emit("watch.resubscribing", **fields, attempt=ev.attempt, error=ev.error)
            elif ev.state == "failed":
                w.subscribed = False
                if w.status is not WatchStatus.RUNNING:
                    continue
                w.status = WatchStatus.FAILED  # RUNNING -> FAILED
                self._telemetry.emit("watch.failed", **fields, attempts=ev.attempt, error=ev.error)
                assert w.stage is not None
                message = (
                    f"the subscription to {w.uri!r} failed after {ev.attempt} resubscribe attempts "
                    f"({ev.error}); no changes arrive until the server reconnects or you start the "
                    "watch again; call watch_stop to drop it"
                )
                w.stage.buffer.add([error_line(w.name, message)], trio.current_time(), pinned=True)
                w.wake()

    def on_owner_exited(self, session: str) -> None:
        """The owning session's agent is gone: its watches stop (the reactor already removed the routes).

        With ``--watch-state`` their specs stay in the file and start again on
        the next start of agentd. The subscriptions component decides which
        upstream subscriptions they held nothing else needs.
        """
        gone = [w for (s, _), w in self._watches.items() if s == session]
        if gone:
            self._below_caps(session)
        for w in gone:
            del self._watches[(w.session, w.name)]
            if self.state_path is not None:
                self._kept[(w.session, w.name)] = w.spec()
            self._telemetry.emit("watch.stopped", **self._fields(w), reason="owner exited")
            self._retire(w)
        if gone:
            self._request_save()

    def _retire(self, w: Watch) -> None:
        w.scope.cancel()
        unsubscribe = self._holds.watch_stopped((w.session, w.name))
        nursery = self._nursery
        if nursery is None:
            return
        nursery.start_soon(self._release, w, unsubscribe)

    async def _unhold(self, w: Watch, *, routed: bool, routes: RouteTable) -> bool:
        """``w`` ends: its route goes (if it has one), then its hold; whether to unsubscribe its pair.

        The hold ends after the route, whatever happens to the removal, so
        the component's answer sees neither.
        """
        try:
            if routed:
                await routes.remove(session=w.session, name=w.name)
        finally:
            unsubscribe = self._holds.watch_stopped((w.session, w.name))
        return unsubscribe

    async def _release(self, w: Watch, unsubscribe: bool) -> None:
        if w.stage is not None and w.stage.filter is not None:
            self._closing.add(w.stage.filter)  # closed at shutdown if this task is cancelled first
        if unsubscribe and w.server is not None:
            try:
                await self.upstreams[w.server].unsubscribe(w.uri)
            except AgentdError as exc:
                self._telemetry.emit("watch.unsubscribe_failed", **self._fields(w), error=str(exc))
        if w.stage is not None and w.stage.filter is not None:
            await self._close_filter(w.stage.filter)

    def _close_quietly(self, w: Watch) -> None:
        w.scope.cancel()
        if w.stage is not None and w.stage.filter is not None and self._nursery is not None:
            self._closing.add(w.stage.filter)
            self._nursery.start_soon(self._close_filter, w.stage.filter)

    async def _close_filter(self, filt: WatchFilter) -> None:
        self._closing.add(filt)
        await filt.aclose()
        self._closing.discard(filt)

    # ------------------------------------------------------------------ stop

    async def stop(self, *, session: str, name: object, routes: RouteTable) -> bool:
        """``watch_stop``: remove the route, unsubscribe unless still needed, drop the stage.

        Returns ``False`` if the session has no watch of that name.
        """
        if not isinstance(name, str):
            raise WatchError(f"watch_stop: name {name!r} is not valid: pass the name given to watch_start")
        w = self._watches.get((session, name))
        if w is None:
            return False
        if w.status is WatchStatus.STARTING:
            raise WatchError(
                f"watch_stop {name!r}: the watch is still starting; call watch_stop again after it"
            )
        del self._watches[(session, name)]
        self._below_caps(session)
        w.scope.cancel()
        routed = w.status is not WatchStatus.RESTORE_FAILED and w.server is not None
        unsubscribe = await self._unhold(w, routed=routed, routes=routes)
        self._telemetry.emit("watch.stopped", **self._fields(w), reason="watch_stop")
        self._request_save()
        await self._release(w, unsubscribe)
        return True

    # ------------------------------------------------------------------ restore

    async def restore(self, routes: RouteTable) -> list[WatchNotice]:
        """Start every watch saved in ``--watch-state`` again (once, at startup).

        A damaged file is moved aside, keeping the watches it held whole
        (``state.moved_aside``), and an unreadable one reported (watches
        then run in memory only). Each spec starts with its saved baseline, so
        changes made while agentd was down are reported. A spec that can never
        start (its filter is refused, its name is invalid, over the limit) is
        dropped from the file; one that failed for a reason that may pass (the
        server is down, the read failed) is kept and listed by ``watch_list()``
        with ``restore_failed``.

        Returns:
            One restore notice per owning session (``kind="restore"``), for the
            caller to deliver: the reactor folds each into the first turn of
            its session when it starts that session itself (the loop root), so
            a restart costs no extra turn.
        """
        if self.state_path is None:
            return []
        try:
            loaded = await trio.to_thread.run_sync(state_file.load, self.state_path)
        except WatchStateError as exc:
            self._state_problem = str(exc)
            self._telemetry.emit("watch.state_unavailable", path=str(self.state_path), error=str(exc))
            return []
        specs = loaded.specs
        if loaded.moved_aside is not None:
            self._telemetry.emit(
                "state.moved_aside",
                file="watch state",
                path=str(loaded.moved_aside.path),
                moved_to=str(loaded.moved_aside.moved_to),
                problem=loaded.moved_aside.problem,
                kept=len(specs),
                fix="the watches it held whole are restored and the file is written anew; inspect or delete the moved file",
            )
        for warning in loaded.warnings:
            self._telemetry.emit("watch.state_warning", path=str(self.state_path), warning=warning)
        restored: list[Watch] = []
        failed: list[Watch] = []
        dropped: list[tuple[WatchSpec, str]] = []
        route_names = {route_spec_name(rid, ""): rid for rid in self._routes}
        for spec in specs:
            if spec.owner is None and spec.name.startswith(ROUTE_SPEC_PREFIX):
                rid = route_names.get(spec.name[: len(spec.name) - len(spec.uri)])
                if rid is not None and spec.name == route_spec_name(rid, spec.uri):
                    self._route_baselines[(rid, spec.uri)] = spec
                else:
                    dropped.append((spec, "no declared route with extract has that id any more"))
                continue
            if spec.owner is None:
                dropped.append((spec, "it has no owning session"))
                continue
            try:
                await self.start(
                    session=spec.owner,
                    name=spec.name,
                    uri=spec.uri,
                    on_event=spec.on_event,
                    routes=routes,
                    baseline=spec.baseline,
                )
            except FilterRejected as exc:
                dropped.append((spec, str(exc)))
                continue
            except WatchError as exc:
                if not exc.transient:
                    dropped.append((spec, str(exc)))
                    continue
                w = Watch(
                    name=spec.name,
                    uri=spec.uri,
                    session=spec.owner,
                    on_event=spec.on_event,
                    status=WatchStatus.RESTORE_FAILED,
                    saved_baseline=spec.baseline,
                    error=str(exc),
                )
                self._watches[(spec.owner, spec.name)] = w
                failed.append(w)
                continue
            w_ok = self._watches[(spec.owner, spec.name)]
            restored.append(w_ok)
        for spec, why in dropped:
            self._telemetry.emit(
                "watch.restore_dropped", watch=spec.name, uri=spec.uri, session=spec.owner, error=why
            )
        self._telemetry.emit(
            "watch.restored",
            path=str(self.state_path),
            restored=[f"{w.session}:{w.name}" for w in restored],
            failed=[f"{w.session}:{w.name}" for w in failed],
            dropped=[f"{s.owner}:{s.name}" for s, _ in dropped],
            routes=sorted(s.name for s in self._route_baselines.values()),
        )
        self._request_save()
        sessions: dict[str, list[str]] = {}
        for w in [*restored, *failed]:
            sessions.setdefault(w.session, []).append(
                f"{w.name} {w.uri} ({w.shape})"
                if w.status is not WatchStatus.RESTORE_FAILED
                else f"{w.name} {w.uri}: could not start again ({w.error}); "
                f"call watch_start({w.name!r}, ...) to retry or watch_stop({w.name!r})"
            )
        for spec, why in dropped:
            if spec.owner is not None:
                sessions.setdefault(spec.owner, []).append(f"{spec.name} {spec.uri}: dropped ({why})")
        return [
            WatchNotice(session=session, watch="", uri="", text=render_restore(lines), kind="restore")
            for session, lines in sessions.items()
        ]

    # ------------------------------------------------------------------ --watch-state

    def specs(self) -> list[WatchSpec]:
        """What ``--watch-state`` holds: every watch plus specs kept after their owner exited."""
        out = {key: w.spec() for key, w in self._watches.items() if w.status is not WatchStatus.STARTING}
        for key, spec in self._kept.items():
            out.setdefault(key, spec)
        declared = [w.spec() for w in self._declared.values() if w.stage is not None]
        started = {(s.name, s.uri) for s in declared}
        # Restored baselines whose stage has not started yet (no subscription so far) are kept.
        waiting = [s for s in self._route_baselines.values() if (s.name, s.uri) not in started]
        return [*out.values(), *declared, *waiting]

    def _request_save(self) -> None:
        if self.state_path is not None:
            self._save_wanted.set()

    async def _saver(self) -> None:
        while True:
            await self._save_wanted.wait()
            self._save_wanted = trio.Event()
            await self._write_state()

    async def _write_state(self) -> None:
        if self.state_path is None:
            return
        path, specs = self.state_path, self.specs()
        try:
            await trio.to_thread.run_sync(state_file.save, path, specs)
        except WatchStateError as exc:
            if self._state_problem != str(exc):
                self._state_problem = str(exc)
                self._telemetry.emit("watch.state_unavailable", path=str(path), error=str(exc))
            return
        if self._state_problem is not None:
            self._state_problem = None
            self._telemetry.emit("watch.state_recovered", path=str(path))

    # ------------------------------------------------------------------ helpers

    def _fields(self, w: Watch) -> dict[str, str | None]:
        if w.route is not None:
            session = w.route.session if w.route.disposition == "continue" else None
            return {"watch": w.name, "uri": w.uri, "session": session, "route": w.route.route_id}
        return {"watch": w.name, "uri": w.uri, "session": w.session, "route": w.route_id}


def route_spec_name(route_id: str, uri: str) -> str:
    """The ``--watch-state`` name of a declared route's stage for ``uri``."""
    return f"{ROUTE_SPEC_PREFIX}{route_id}:{uri}"


def render_restore(lines: Iterable[str]) -> str:
    """The restore notice: a ``<watches-restored>`` block, one watch per line, then the instruction."""
    body = "\n".join(html.escape(line, quote=False) for line in lines)
    return f"<watches-restored>\n{body}\n</watches-restored>\n{RESTORE_INSTRUCTION}"

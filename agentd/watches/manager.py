"""The watch manager: every watch of the process, from ``watch_start`` to ``watch_stop``.

A watch is a self-subscribe route with an extraction and filter stage
(ARCHITECTURE decision 8). The reactor owns the route (``watch:<session>:<name>``,
exact, debounce 0); when it is due, the reactor hands the URIs to
:meth:`WatchManager.on_changed` without waiting, and the watch's own task
(:mod:`agentd.watches.watch`) re-reads, filters and posts the notice.

Lifecycle of one watch (:class:`~agentd.watches.watch.WatchStatus`)::

    STARTING --baseline read, route, subscribe--> RUNNING
    RUNNING  --upstream gave up resubscribing---> FAILED --re-established--> RUNNING
    (restore) --transient failure---------------> RESTORE_FAILED (listed, kept in the file)
    any      --watch_stop / owner exited---------> (removed)

The manager holds the watches and their caps, reports each watch's hold on
its upstream subscription (:class:`SubscriptionHolds`) and performs the
answer, and hosts its parts' tasks: ``persist``, ``catalog``, ``staged``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final, NoReturn, Protocol

import trio

from agentd.core.errors import AgentdError, FilterRejected, WatchError
from agentd.core.jsonvalue import JSONObject
from agentd.core.limits import ModelLimit
from agentd.events import ReactorEvent, SubscriptionStateChanged, WatchNotice
from agentd.observe.counters import RunCounters
from agentd.observe.telemetry import Telemetry
from agentd.watches.catalog import FilterHost, read_text
from agentd.watches.extract import shape_of
from agentd.watches.limits import WatchLimits
from agentd.watches.limits import watch_limits as watch_limits  # its old home: callers import it here too
from agentd.watches.notices import error_line
from agentd.watches.persist import ROUTE_SPEC_PREFIX, StateWriter, render_restore
from agentd.watches.stage import StagedRoute, WatchStage
from agentd.watches.staged import RouteStages
from agentd.watches.state import WatchSpec
from agentd.watches.watch import Watch, WatchRunner, WatchStatus

if TYPE_CHECKING:  # the sandbox (pydantic-monty) is imported only when a watch filters
    from mcp import types

    from agentd.upstream.connection import Upstream
    from agentd.watches.sandbox import CatalogFunction, FilterPool, WatchFilter


#: Watch names: short, safe in a route id, an XML attribute and a log line.
WATCH_NAME_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")


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

    :class:`agentd.supervisor.routing.subscriptions.Subscriptions`, the one place that
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
        tool_allowed: The tool policy (server, tool) -> offered; a filter never
            reaches a tool agents are denied.
        holds: The subscriptions component, told of each watch's hold on its
            upstream subscription (:class:`SubscriptionHolds`).
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
        self.limits = limits or WatchLimits()
        self.state_path = state_path
        self._telemetry = telemetry
        self._server_for = server_for
        self._counters = counters if counters is not None else RunCounters()
        self._holds: SubscriptionHolds = holds or _NoHolds()
        """The subscriptions component: each watch's hold on its upstream subscription."""
        self._watches: dict[tuple[str, str], Watch] = {}
        """Every watch by (session, name), in start order."""
        self._refusing: set[tuple[ModelLimit, str]] = set()
        """Watch caps refusing now, by (limit, session; "" for the total): told once per hit (rfcs/0265)."""
        self._kept: dict[tuple[str, str], WatchSpec] = {}
        """Specs whose owner exited: kept in ``--watch-state`` for the next start."""
        self._nursery: trio.Nursery | None = None
        """Where the watch tasks run, while :meth:`run` runs."""
        self._writer = StateWriter(state_path, telemetry, self.specs)
        self._host = FilterHost(
            upstreams=upstreams,
            limits=self.limits,
            server_for=server_for,
            tool_allowed=tool_allowed,
            pool=pool,
        )
        self._runner = WatchRunner(
            upstreams=upstreams, events=events, telemetry=telemetry, writer=self._writer
        )
        self._staged = RouteStages(
            routes=routes,
            upstreams=upstreams,
            server_for=server_for,
            limits=self.limits,
            telemetry=telemetry,
            host=self._host,
            runner=self._runner,
            writer=self._writer,
        )

    # ------------------------------------------------------------------ run

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Host the watch tasks until cancelled; then write the state file and close the pool."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(self._writer.run)
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None
            with trio.CancelScope(shield=True):
                await self._writer.write()
                await self._host.shut(w.stage.filter for w in self._watches.values() if w.stage)

    def _require_nursery(self) -> trio.Nursery:
        if self._nursery is None:
            raise WatchError(
                "the watch manager is not running; start it with `await nursery.start(manager.run)`"
            )
        return self._nursery

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

                pool = await self._host.pool()
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
                body, mime = await read_text(up, uri)
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
                await self._runner.process(w, body)
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
        nursery.start_soon(self._runner.run, w)
        fields = w.fields()
        self._telemetry.emit("watch.started", **fields, shape=w.shape, filter=w.on_event is not None)
        # The upstream's own "established" for this subscription may reach on_subscription_state
        # before or after this point; the flag makes it one watch.subscribed either way.
        w.subscribed = True
        self._telemetry.emit("watch.subscribed", **fields)
        self._writer.request()
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
        """The filter's read-only catalog and the names it is denied (:meth:`FilterHost.catalog`)."""
        return self._host.catalog()

    # ------------------------------------------------------------------ declared routes

    def declare_routes(self, routes: Iterable[StagedRoute]) -> None:
        """Register the staged declared routes (once, at startup, before :meth:`restore`)."""
        self._staged.declare(routes)

    def declared(self) -> list[Watch]:
        """The declared-route stages started so far, in start order."""
        return self._staged.stages()

    async def check_routes(self) -> None:
        """Dry-run every declared route's ``on_event`` once (:meth:`RouteStages.check`; call at startup)."""
        await self._staged.check()

    def on_route_subscribed(self, route_id: str, server: str, uri: str) -> None:
        """``uri`` of staged route ``route_id`` is subscribed: start its stage (never blocks)."""
        self._staged.on_subscribed(route_id, server, uri, self._nursery)

    def on_route_changed(self, route_id: str, changes: Iterable[tuple[str, str | None]]) -> None:
        """Staged route ``route_id`` is due: wake the stage of every ``(uri, server)`` (never blocks)."""
        self._staged.on_changed(route_id, changes, self._nursery)

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
            fields = w.fields()
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
            self._telemetry.emit("watch.stopped", **w.fields(), reason="owner exited")
            self._retire(w)
        if gone:
            self._writer.request()

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
            self._host.retiring(w.stage.filter)  # closed at shutdown if this task is cancelled first
        if unsubscribe and w.server is not None:
            try:
                await self.upstreams[w.server].unsubscribe(w.uri)
            except AgentdError as exc:
                self._telemetry.emit("watch.unsubscribe_failed", **w.fields(), error=str(exc))
        if w.stage is not None and w.stage.filter is not None:
            await self._host.close_filter(w.stage.filter)

    def _close_quietly(self, w: Watch) -> None:
        w.scope.cancel()
        if w.stage is not None and w.stage.filter is not None and self._nursery is not None:
            self._host.retiring(w.stage.filter)
            self._nursery.start_soon(self._host.close_filter, w.stage.filter)

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
        self._telemetry.emit("watch.stopped", **w.fields(), reason="watch_stop")
        self._writer.request()
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
        specs = await self._writer.load()
        if specs is None:
            return []
        restored: list[Watch] = []
        failed: list[Watch] = []
        dropped: list[tuple[WatchSpec, str]] = []
        for spec in specs:
            if spec.owner is None and spec.name.startswith(ROUTE_SPEC_PREFIX):
                if not self._staged.keep_baseline(spec):
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
            routes=self._staged.waiting(),
        )
        self._writer.request()
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
        return [*out.values(), *self._staged.specs()]

"""Declared routes with ``extract`` / ``on_event``: the watch stage per (route id, concrete URI).

A route from the configuration whose changes go through the stage before
its disposition (rfcs/0078): :meth:`RouteStages.declare` at startup,
:meth:`RouteStages.check` dry-runs each filter then (a refusal is a config
error), :meth:`RouteStages.on_subscribed` takes the baseline read when the
subscription is established, :meth:`RouteStages.on_changed` wakes the
stage, and its notices go to the reactor as
:class:`~agentd.events.RouteNotice`. Stages live as long as the manager
(routes are configuration). With ``--watch-state`` their baselines are saved
as specs with no owner, so a restart reports what changed meanwhile.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

import trio

from agentd.core.errors import AgentdError, ConfigError, FilterRejected
from agentd.observe.telemetry import Telemetry
from agentd.watches.catalog import FilterHost
from agentd.watches.extract import shape_of
from agentd.watches.limits import WatchLimits
from agentd.watches.persist import ROUTE_SPEC_PREFIX, StateWriter, route_spec_name
from agentd.watches.stage import StagedRoute, WatchStage
from agentd.watches.state import WatchSpec
from agentd.watches.watch import Watch, WatchRunner, WatchStatus

if TYPE_CHECKING:
    from agentd.upstream.connection import Upstream
    from agentd.watches.sandbox import WatchFilter


class RouteStages:
    """The stages of every staged declared route, by (route id, URI).

    Args:
        routes: The staged declared routes.
        upstreams: Server name -> connection.
        server_for: URI -> server name (the hub's routing rule).
        limits: Watch limits.
        telemetry: ``watch.*`` events of the stages (their ``route`` field names the route).
        host: The filters' catalog and pool.
        runner: Runs each stage's task once its baseline is read.
        writer: ``--watch-state``.
    """

    def __init__(
        self,
        *,
        routes: Iterable[StagedRoute],
        upstreams: Mapping[str, Upstream],
        server_for: Callable[[str], str | None],
        limits: WatchLimits,
        telemetry: Telemetry,
        host: FilterHost,
        runner: WatchRunner,
        writer: StateWriter,
    ) -> None:
        self._routes: dict[str, StagedRoute] = {r.route_id: r for r in routes}
        """Staged declared routes by id (:meth:`declare`)."""
        self._upstreams = upstreams
        self._server_for = server_for
        self._limits = limits
        self._telemetry = telemetry
        self._host = host
        self._runner = runner
        self._writer = writer
        self._stages: dict[tuple[str, str], Watch] = {}
        """Declared-route stages by (route id, URI)."""
        self._baselines: dict[tuple[str, str], WatchSpec] = {}
        """Restored specs whose stage has not started yet."""

    def declare(self, routes: Iterable[StagedRoute]) -> None:
        """Register the staged declared routes (once, at startup, before a restore)."""
        self._routes = {r.route_id: r for r in routes}

    def stages(self) -> list[Watch]:
        """The stages started so far, in start order."""
        return list(self._stages.values())

    async def check(self) -> None:
        """Dry-run every declared route's ``on_event`` once, as ``watch_start`` does (call at startup).

        Raises:
            ConfigError: a filter the sandbox refuses; the setting is
                ``routes[i].on_event`` and the message says why and how to fix it.
        """
        with_filter = [r for r in self._routes.values() if r.on_event is not None]
        if not with_filter:
            return
        from agentd.watches.sandbox import sample_event  # lazy: loads pydantic-monty

        pool = await self._host.pool()
        catalog, denied = self._host.catalog()
        for r in with_filter:
            try:
                await pool.avalidate(
                    r.on_event,
                    limits=self._limits,
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

    # ------------------------------------------------------------------ --watch-state

    def keep_baseline(self, spec: WatchSpec) -> bool:
        """A restored spec with no owner: keep it for its route's stage if that route still exists."""
        if not spec.name.startswith(ROUTE_SPEC_PREFIX):
            return False
        route_names = {route_spec_name(rid, ""): rid for rid in self._routes}
        rid = route_names.get(spec.name[: len(spec.name) - len(spec.uri)])
        if rid is None or spec.name != route_spec_name(rid, spec.uri):
            return False
        self._baselines[(rid, spec.uri)] = spec
        return True

    def waiting(self) -> list[str]:
        """The names of restored baselines whose stage has not started, sorted."""
        return sorted(s.name for s in self._baselines.values())

    def specs(self) -> list[WatchSpec]:
        """What ``--watch-state`` holds for the stages: started ones, then restored ones still waiting."""
        started = [w.spec() for w in self._stages.values() if w.stage is not None]
        names = {(s.name, s.uri) for s in started}
        # Restored baselines whose stage has not started yet (no subscription so far) are kept.
        waiting = [s for s in self._baselines.values() if (s.name, s.uri) not in names]
        return [*started, *waiting]

    # ------------------------------------------------------------------ reactor hooks (sync)

    def on_subscribed(self, route_id: str, server: str, uri: str, nursery: trio.Nursery | None) -> None:
        """``uri`` of staged route ``route_id`` is subscribed: start its stage (never blocks).

        The stage's task takes the baseline read at once, so the first change
        after the subscription is reported. A re-established subscription
        keeps its stage (the synthetic change that follows re-reads it).
        """
        self._stage(route_id, uri, server, nursery)

    def on_changed(
        self, route_id: str, changes: Iterable[tuple[str, str | None]], nursery: trio.Nursery | None
    ) -> None:
        """Staged route ``route_id`` is due: wake the stage of every ``(uri, server)`` (never blocks).

        A URI with no stage yet (no ``established`` was seen) gets one now; its
        baseline is this read, so this one change is not reported.
        """
        for uri, server in changes:
            w = self._stage(route_id, uri, server, nursery)
            if w is not None:
                w.changed = True
                w.wake()

    def _stage(
        self, route_id: str, uri: str, server: str | None, nursery: trio.Nursery | None
    ) -> Watch | None:
        w = self._stages.get((route_id, uri))
        if w is not None:
            return w
        route = self._routes.get(route_id)
        server = server or self._server_for(uri)
        if route is None or server is None or server not in self._upstreams or nursery is None:
            return None
        w = Watch(name=route_id, uri=uri, session="", on_event=route.on_event, server=server, route=route)
        w.wake_send, w.wake_recv = trio.open_memory_channel[None](1)
        self._stages[(route_id, uri)] = w
        nursery.start_soon(self._run, w)
        return w

    # ------------------------------------------------------------------ a stage's task

    async def _run(self, w: Watch) -> None:
        # Declared stages live as long as the manager (routes are configuration).
        assert w.wake_recv is not None
        while w.stage is None:
            await self._start(w)
            if w.stage is None:
                # The baseline read failed (reported); the next change tries again.
                await w.wake_recv.receive()
        w.status = WatchStatus.RUNNING  # STARTING -> RUNNING
        # A change that arrived during the baseline read left a wake-up: it is re-read first.
        await self._runner.run(w)

    async def _start(self, w: Watch) -> None:
        """Baseline read and stage for a declared route's URI (diffed against a restored baseline)."""
        assert w.route is not None
        route = w.route
        w.changed = False  # a change during this read sets it again, and is re-read
        try:
            body, mime = await self._runner.read(w)
        except AgentdError as exc:
            self._telemetry.emit(
                "watch.event",
                **w.fields(),
                type="ERROR",
                outcome="error",
                error=f"reading {w.uri!r} for the baseline failed: {exc}",
            )
            return
        filt: WatchFilter | None = None
        if route.on_event is not None:
            filt = await self._host.new_filter(route.on_event)
        w.shape = shape_of(mime) if route.extract == "auto" else route.extract
        saved = self._baselines.pop((route.route_id, w.uri), None)
        baseline = saved.baseline if saved is not None else None
        try:
            stage = WatchStage(
                w.name, w.uri, shape=w.shape, limits=self._limits, filter=filt, baseline=baseline
            )
        except ValueError:
            # A persisted baseline that does not parse: start fresh rather than not at all.
            stage = WatchStage(w.name, w.uri, shape=w.shape, limits=self._limits, filter=filt)
        restored = baseline is not None and stage.baseline() is not None
        w.stage = stage
        if restored:
            # Diff against the persisted baseline: changes made while agentd was down.
            w.saved_baseline = baseline
            await self._runner.process(w, body)
        else:
            try:
                stage.extractor.feed(body)
            except AgentdError as exc:
                self._telemetry.emit(
                    "watch.event", **w.fields(), type="ERROR", outcome="error", error=str(exc)
                )
            w.saved_baseline = stage.baseline()
        self._telemetry.emit(
            "watch.started",
            **w.fields(),
            shape=w.shape,
            filter=w.on_event is not None,
            restored=restored,
        )
        self._writer.request()

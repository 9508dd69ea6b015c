"""Wiring: settings in, exit code out.

:func:`run` builds every part from validated :class:`agentd.config.Settings`
and runs them under one trio nursery: the tree (zygote + children), one
connection per upstream MCP server, the signal watcher, the optional health
and metrics endpoints, and the reactor, whose exit code ends the process.
Nothing here decides anything: decisions live in the reactor, the drivers
and the router.

Output never stops the supervisor: telemetry and published results go
through bounded buffers written by threads (:mod:`agentd.observe.output`). A daemon
whose stdout is closed or full keeps running and counts the lost results
(``outputs_lost``); a once run whose one result cannot be written exits
:attr:`~agentd.core.exitcodes.ExitCode.OUTPUT_FAILED` and says why.

Signals: SIGTERM, SIGINT and SIGHUP drain (no new work; running turns
finish; exit 0 within ``--grace``, else 143); a second one stops at once
(143). SIGHUP does not reload anything.

The end of a run is :mod:`agentd.supervisor.report`, the run's telemetry
and logging :mod:`agentd.supervisor.runlog`, a once run's conversation
:mod:`agentd.supervisor.conversation`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import logging
import os
import signal
import sys
import time
import traceback
import uuid
from functools import partial
from typing import TYPE_CHECKING

import orjson
import trio

from agentd import __version__
from agentd.agent.prefork import PreforkedChild, PreforkedZygote
from agentd.agent.zygote import PREWARM_MODELS_ENV, _rehearse
from agentd.config import ProviderSpec, Settings
from agentd.core.errors import AgentdError, ConfigError
from agentd.core.exitcodes import ExitCode, TerminalStatus
from agentd.core.heap import fix_mmap_threshold, start_collector
from agentd.core.jsonvalue import JSONObject
from agentd.core.limits import raise_open_files_limit
from agentd.events import ReactorEvent, SignalReceived
from agentd.observe.counters import RunCounters
from agentd.observe.errorline import config_error_lines, config_failure, failure_for, internal_failure
from agentd.observe.output import DEFAULT_OUTPUT_BUFFER, LineWriter
from agentd.observe.sdnotify import Notifier
from agentd.observe.telemetry import Telemetry
from agentd.observe.timeline import mark
from agentd.selfmcp.protocol import ProviderFrame, SpawnPayload, ToolSpecFrame
from agentd.selfmcp.server import serve_child
from agentd.state.resume import restore_subscriptions
from agentd.state.sessions import journals_for
from agentd.state.shard import declared_filter, handles, shard_for
from agentd.supervisor.children.tree import Tree
from agentd.supervisor.conversation import OnceConversation, conversation_telemetry, once_conversation, saver
from agentd.supervisor.hub import (
    AGENT_TOOLS,
    SELF_TOOLS,
    AgentToolsConfig,
    SupervisorHub,
    policy_allows,
    server_for,
)
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.reactor import Agent, Hooks, Reactor, open_channel
from agentd.supervisor.loop.subagents import ChildCaps
from agentd.supervisor.report import print_once, run_error, run_summary
from agentd.supervisor.routing.declared import DeclaredSubscriptions
from agentd.supervisor.routing.routes import build_router, make_clock, model_profiles, staged_routes
from agentd.supervisor.routing.sessionroutes import SessionRoutes, SubscriptionCaps
from agentd.supervisor.routing.subscriptions import Subscriptions
from agentd.supervisor.routing.unmatched import at_start, offers_of, unavailable
from agentd.supervisor.runlog import make_telemetry, model_warnings, route_logging
from agentd.supervisor.statusview import RunFacts, start_health, status_document
from agentd.supervisor.toolpolicy import ToolPolicy
from agentd.triggers import mode as modes
from agentd.upstream import Upstream
from agentd.upstream.backoff import RECONNECT_BACKOFF
from agentd.upstream.naming import ToolNameMap
from agentd.watches.limits import WatchLimits
from agentd.watches.manager import WatchManager, watch_limits
from agentd.watches.state import claim

if TYPE_CHECKING:
    from pathlib import Path

    import httpx2

    from agentd.config import ServerSpec
    from agentd.core.prelaunch import EarlyProcess
    from agentd.observe.metrics import MetricsSnapshot
    from agentd.observe.tracing import Tracing
    from agentd.supervisor.children.channel import Journal

#: How long agentd waits at exit for stderr and stdout to take what is still
#: buffered; a stream nobody reads is then given up on (the exit code stands).
EXIT_FLUSH_TIMEOUT = 5.0


def run(
    settings: Settings,
    *,
    closed_fds: frozenset[int] = frozenset(),
    early_servers: dict[str, EarlyProcess] | None = None,
) -> int:
    """Run agentd with validated settings; returns the process exit code.

    Args:
        settings: the validated settings.
        closed_fds: which of stdin/stdout/stderr were closed when agentd
            started (:func:`agentd.observe.output.claim_standard_fds`).
        early_servers: stdio servers already started, by name
            (:mod:`agentd.core.prelaunch`); their connections adopt them, and any
            left over at exit is killed.
    """
    early_servers = early_servers or {}
    try:
        return _run(settings, closed_fds, early_servers)
    finally:
        for early in early_servers.values():
            early.discard()


def _run(settings: Settings, closed_fds: frozenset[int], early_servers: dict[str, EarlyProcess]) -> int:
    try:
        backoff = settings.reconnect_backoff
        limits = watch_limits(settings.watches)
        # One agentd per --state-dir (rfcs/0210); watch state lives in it unless --watch-state says otherwise.
        state_dir = None
        own_watch_state = False
        if settings.state_dir is not None:
            from agentd.state.dir import claim as claim_state_dir

            state_dir = claim_state_dir(settings.state_dir)
            if settings.watch_state is None:
                settings = settings.model_copy(update={"watch_state": state_dir.watch_state})
                own_watch_state = True
        # One agentd per --watch-state file: held until this process exits.
        state_lock = (
            claim(settings.watch_state, own_dir=own_watch_state) if settings.watch_state is not None else None
        )
        conversation = once_conversation(settings)
    except ConfigError as exc:
        # Before telemetry starts: plain lines, the last one the error and its fix (rfcs/0321).
        for line in config_error_lines((exc,)):
            print(line, file=sys.stderr)
        return int(ExitCode.CONFIG)
    # The imports are done: start-up objects frozen, the collector on, before anything is forked (rfcs/0367).
    start_collector()
    # The children (and the zygote forked next) inherit the raised limit (_main asks again: a no-op then).
    raise_open_files_limit()
    # Before any thread starts: a fork copies only the calling thread.
    early_servers.update(_fork_own_servers(settings, early_servers))  # run() discards what is not adopted
    preforked = _prefork(settings)
    # A supervisor lives for months: large read buffers are mapped and unmapped whole
    # instead of fragmenting the heap (rfcs/0355; after the fork: the root keeps glibc's default).
    fix_mmap_threshold()
    telemetry = make_telemetry(settings, fd=2, closed=2 in closed_fds)
    log_handler = route_logging(telemetry)
    # What claiming the state directory moved out of the way (rfcs/0275), now that it can be told.
    for moved in (
        *(state_dir.moved_aside if state_dir else ()),
        *(state_lock.moved_aside if state_lock else ()),
    ):
        telemetry.emit(
            "state.moved_aside",
            file="watch state" if moved.path == settings.watch_state else "lock",
            path=str(moved.path),
            moved_to=str(moved.moved_to),
            problem=moved.problem,
            kept=0,
            fix="never read or written through; inspect or delete it",
        )
    from agentd.observe.tracing import setup as setup_tracing

    tracing = setup_tracing(os.environ, telemetry)
    stdout = LineWriter(
        1,
        max_bytes=DEFAULT_OUTPUT_BUFFER,
        closed=1 in closed_fds,
        on_error=lambda error: telemetry.emit("output.failed", stream="stdout", error=error),
        name="agentd-stdout",
    )
    if 1 in closed_fds:
        telemetry.emit(
            "output.unavailable",
            stream="stdout",
            reason="closed when agentd started; results are lost (counted)",
        )
    try:
        code = int(
            trio.run(
                _main,
                settings,
                telemetry,
                stdout,
                backoff,
                limits,
                preforked,
                early_servers,
                tracing,
                conversation,
            )
        )
    except KeyboardInterrupt:
        code = int(ExitCode.DRAIN_TIMEOUT)
        telemetry.fail(failure_for(code))
    except Exception as exc:  # a bug: say so plainly, exit 1, never a hang
        telemetry.emit(
            "supervisor.internal_error",
            error=f"{type(exc).__name__}: {exc}",
            traceback="".join(traceback.format_exception(exc)),
        )
        code = int(ExitCode.CRASHED)
        telemetry.fail(internal_failure(exc))
    finally:
        if state_lock is not None:
            state_lock.release()
        if state_dir is not None:
            state_dir.release()
    # Within the drain grace: the spans of the last turns are not lost on SIGTERM.
    if tracing is not None and not tracing.shutdown(min(EXIT_FLUSH_TIMEOUT, settings.grace)):
        telemetry.emit("tracing.export_failed", error="not all spans were exported at exit", spans=None)
    logging.getLogger().removeHandler(log_handler)
    stdout.close(EXIT_FLUSH_TIMEOUT)
    telemetry.close(EXIT_FLUSH_TIMEOUT)
    return code


def _fork_own_servers(settings: Settings, started: dict[str, EarlyProcess]) -> dict[str, EarlyProcess]:
    """agentd's own stdio servers, forked from this process (rfcs/0366); their connections adopt them."""
    from agentd.core.prelaunch import fork_server, forkable

    forked: dict[str, EarlyProcess] = {}
    for name, spec in settings.servers.items():
        if (
            name in started
            or spec.command is None
            or not forkable(spec.command, spec.args, spec.env, spec.cwd)
        ):
            continue
        proc = fork_server(spec.command, spec.args, env=spec.env, cwd=spec.cwd)
        if proc is not None:
            forked[name] = proc
    return forked


def _prefork(settings: Settings) -> PreforkedChild | PreforkedZygote | None:
    """Forked from this process before trio starts: a once run's root (rfcs/0185), else the
    first zygote (rfcs/0365); None when neither could be (a fresh zygote is started then)."""
    from agentd.agent.prefork import prefork_root, prefork_zygote
    from agentd.supervisor.routing.routes import model_profiles

    default_profile, route_profiles = model_profiles(settings)
    # The models a started agent may be given (rfcs/0370): those the operator named, and no other.
    child_models = frozenset(
        {default_profile.model, *(p.model for p in route_profiles.values())}
        | {d.model for d in settings.agents.values() if d.model is not None}
    )
    models = sorted(child_models)
    root = prefork_root(models) if settings.mode == "once" else None
    return root if root is not None else prefork_zygote(models)


def _server_auth(spec: ServerSpec, state_dir: Path | None, telemetry: Telemetry) -> httpx2.Auth | None:
    """A url server's authentication (:func:`agentd.upstream.auth.auth_for`); a command server has none.

    Imported only for url servers: it loads the MCP SDK's OAuth client and a
    JWT library, which a run of stdio servers never uses (rfcs/0225).
    """
    if spec.url is None:
        return None
    from agentd.upstream.auth import auth_for

    return auth_for(spec, state_dir=state_dir, telemetry=telemetry)


async def _main(
    settings: Settings,
    telemetry: Telemetry,
    stdout: LineWriter,
    backoff: tuple[float, ...] | None,
    limits: WatchLimits,
    preforked: PreforkedChild | PreforkedZygote | None = None,
    early_servers: dict[str, EarlyProcess] | None = None,
    tracing: Tracing | None = None,
    conversation: OnceConversation | None = None,
) -> int:
    started_wall = time.monotonic()
    now = trio.current_time()
    # Room for connection floods on the health port, and for many children and servers.
    _nofile_before, nofile = raise_open_files_limit()
    telemetry.emit(
        "supervisor.start",
        mode=settings.mode,
        model=settings.model,
        servers=sorted(settings.servers),
        pid=os.getpid(),
        open_files=nofile,
    )
    if conversation is not None:
        conversation_telemetry(conversation, telemetry)
    # Under systemd (Type=notify): read and drop NOTIFY_SOCKET before any child starts.
    notifier = Notifier.from_environ(os.environ, telemetry=telemetry)

    driver = modes.make_driver(
        settings.mode,
        interval=settings.interval if settings.mode in ("loop", "schedule") else None,
        cron=settings.cron if settings.mode == "schedule" else None,
        session=settings.session if settings.mode == "loop" else None,
        now_mono=now,
        now_wall=_dt.datetime.now(_dt.UTC),
    )
    # The run's counter set first: the router, the upstreams and the reactor count into it.
    counters = RunCounters()
    router = build_router(settings, on_drop=counters.drop)
    budget = Budget(
        max_steps=settings.budget_steps,
        max_tokens=settings.budget_tokens,
        deadline_at=(now + settings.deadline) if settings.deadline else None,
        max_usd=settings.budget_usd,
    )
    model_warnings(settings, telemetry)
    governor = RestartGovernor(intensity=settings.max_restarts, period=settings.restart_period)
    clock = driver.source if isinstance(driver, modes.Schedule) else make_clock(settings, now=now)

    json_out = settings.output == "json"
    once = settings.mode == "once"
    from agentd.observe.streamjson import Causes, StreamJson

    # A once run's id names its conversation (a continued one keeps its id); others get a fresh one.
    session_id = conversation.session_id if conversation is not None else str(uuid.uuid4())
    stream = (
        StreamJson(stdout, truncate=settings.output_truncate, session_id=session_id)
        if settings.output == "stream-json"
        else None
    )
    causes = stream.causes if stream is not None else Causes()
    telemetry.add_tap(stream.on_event if stream is not None else causes.on_event)
    if stream is not None:
        stream.start(settings, routes=[r.id for r in router.routes()])

    def publish(agent: Agent, status: TerminalStatus, text: str, idle: bool) -> None:
        if once:
            return  # once prints its one result at exit
        if stream is not None:
            stream.reply(agent=agent.id, route=agent.route, status=status, text=text)
            return
        if json_out:
            from agentd.observe.telemetry import _now_rfc3339

            line = orjson.dumps(
                {
                    "agent": agent.id,
                    "route": agent.route,
                    "status": status,
                    "result": text,
                    "ts": _now_rfc3339(),
                    "cause": causes.of(agent.id),
                }
            )
        else:
            line = text.encode(errors="replace")
        # Never blocks: a full, closed or unread stdout loses this result
        # (counted as outputs_lost), never the daemon.
        stdout.put(line + b"\n")

    # The supervisor's model, system prompt and settings, and those of routes that name their own.
    default_profile, route_profiles = model_profiles(settings)
    providers = {name: _provider_payload(name, p) for name, p in settings.providers.items()}
    # The models a started agent may be given (rfcs/0370): those the operator named, and no other.
    child_models = frozenset(
        {default_profile.model, *(p.model for p in route_profiles.values())}
        | {d.model for d in settings.agents.values() if d.model is not None}
    )
    models = sorted(child_models)

    async with trio.open_nursery() as nursery:
        journals = journals_for(settings, telemetry)
        warm_root = settings.mode == "loop" and settings.session == "warm"
        shard = shard_for(settings.shard)
        if journals is not None:
            await trio.to_thread.run_sync(journals.scan)
        # The reactor's channel first: every part below sends into it.
        channel = open_channel()
        events = channel[0]
        upstreams: dict[str, Upstream] = {}
        for name, spec in settings.servers.items():
            # [watches] resubscribe_attempts and its backoff govern every resource subscription.
            upstreams[name] = Upstream(
                spec,
                events,
                telemetry,
                max_read_bytes=settings.max_read_bytes,
                tool_timeout=spec.timeout or settings.tool_timeout,
                auth=_server_auth(spec, settings.state_dir, telemetry),
                early=(early_servers or {}).get(name),
                backoff=backoff or RECONNECT_BACKOFF,
                resubscribe_backoff=backoff or limits.resubscribe_delays(),
                resubscribe_attempts=limits.resubscribe_attempts,
                counters=counters,
            )
        staged = staged_routes(settings)  # declared routes with extract/on_event (rfcs/0078)
        required = frozenset(n for n, s in settings.servers.items() if s.required)
        # The one place that decides which upstream subscriptions are made and released (rfcs/0253).
        subscriptions = Subscriptions(
            list(settings.subscriptions),
            router,
            required=required,
            keep=None if shard is None else declared_filter(router, shard),
        )
        # The tool policy and the tool names, before the watches and the hub that both use them.
        policy = ToolPolicy.from_settings(settings)
        names = ToolNameMap()
        watches = WatchManager(
            upstreams=upstreams,
            events=events,
            telemetry=telemetry,
            limits=limits,
            server_for=partial(server_for, upstreams),
            state_path=settings.watch_state,
            routes=staged,
            # Filters follow the global and per-server tool policy, under the names agents see.
            tool_allowed=partial(policy_allows, policy, names),
            holds=subscriptions,
            counters=counters,
        )
        # A once root cannot be woken later: no subscribe / watch_* tools for it.
        hub = SupervisorHub(
            events=events,
            upstreams=upstreams,
            telemetry=telemetry,
            watches=watches,
            policy=policy,
            names=names,
            offer_wakeups=not once,
            counters=counters,
            agents=AgentToolsConfig(
                definitions=settings.agents, models=child_models, max_depth=settings.max_depth
            ),
        )
        tree = Tree(
            events=events,
            serve_child=partial(_serve_bound_child, hub),
            telemetry=telemetry,
            spawn_timeout=settings.spawn_timeout,
            # The zygote prepares these models' providers (TLS, prices, a cloud SDK) before forking.
            zygote_env={PREWARM_MODELS_ENV: orjson.dumps(models).decode()},
            # A once run's root is already forked and warming up: no zygote to wait for.
            use_zygote=not isinstance(preforked, PreforkedChild),
            preforked=preforked if isinstance(preforked, PreforkedChild) else None,
            # ... and the agents that root starts fork from a zygote started then (rfcs/0370).
            lazy_zygote=isinstance(preforked, PreforkedChild),
            forked_zygote=preforked if isinstance(preforked, PreforkedZygote) else None,
        )
        declared = DeclaredSubscriptions(
            subscriptions, upstreams, events=events, telemetry=telemetry, nursery=nursery
        )
        lost: list[tuple[str, str]] = []
        if journals is not None:
            # Journaled sessions' self-subscriptions: routes now, upstream subscriptions once connected;
            # the agents they had started did not survive the restart (rfcs/0370).
            lost = restore_subscriptions(journals, router, subscriptions, upstreams, telemetry)

        def spawn(agent: Agent) -> None:
            mark("supervisor.spawn", agent.id)
            profile = route_profiles.get(agent.route or "", default_profile)
            # The route's tool policy (allowed/disallowed, read-only); a started agent's scope and depth.
            hub.bind(agent.id, agent.route, scope=agent.scope, depth=agent.depth)
            # A once root continues its conversation's history, and its turn is saved (rfcs/0303).
            once_root = conversation is not None and agent.role == "root"
            model = agent.model or profile.model
            payload = SpawnPayload(
                agent=agent.id,
                model=model,
                system=agent.system if agent.system is not None else profile.system,
                instruction=agent.instruction,
                tools=tuple(ToolSpecFrame.model_construct(**spec) for spec in hub.tool_specs(agent.id)),
                model_timeout=settings.model_timeout,
                max_turn_steps=settings.max_turn_steps,
                model_settings=profile.model_settings,
                # Only the endpoint its model names: no child holds another endpoint's headers.
                providers={k: v for k, v in providers.items() if model.startswith(k + ":")},
                # Warm sessions' turns go to their journal; a once root's to its conversation; a
                # started agent's nowhere (it does not outlive agentd: a restart completes it `lost`).
                journal=(
                    journals is not None and agent.role != "child" and (agent.role != "root" or warm_root)
                )
                or (once_root and conversation is not None and conversation.saving is not None),
                history=conversation.history if once_root and conversation is not None else (),
                traceparent=tracing.traceparent(agent.id) if tracing is not None else None,
            )
            # Turns that are kept: warm sessions' in their journals, a once root's in its conversation.
            journal: Journal | None = None
            if once_root and conversation is not None and conversation.saving is not None:
                journal = saver(conversation.saving, session_id, telemetry, agent.id)
            elif payload.journal and journals is not None:
                journal = journals.journal_for(agent)
            if (
                journals is not None
                and agent.session is not None
                and journals.resumable(agent.session) is not None
            ):
                nursery.start_soon(journals.spawn_resumed, tree, agent.id, agent.session, payload, journal)
                return
            tree.spawn(agent.id, payload, journal=journal)

        def unsubscribe(server: str, uri: str) -> None:
            nursery.start_soon(_unsubscribe, upstreams[server], uri)

        def pause(server: str, paused: bool) -> None:
            up = upstreams.get(server)
            if up is None:
                return
            if paused:
                up.pause_updates()
                return
            missed = up.resume_updates()
            if missed:
                nursery.start_soon(up.post_possibly_changed, missed)

        def kill(agent_id: str) -> None:
            child = tree.children.get(agent_id)
            if child is not None:
                nursery.start_soon(tree.terminate, child)

        hooks = Hooks(
            spawn=spawn,
            kill=kill,
            kill_all=lambda: nursery.start_soon(tree.terminate_all),
            unsubscribe=unsubscribe,
            publish=publish,
            pause=pause,
            readiness=notifier.readiness,
            draining=notifier.draining,
        )
        reactor = Reactor(
            driver=driver,
            router=router,
            budget=budget,
            governor=governor,
            hooks=hooks,
            telemetry=telemetry,
            instruction=settings.instruction or "",
            grace=settings.grace,
            mode=settings.mode,
            session=settings.session,
            clock=clock,
            required=required,
            channel=channel,
            watches=watches,
            staged={s.route_id: s for s in staged},
            declared=declared,
            subscriptions=subscriptions,
            journals=journals,
            handles=None if shard is None else partial(handles, shard),
            counters=counters,
            caps=SubscriptionCaps(
                per_session=settings.max_self_subscriptions_per_session,
                total=settings.max_self_subscriptions,
            ),
            child_caps=ChildCaps(
                max_depth=settings.max_depth,
                max_children=settings.max_children,
                max_agents=settings.max_agents,
            ),
        )

        reactor.restore_lost(lost, now)
        nursery.start_soon(_watch_signals, events)
        # The zygote's imports (~0.4 s) and the servers' start-ups overlap.
        async with trio.open_nursery() as starting:
            starting.start_soon(nursery.start, tree.run)
            starting.start_soon(_rehearse_server)
            for up in upstreams.values():
                starting.start_soon(nursery.start, up.run)
        declared.refresh("start")
        if shard is not None:
            telemetry.emit("shard.assigned", index=shard.index, count=shard.count)
        await nursery.start(watches.run)
        try:
            await watches.check_routes()  # a declared on_event the sandbox refuses is a config error
        except ConfigError as exc:
            telemetry.fail(config_failure((exc,)))
            nursery.cancel_scope.cancel()
            return int(ExitCode.CONFIG)
        # Before the reactor turns, so its handlers never race this direct route table.
        reactor.queue_startup_notices(await watches.restore(_StartupRoutes(reactor.session_routes)))
        # Every server's first attempt settled and the saved routes are back: what the settings
        # name and nothing offers is said once, now (rfcs/0315); later catalog changes say nothing.
        restored = any(route.kind in ("self", "watch") for route in router.routes())
        for finding in at_start(
            settings,
            offers_of(upstreams),
            restored=restored,
            self_tools=[*(tool.name for tool in SELF_TOOLS), *sorted(AGENT_TOOLS)],
            told=declared.unresolved,  # subscription.unresolved already said these
        ):
            telemetry.emit("config.warning", **finding.fields())

        def snapshot() -> MetricsSnapshot:
            return dataclasses.replace(reactor.metrics_snapshot(), outputs_lost=stdout.dropped)

        facts = RunFacts(
            version=__version__,
            mode=settings.mode,
            model=settings.model,
            pid=os.getpid(),
            started=trio.current_time() - (time.monotonic() - started_wall),
            show_content=settings.status_show_content,
        )

        def status() -> JSONObject:
            return status_document(
                reactor,
                facts,
                upstreams=upstreams,
                tools_running=hub.running(),
                watches=watches.watches(),
                now=trio.current_time(),
                wall=time.time(),
            )

        if settings.health_addr or settings.metrics_addr:
            await start_health(settings, reactor, telemetry, nursery, snapshot, status)

        if notifier.watchdog_interval is not None:  # WatchdogSec= only: otherwise no timer at all
            from agentd.observe.health import reactor_probe

            nursery.start_soon(notifier.watchdog, reactor_probe(events))
        # The first connection attempts settled: the reactor starts from what the servers are now.
        code = await reactor.run(server_states={name: up.state for name, up in upstreams.items()})
        notifier.stopped(int(code))
        await reactor.reap()
        if code is ExitCode.REQUIRED_SERVER and reactor.status.required_failed_error is not None:
            telemetry.emit(
                "supervisor.required_server_failed",
                server=reactor.status.required_failed,
                error=reactor.status.required_failed_error,
            )
        if once:
            code = await print_once(
                reactor,
                code,
                json_out,
                time.monotonic() - started_wall,
                telemetry,
                stdout,
                stream,
                session_id,
                settings,
            )
        elif stream is not None:
            summary = run_summary(reactor, code, time.monotonic() - started_wall, session_id, settings)
            stream.result({"status": "stopped", **summary})
        telemetry.emit(
            "supervisor.exit",
            exit_code=int(code),
            status=reactor.status.root_status if once else "stopped",
            # The same counter set /metrics reads (agentd.observe.counters).
            counters={**counters.totals(), "outputs_lost": stdout.dropped},
            cost_usd=budget.cost_usd(),
            router=router.counters(),
            dropped=counters.dropped_by_reason(),
            telemetry_dropped=telemetry.dropped,
            # A run that went on without a server does not end looking clean (rfcs/0315).
            servers_unavailable=unavailable(reactor.readiness.server_states, reactor.readiness.server_errors)
            or None,
            duration_s=round(time.monotonic() - started_wall, 3),
        )
        if code is not ExitCode.OK:
            # The stream's last line (written at close): what happened and the fix (rfcs/0321).
            telemetry.fail(failure_for(code, run_error(reactor, code, settings)))
        nursery.cancel_scope.cancel()
    return int(code)


def _provider_payload(name: str, spec: ProviderSpec) -> ProviderFrame:
    """A ``[providers.NAME]`` table as the spawn payload carries it."""
    return ProviderFrame.model_validate(spec.config(name).to_payload())


async def _serve_bound_child(hub: SupervisorHub, agent: str, stream: trio.SocketStream) -> None:
    """Serve a child's self-MCP channel; then forget its route binding."""
    try:
        await serve_child(hub, agent, stream)
    finally:
        hub.release(agent)


class _StartupRoutes:
    """The route table for restoring ``--watch-state`` before the reactor runs (direct calls).

    Safe only before :meth:`Reactor.run`: afterwards the reactor alone touches its routes.
    """

    def __init__(self, routes: SessionRoutes) -> None:
        self._routes = routes

    async def add(self, *, session: str, name: str, uri: str) -> None:
        self._routes.add_watch(session, name, uri)

    async def remove(self, *, session: str, name: str) -> None:
        self._routes.remove_watch(session, name)


async def _rehearse_server() -> None:
    """Warm the SDK's lazy paths on the supervisor side too, so the first child is not slower.

    Untraced: the rehearsal is agentd's warm-up, not a user's tool call (its
    spans would be ``tools/call rehearsal`` traces of their own).
    """
    from agentd.observe.tracing import untraced

    with untraced():
        await _rehearse()


async def _watch_signals(events: trio.MemorySendChannel[ReactorEvent]) -> None:
    # SIGHUP drains like SIGTERM: a daemon whose terminal or supervisor hangs
    # up stops cleanly instead of dying mid-turn (there is no reload).
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT, signal.SIGHUP) as signals:
        async for signum in signals:
            await events.send(SignalReceived(signum=signum))


async def _unsubscribe(upstream: Upstream, uri: str) -> None:
    with contextlib.suppress(AgentdError):
        await upstream.unsubscribe(uri)

"""The closed vocabulary of agentd's telemetry: every event, its level and its fields.

Size: over 600 lines because it is one table, a declaration per event, that
``docs/telemetry.md`` is generated from; split, the closed list would have no
one place.

Every line agentd writes on stderr names one event declared here.
:class:`agentd.observe.telemetry.Telemetry` takes the line's level from the
declaration (:attr:`EventSpec.level`, or :attr:`EventSpec.level_by` for the
events whose level follows a field, e.g. ``server.state`` is an error when
the server ``failed``), drops it below ``--log-level``, and reports an event
or a field that is not declared here with one ``telemetry.undeclared`` line
(a bug in agentd, never the user's).

``docs/telemetry.md`` is generated from this module (``python -m
agentd.observe.vocabulary > docs/telemetry.md``); a test fails when it is stale, when
code emits a name that is not declared, or passes a field the declaration
does not list.

Every line also carries the common fields :data:`COMMON_FIELDS`: ``ts``,
``level``, ``severity`` (the same level in the spelling Google Cloud Logging
and other collectors read as the entry's severity) and ``event``.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

Level = Literal["debug", "info", "warning", "error"]
"""How much an event matters: ``--log-level`` drops the events below it."""

LEVELS: tuple[Level, ...] = get_args(Level)
#: A level's rank: higher is more severe.
LEVEL_RANK: Mapping[str, int] = {name: rank for rank, name in enumerate(LEVELS)}
#: A level as Cloud Logging's ``severity`` (LogSeverity names).
SEVERITY: Mapping[str, str] = {"debug": "DEBUG", "info": "INFO", "warning": "WARNING", "error": "ERROR"}

#: Fields every line has, ahead of the event's own.
COMMON_FIELDS: tuple[str, ...] = ("ts", "level", "severity", "event")


@dataclass(frozen=True, slots=True)
class EventSpec:
    """One declared event.

    Attributes:
        name: the event name (``area.what``).
        level: its level.
        summary: what it means, in one sentence (the reference's text).
        fields: the fields it may carry, besides :data:`COMMON_FIELDS`.
        level_by: a field and its values that change the level (e.g.
            ``("state", {"failed": "error"})``).
    """

    name: str
    level: Level
    summary: str
    fields: tuple[str, ...] = ()
    level_by: tuple[str, Mapping[str, Level]] | None = None

    def level_for(self, fields: Mapping[str, object]) -> Level:
        """The level of one line of this event with ``fields``."""
        if self.level_by is not None:
            key, levels = self.level_by
            value = fields.get(key)
            if isinstance(value, str) and value in levels:
                return levels[value]
        return self.level


def _e(
    name: str,
    level: Level,
    summary: str,
    fields: str = "",
    level_by: tuple[str, Mapping[str, Level]] | None = None,
) -> EventSpec:
    return EventSpec(name, level, summary, tuple(fields.split()), level_by)


_WATCH = "watch uri session route"
_ROUTE_WATCH = "agent route session uri watch kind"

# One row per event: name, level, summary, fields (the formatter leaves the
# table alone, so that a row reads across and a grep finds the whole declaration).
# fmt: off
#: Every event agentd writes, by name.
EVENTS: Mapping[str, EventSpec] = {
    s.name: s
    for s in (
        # -- the supervisor ----------------------------------------------------------
        _e("supervisor.start", "info", "agentd started: its mode, model, servers and process.", "mode model servers pid open_files"),
        _e("supervisor.exit", "info", "agentd is exiting: the exit code, the once root's status (daemons: stopped), counters, cost, drops, the servers not connected at the end (named with their state and error) and how long it ran.", "exit_code status counters cost_usd router dropped telemetry_dropped servers_unavailable duration_s"),
        _e("run.failed", "error", "The run failed (a non-zero exit): always the stream's last line, with what happened and the fix; message is the plain line agentd: error: WHAT — fix: HOW (rfcs/0321).", "exit_code kind error fix message"),
        _e("supervisor.internal_error", "error", "A bug inside agentd ended the run (exit 1); the traceback is attached.", "error traceback"),
        _e("supervisor.required_server_failed", "error", "A required MCP server failed: the run ends with exit 6.", "server error"),
        _e("config.deprecated", "warning", "A deprecated setting name was used.", "setting use"),
        _e("config.warning", "warning", "A setting does nothing now: a route, subscription or tool glob that matches nothing the servers offer, a server that did not start, a reactive run nothing can wake (said once at start, rfcs/0315).", "kind setting value problem fix"),
        _e("budget.unpriced_model", "warning", "A model has no known price: its calls count 0 USD toward --budget-usd.", "model reason"),
        _e("budget.exhausted", "warning", "A tree-wide budget ran out: no new turns start.", "budget kind"),
        _e("budget.deadline", "warning", "The --deadline passed (exit 124).", ""),
        _e("health.listening", "info", "The health endpoint is listening (status: whether /status and the page are served).", "addr port status"),
        _e("metrics.listening", "info", "The metrics endpoint is listening.", "addr port"),
        _e("tracing.enabled", "info", "Traces are exported over OTLP/HTTP (the OTEL_* variables asked for it).", "endpoint service"),
        _e("tracing.unavailable", "warning", "OTEL_* variables ask for traces but the exporter is not installed (the otel extra; the reason says how to add it).", "reason"),
        _e("tracing.export_failed", "warning", "A batch of spans could not be exported; it is dropped.", "error spans"),
        _e("log", "warning", "A record from Python logging (a library's message), with the logger's level.", "logger message error traceback"),
        _e("telemetry.suppressed", "warning", "Repeats of a line from one source were folded into this count (written at the folded line's level).", "of server agent logger source route limit count window_s"),
        _e("telemetry.undeclared", "error", "agentd emitted an event or field its vocabulary does not declare (a bug in agentd).", "of fields"),
        _e("output.failed", "error", "Writing to stdout failed: results are lost (counted).", "stream error"),
        _e("output.unavailable", "warning", "stdout was closed when agentd started: results are lost (counted).", "stream reason"),
        _e("result.unwritten", "error", "The once run's result could not be written (exit 8).", "status exit_code error"),
        _e("sdnotify.enabled", "info", "agentd reports readiness to systemd (NOTIFY_SOCKET).", "socket watchdog_s"),
        _e("sdnotify.failed", "warning", "A notification to systemd could not be sent.", "error sent"),
        _e("sdnotify.unsupported", "warning", "A systemd notification variable could not be used.", "variable error"),
        _e("watchdog.missed", "warning", "The reactor did not answer in time for a watchdog ping.", "interval_s reason"),
        # -- the reactor -------------------------------------------------------------
        _e("reactor.start", "info", "The reactor started turning.", "mode"),
        _e("reactor.waiting", "info", "The reactor waits for servers before the first turn.", "servers note"),
        _e("reactor.refused", "warning", "A child's request arrived while its agent was stopping; it was refused.", "agent phase report"),
        _e("ready.changed", "info", "Readiness (/readyz) changed, with the reason.", "ready reason"),
        _e("drain.start", "info", "A stop signal arrived: draining.", "signal agents grace_s"),
        _e("drain.abort", "warning", "A second stop signal: stopping at once (exit 143).", "signal"),
        _e("drain.timeout", "error", "Draining did not finish within --grace (exit 143).", "agents grace_s"),
        _e("governor.breaker_open", "error", "Too many restarts within --restart-period: the restart breaker opened.", "agent route"),
        _e("loop.shift", "info", "Loop mode starts a shift of the root agent.", "agent warm"),
        _e("loop.reenter", "info", "Loop mode re-enters the root agent after a pause (idle: the shift changed nothing, so the pause backs off).", "after_s idle"),
        _e("timer.fire", "info", "The interval or cron clock fired.", ""),
        _e("timer.coalesced", "info", "A clock fire was merged into one already pending.", "reason"),
        _e("catalog.changed", "info", "A server's resource list changed (declared patterns are resolved again).", "server uris"),
        # -- resources and routes -----------------------------------------------------
        _e("resource.updated", "info", "A resource changed (or possibly changed): which route took it and how.", "server uri kind route outcome startup reason"),
        _e("resource.reread_skipped", "info", "A route switched off the start-up re-read of a URI.", "route server uri"),
        _e("route.enqueued", "debug", "An update was queued on its route.", "route uri"),
        _e("route.coalesced", "debug", "An update merged into one already queued for its URI.", "route uri"),
        _e("route.dropped", "warning", "A route's overflow policy (or a budget) dropped an update.", "route uri reason incoming"),
        _e("route.blocked", "warning", "A blocking route is full: its server's updates pause.", "route uri"),
        _e("route.deferred", "debug", "A route's queue was full: the change waits aside and is queued as deliveries make room (rfcs/0372).", "route uri"),
        _e("route.deliver", "info", "A route delivers its debounced updates to an agent.", "route uris notices"),
        _e("route.requeued", "info", "A delivery was put back on its route (its session was busy or gone).", "agent route session uri watch"),
        _e("session.deliver", "info", "A delivery goes into a warm session's next turn.", "session route agent watch started"),
        _e("upstream.paused", "info", "A server's update streams paused (a blocking route is full).", "server route"),
        _e("upstream.resumed", "info", "A server's update streams resumed.", "server route"),
        # -- agents ---------------------------------------------------------------------
        _e("subagent.spawn", "info", "An agent is being started (an agent another started names its parent and depth).", "agent route session role parent depth type"),
        _e("subagent.start", "info", "An agent started another with agent_start (rfcs/0370).", "agent child depth type session tools"),
        _e("subagent.lost", "warning", "A restored session had started this agent before agentd restarted: it completes lost.", "agent session"),
        _e("subagent.cancel", "info", "An agent cancelled one it started (agent_cancel).", "agent child reason"),
        _e("subagent.deadline", "warning", "An agent another started reached its deadline: it is stopped and completes deadline.", "agent parent"),
        _e("subagent.limit", "info", "An agent reached its own limit or an ancestor's (steps, tokens, dollars, deadline): it stops at this turn boundary.", "agent limit parent"),
        _e("subagent.started", "info", "An agent's child process is running (forked from the zygote or a fresh interpreter).", "agent pid spawn_ms zygote"),
        _e("subagent.spawn_failed", "warning", "Starting an agent's child failed.", "agent reason"),
        _e("subagent.spawn_fallback", "warning", "The zygote could not fork an agent: a fresh interpreter starts it instead.", "agent reason"),
        _e("subagent.exit", "info", "An agent's child exited: its terminal status (cancelled or lost for an agent another started that agentd ended) and exit code.", "agent status returncode exit_code reason stopped", level_by=("status", {"crashed": "warning", "stalled": "warning", "refused": "warning"})),
        _e("subagent.restart", "warning", "The root agent restarts after a crash.", "agent after_s"),
        _e("turn.end", "info", "An agent's turn ended with a terminal status.", "agent route status idle"),
        _e("reply.suppressed", "debug", "An idle reply (empty or NO_REPLY) was not published.", "agent route watch uri"),
        _e("model.call", "info", "A model call finished: tokens, latency and cost.", "agent provider model input_tokens output_tokens cached_input_tokens cache_creation_input_tokens latency_ms cost_usd"),
        _e("model.retry", "warning", "A model call is retried after a 429, a 5xx or a transport error.", "agent provider attempt delay_s reason"),
        _e("model.fatal", "error", "The model provider is unusable (auth failed, unreachable): exit 4.", "agent error"),
        _e("tool.call", "info", "A tool call finished (in the supervisor's hub): server, tool and latency.", "agent server tool latency_ms error"),
        _e("tool.refused", "warning", "The model called a tool it was not offered: answered 'unknown tool'.", "agent tool reason"),
        _e("tool.content_omitted", "info", "Part of a tool result reached the model as a placeholder (audio, a binary resource, an image it cannot take).", "agent tool kind mime_type bytes reason fix", level_by=("reason", {"model_takes_no_images": "warning", "invalid_base64": "warning"})),
        _e("child.stderr", "warning", "A line an agent's child wrote on its stderr.", "source line"),
        _e(
            "zygote.ready",
            "info",
            "The zygote (warm template process) is ready to fork agents; `forked`: forked from the "
            "supervisor at start (rfcs/0365), else a fresh interpreter (a replacement, or the fork was off).",
            "pid replaced forked",
        ),
        _e("zygote.degraded", "warning", "The zygote is unusable: agents start from a fresh interpreter.", "pid reason fallback"),
        _e("zygote.start_failed", "warning", "The zygote could not start; retried after a backoff.", "attempt error retry_in_s"),
        _e("self.subscribe", "info", "An agent subscribed to a URI (the subscribe self-tool).", "agent server uri"),
        _e("self.unsubscribe", "info", "An agent's subscription ended (the unsubscribe self-tool or its exit).", "agent server uri reason kept"),
        _e("self.subscribe_failed", "warning", "The server refused (or did not confirm) a subscription a model asked for (subscribe, watch_start); the model got the error.", "agent session server uri watch error"),
        _e("limit.reached", "warning", "A cap on what a model may create refused a subscribe or watch_start; said once per hit, until one of that scope goes (rfcs/0265).", "limit value agent session uri watch"),
        # -- upstream MCP servers ----------------------------------------------------
        _e("server.state", "info", "An upstream MCP server changed state.", "server state attempt error", level_by=("state", {"failed": "error", "restarting": "warning"})),
        _e("upstream.connected", "info", "Connected to an upstream MCP server: the transport actually used, the negotiated version, its era, what became of the server/discover probe and the protocol setting; `process` (stdio): `forked` (agentd's own server, forked from the supervisor, rfcs/0366), `early` (launched before agentd's imports) or `exec` (started for this connection).", "server transport protocol_version era probe protocol process ms"),
        _e("upstream.fallback", "info", "A connection try failed in a way that points to another era or transport; the next try follows at once.", "server tried next error"),
        _e("upstream.protocol_counteroffer", "warning", "A server answered the pinned protocol version with another one (the connection uses the server's).", "server protocol protocol_version fix"),
        _e("upstream.connect_failed", "warning", "A connection attempt to an MCP server failed.", "server attempt error"),
        _e("upstream.failed", "error", "An MCP server failed after its retries.", "server attempts error"),
        _e("upstream.lost", "warning", "The connection to an MCP server was lost.", "server reason"),
        _e("upstream.unstable", "warning", "An MCP server keeps dropping right after connecting.", "server attempt error note"),
        _e("upstream.tools_changed", "info", "An MCP server's tool list changed.", "server tools"),
        _e("upstream.tools_skipped", "warning", "An MCP server lists tools agentd cannot call (task-only tools): they are not offered to models.", "server tools reason"),
        _e("upstream.refresh_failed", "warning", "Re-reading an MCP server's catalog failed.", "server kind error"),
        _e("upstream.list_skipped", "debug", "An MCP server does not implement a list (-32601 Method not found), or did not answer the optional resources/templates/list in time: the list is taken as empty (templates: as last known) and not asked again on this connection.", "server method reason"),
        _e("upstream.list_failed", "warning", "An MCP server answered the optional resources/templates/list with an error: its templates stay as last known and the connection goes on.", "server method error"),
        _e("upstream.catalog_stream_lost", "warning", "An MCP server's catalog change stream ended.", "server error"),
        _e("upstream.catalog_stream_failed", "warning", "An MCP server's catalog change stream could not be re-opened.", "server attempts"),
        _e("upstream.transport_error", "warning", "An MCP server's transport reported an error.", "server error"),
        _e("upstream.stdout_garbage", "warning", "A stdio MCP server printed a line that is not JSON-RPC (skipped).", "server bytes preview"),
        _e("upstream.unknown_response", "warning", "A stdio MCP server answered a request nobody made (skipped).", "server id"),
        _e("upstream.oversized", "warning", "A stdio MCP server's message exceeded the cap: its request failed.", "server id cap"),
        _e("upstream.oversized_skipped", "warning", "An oversized stdio message with no request to fail was skipped.", "server bytes"),
        _e("upstream.unsubscribed_update", "warning", "An MCP server pushed an update for a URI nobody subscribed to.", "server uri"),
        _e("upstream.unsubscribe_failed", "warning", "Unsubscribing from a URI failed.", "server uri error"),
        _e("subscription.synced", "info", "A server now carries its subscribed URIs: a listen stream (re)opened with the whole set, or a handshake-era batch subscribed; how many it carries, added and removed.", "server uris added removed attempt ms"),
        _e("subscription.established", "debug", "A URI is newly carried by its server's subscription (one line per URI; `subscription.synced` counts them).", "server uri attempt"),
        _e("subscription.lost", "warning", "A server's listen stream ended: it is re-opened and every URI it carried re-read (a count and a sample of them).", "server uris sample error lived_s updates counted_as_failure"),
        _e("subscription.failed", "error", "Subscriptions failed: refused, or given up after their retries (a count and a sample of the URIs).", "server uris sample attempts error"),
        _e("subscription.unresolved", "warning", "A declared subscription pattern matches no resource.", "pattern required error fix"),
        # -- the state directory (rfcs/0275) ------------------------------------------------
        _e("state.moved_aside", "warning", "A file in the state directory was damaged (agentd's own format), or is not a regular file: it was moved aside, what could be read was kept, and the run goes on.", "file path moved_to problem kept session fix"),
        _e("state.refused", "warning", "A file in the state directory is not agentd's (another user's, or not its format): it is left untouched, never read further or written.", "file path problem fix"),
        # -- durable sessions and shards ---------------------------------------------------
        _e("journal.found", "debug", "A session journal was found at start (restored at its next delivery).", "session turns subscriptions"),
        _e("journal.restored", "info", "A session was restored from its journal into a new agent.", "agent session turns messages dropped_turns"),
        _e("journal.torn", "warning", "A journal's last record was cut short (a crash mid-write): it was dropped.", "path session turns dropped_bytes detail note"),
        _e("journal.failed", "error", "A journal could not be read or written: the session runs without it.", "agent session path error fix"),
        _e("journal.compacted", "info", "A journal went over its token budget: its oldest turns were dropped.", "session tokens max_tokens dropped_turns"),
        _e("journal.subscription_restored", "info", "A restored session's self-subscription is back upstream.", "session server uri"),
        _e("journal.subscription_failed", "warning", "A restored session's self-subscription could not be made.", "session server uri error"),
        _e("conversation.resumed", "info", "A once run continues a saved conversation (--continue, --resume).", "session turns messages dropped_turns"),
        _e("conversation.saved", "debug", "A once run's turn was added to its saved conversation.", "session agent path turns dropped_turns"),
        _e("conversation.unsaved", "warning", "A once run's conversation could not be saved: it cannot be continued.", "session path error fix"),
        _e("shard.assigned", "info", "This replica's shard (--shard INDEX/COUNT).", "index count"),
        _e("shard.skipped", "debug", "A routed change another replica owns was left to it.", "route server uri"),
        # -- watches -------------------------------------------------------------------
        _e("watch.started", "debug", "A watch started.", f"{_WATCH} shape filter restored"),
        _e("watch.subscribed", "debug", "A watch's subscription is established.", f"{_WATCH} attempt"),
        _e("watch.event", "debug", "A watch read its resource: what came out of the extraction and filter.", f"{_WATCH} type outcome error", level_by=("outcome", {"error": "warning"})),
        _e("watch.notice", "info", "A watch sends one notice turn into its session.", f"{_WATCH} lines total waited_s"),
        _e("watch.notice_dropped", "warning", "A watch notice could not be delivered.", f"{_ROUTE_WATCH} reason"),
        _e("watch.resubscribing", "debug", "A watch re-establishes its subscription.", f"{_WATCH} attempt error"),
        _e("watch.failed", "error", "A watch's subscription failed after its retries.", f"{_WATCH} attempts error"),
        _e("watch.stopped", "debug", "A watch stopped.", f"{_WATCH} reason"),
        _e("watch.unsubscribe_failed", "warning", "A stopped watch could not unsubscribe.", f"{_WATCH} error"),
        _e("watch.restored", "debug", "Watches were restored from --watch-state.", "path restored routes dropped failed"),
        _e("watch.restore_dropped", "warning", "A watch from --watch-state could not be restored.", "session watch uri error"),
        _e("watch.state_recovered", "warning", "A torn --watch-state file was recovered.", "path"),
        _e("watch.state_unavailable", "error", "The --watch-state file cannot be written: watches are not persisted.", "path error"),
        _e("watch.state_warning", "warning", "A problem with the --watch-state file.", "path warning"),
    )
}
# fmt: on


def spec(name: str) -> EventSpec | None:
    """The declaration of event ``name`` (None: undeclared)."""
    return EVENTS.get(name)


def render_markdown() -> str:
    """``docs/telemetry.md``: the reference of every event, generated from :data:`EVENTS`."""
    out = [
        "# Telemetry events",
        "",
        "<!-- Generated by `python -m agentd.observe.vocabulary > docs/telemetry.md`; do not edit. -->",
        "",
        "agentd writes one line per event on stderr: NDJSON with `--log-format json`,",
        "every event as a short line with `--log-format text`, progress for a person",
        "(model calls, tool calls, what the model says between them, a summary) with",
        "`--log-format human`, and `auto` (the default) picks human when stderr is a",
        "terminal and JSON otherwise ([docs/terminal.md](terminal.md)). A failed run's",
        "last line is `run.failed` (on a terminal: `agentd: error: WHAT — fix: HOW`).",
        "Every JSON line has",
        "`ts` (RFC 3339, UTC), `level` (`debug`, `info`, `warning`, `error`), `severity`",
        "(the same level as Cloud Logging spells it: `DEBUG`, `INFO`, `WARNING`, `ERROR`)",
        "and `event`, then the event's own fields. `--log-level` (default `info`;",
        "`--verbose` is `debug`) drops the events below it. Routed events carry the",
        "owning `route` id. Secrets never reach a line, and neither does a control",
        "character: the text format shows them as escapes (`\\x1b`, `\\u009b`), JSON lines",
        "as `\\u` escapes, so a model's tool name or URI cannot act on a terminal (rfcs/0270).",
        "",
        "Where a level depends on a field, the table says which values raise it.",
        "",
    ]
    areas: dict[str, list[EventSpec]] = {}
    for s in EVENTS.values():
        areas.setdefault(s.name.split(".", 1)[0], []).append(s)
    for area in sorted(areas):
        out += [f"## `{area}`", "", "| event | level | fields | meaning |", "| --- | --- | --- | --- |"]
        for s in sorted(areas[area], key=lambda s: s.name):
            level = s.level
            if s.level_by is not None:
                key, levels = s.level_by
                level += " (" + ", ".join(f"{v} when `{key}={k}`" for k, v in levels.items()) + ")"  # type: ignore[assignment]
            fields = ", ".join(f"`{f}`" for f in s.fields) or "—"
            out.append(f"| `{s.name}` | {level} | {fields} | {s.summary} |")
        out.append("")
    return "\n".join(out)


def main() -> None:
    """Print the generated reference (``python -m agentd.observe.vocabulary``)."""
    sys.stdout.write(render_markdown())


if __name__ == "__main__":
    main()


__all__ = [
    "COMMON_FIELDS",
    "EVENTS",
    "LEVELS",
    "LEVEL_RANK",
    "SEVERITY",
    "EventSpec",
    "Level",
    "render_markdown",
    "spec",
]

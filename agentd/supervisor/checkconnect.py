"""``agentd check --connect``: start every server, call each model once, and say what works.

Where ``agentd check`` only reads the settings, ``--connect`` does what a
run does first, through the same code: each server is started and connected
by :class:`agentd.upstream.Upstream` (one attempt, its own
``startup_timeout``; the era and transport it found are shown), its tools,
resources and resource templates are listed, and the routes, subscriptions
and tool rules are matched against them (:mod:`agentd.supervisor.routing.unmatched`).
Each model the run would use (``--model`` and every route's own) gets one
minimal request through the provider clients of :mod:`agentd.models`: one
user word, ``max_output_tokens = 1``, no tools; a ``script:`` model is only
loaded. Nothing is written: no state directory is claimed, an OAuth token
is fetched but not cached.

The report is text (default) or one JSON object (``--output json``) on
stdout. Exit status (rfcs/0316): 0 when every server connected and every
model answered (warnings do not fail it), 6 when a server did not connect
(required or not), else 4 when a model call failed; 2 stays what it is for
every command, an invalid setting found before anything started.
"""

from __future__ import annotations

import json
import math
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

import trio

from agentd.config import ServerSpec, Settings
from agentd.core.errors import AgentdError
from agentd.core.exitcodes import ExitCode
from agentd.core.redact import redact
from agentd.core.safetext import escape_controls, escape_json_controls, valid_json
from agentd.events import ReactorEvent, ServerState
from agentd.observe.errorline import Failure, split_fix
from agentd.observe.output import print_line
from agentd.observe.telemetry import NullTelemetry
from agentd.supervisor.hub import AGENT_TOOLS, SELF_TOOLS
from agentd.supervisor.routing.unmatched import Finding, at_start, offers_of
from agentd.upstream import Upstream

__all__ = [
    "MODEL_CHECK_TIMEOUT",
    "ModelCheck",
    "Report",
    "ServerCheck",
    "check_connect",
    "main",
]

MODEL_CHECK_TIMEOUT = 30.0
"""Bound on one model's check, retries included (or ``--model-timeout`` when shorter). The
request asks for one token: a provider that cannot answer it in 30 s is not usable from here,
and a check that hangs on it would be worse than one that says so."""

TEXT_NAMES = 10
"""Most names the text report lists per kind (tools, resources, templates) of one server."""

JSON_NAMES = 200
"""Most names the JSON report lists per kind of one server (``*_count`` has the total)."""

Status = Literal["ok", "failed"]


@dataclass(frozen=True, slots=True)
class ServerCheck:
    """One server: connected or not, how, and what it offers."""

    name: str
    status: Status
    required: bool
    error: str | None = None
    transport: str | None = None
    protocol_version: str | None = None
    era: str | None = None
    probe: str | None = None
    ms: float | None = None
    tools: tuple[str, ...] = ()
    resources: tuple[str, ...] = ()
    templates: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ModelCheck:
    """One model: whether its one minimal call (or, for ``script:``, loading it) worked."""

    model: str
    status: Status
    detail: str
    ms: float | None = None


@dataclass(frozen=True, slots=True)
class Report:
    """Everything ``check --connect`` found."""

    servers: tuple[ServerCheck, ...]
    models: tuple[ModelCheck, ...]
    findings: tuple[Finding, ...] = field(default=())

    def exit_code(self) -> ExitCode:
        """6 if a server did not connect, else 4 if a model failed, else 0."""
        if any(s.status == "failed" for s in self.servers):
            return ExitCode.REQUIRED_SERVER
        if any(m.status == "failed" for m in self.models):
            return ExitCode.FATAL_INFRA
        return ExitCode.OK

    def failure(self) -> Failure | None:
        """The final error line of a failed check (rfcs/0321): what failed and what to check; None when ok."""
        code = int(self.exit_code())
        servers = [s for s in self.servers if s.status == "failed"]
        models = [m for m in self.models if m.status == "failed"]
        if servers:
            kind, fix = (
                "server",
                "check the server's command or URL and its environment, then run agentd check --connect again",
            )
        elif models:
            kind, fix = "provider", "check the model name, its API key and the provider's base URL"
        else:
            return None
        failed = [(f"server {s.name}", s.error or "did not connect") for s in servers]
        failed += [(f"model {m.model}", m.detail) for m in models]
        if len(failed) == 1:
            ((what, why),) = failed
            why, own_fix = split_fix(why)  # a provider's message says which variable to set
            return Failure(kind, f"check --connect: {what} failed: {why}", own_fix or fix, code)
        names = ", ".join(what for what, _ in failed)
        return Failure(kind, f"check --connect: {names} failed (the report on stdout says why)", fix, code)

    def to_json(self) -> dict[str, object]:
        failed = [f"server {s.name}" for s in self.servers if s.status == "failed"]
        failed += [f"model {m.model}" for m in self.models if m.status == "failed"]
        return {
            "ok": not failed,
            "exit_code": int(self.exit_code()),
            "failed": failed,
            "servers": [_server_json(s) for s in self.servers],
            "models": [
                {"model": m.model, "status": m.status, "detail": redact(m.detail), "ms": m.ms}
                for m in self.models
            ],
            "warnings": [{**f.fields(), "message": redact(f.message())} for f in self.findings],
        }

    def to_text(self) -> str:
        lines: list[str] = []
        for s in self.servers:
            required = " (required)" if s.required else ""
            if s.status == "failed":
                lines.append(f"server {s.name}{required}: FAILED — {redact(s.error or 'did not connect')}")
                continue
            how = f"{s.transport}, MCP {s.protocol_version} ({s.era} era, probe {s.probe})"
            lines.append(f"server {s.name}{required}: ok — {how}, {s.ms:g} ms")
            for kind, names in (("tools", s.tools), ("resources", s.resources), ("templates", s.templates)):
                lines.append(f"  {kind} ({len(names)}){': ' + _names(names, TEXT_NAMES) if names else ''}")
        if not self.servers:
            lines.append("servers: none configured")
        if not self.models:
            lines.append("model: none set (a run needs --model)")
        for m in self.models:
            state = "ok" if m.status == "ok" else "FAILED"
            took = f", {m.ms:g} ms" if m.ms is not None else ""
            lines.append(f"model {m.model}: {state} — {redact(m.detail)}{took}")
        for f in self.findings:
            lines.append(f"warning: {redact(f.message())}")
        failed = [f"server {s.name}" for s in self.servers if s.status == "failed"]
        failed += [f"model {m.model}" for m in self.models if m.status == "failed"]
        code = int(self.exit_code())
        warned = f", {len(self.findings)} warning{'s' * (len(self.findings) != 1)}" if self.findings else ""
        if failed:
            lines.append(f"check --connect: FAILED ({', '.join(failed)}){warned} — exit {code}")
        else:
            lines.append(f"check --connect: ok{warned} — exit {code}")
        # Names and errors come from the servers and providers: shown, never obeyed by the terminal.
        return "\n".join(escape_controls(line) for line in lines)


def _names(names: tuple[str, ...], limit: int) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def _server_json(s: ServerCheck) -> dict[str, object]:
    out: dict[str, object] = {
        "name": s.name,
        "status": s.status,
        "required": s.required,
        "error": redact(s.error) if s.error is not None else None,
        "transport": s.transport,
        "protocol_version": s.protocol_version,
        "era": s.era,
        "probe": s.probe,
        "ms": s.ms,
    }
    for kind, names in (("tools", s.tools), ("resources", s.resources), ("templates", s.templates)):
        out[kind] = list(names[:JSON_NAMES])
        out[f"{kind}_count"] = len(names)
    return out


# --------------------------------------------------------------------------- the checks


async def check_connect(settings: Settings, env: Mapping[str, str]) -> Report:
    """Connect every server and check every model concurrently; the report (see the module docstring)."""
    servers: dict[str, ServerCheck] = {}
    models: dict[str, ModelCheck] = {}
    specs = sorted({m for m in (settings.model, *(r.model for r in settings.routes)) if m is not None})
    # Nothing reads the events a connection posts (its state changes): they go nowhere, unbounded
    # but few, since no subscription is made.
    events, _unread = trio.open_memory_channel[ReactorEvent](math.inf)
    telemetry = NullTelemetry()
    upstreams = {name: _upstream(spec, events, telemetry) for name, spec in settings.servers.items()}
    findings: list[Finding] = []
    async with trio.open_nursery() as connections:  # the connections live here until the end
        async with trio.open_nursery() as checks:  # the first attempts and the model calls, together
            for spec in specs:
                checks.start_soon(_check_model, settings, spec, env, models)
            for name, up in upstreams.items():
                checks.start_soon(_connect, connections, name, up, servers)
        # A server that did not connect is its own line of the report, not a warning too.
        findings = [
            f
            for f in at_start(
                settings,
                offers_of(upstreams),
                self_tools=[*(t.name for t in SELF_TOOLS), *sorted(AGENT_TOOLS)],
            )
            if f.kind != "server"
        ]
        connections.cancel_scope.cancel()  # each closes as a run's would: bounded, shielded
    return Report(
        servers=tuple(servers[name] for name in upstreams),
        models=tuple(models[s] for s in specs),
        findings=tuple(findings),
    )


def _upstream(
    spec: ServerSpec, events: trio.MemorySendChannel[ReactorEvent], telemetry: NullTelemetry
) -> Upstream:
    auth = None
    if spec.url is not None:
        from agentd.upstream.auth import auth_for

        # No state directory: a token is fetched to show the credentials work, never cached.
        auth = auth_for(spec, state_dir=None, telemetry=telemetry)
    return Upstream(spec, events, telemetry, auth=auth)


async def _connect(nursery: trio.Nursery, name: str, up: Upstream, out: dict[str, ServerCheck]) -> None:
    """One connection attempt (``Upstream.run`` reports when its first attempt settled)."""
    t0 = trio.current_time()
    await nursery.start(up.run)
    ms = round((trio.current_time() - t0) * 1000, 1)
    required = bool(up.spec.required)
    if up.state is not ServerState.CONNECTED or up.negotiated is None:
        out[name] = ServerCheck(name, "failed", required, error=up.last_error)
        return
    n = up.negotiated
    out[name] = ServerCheck(
        name,
        "ok",
        required,
        transport=n.transport,
        protocol_version=n.protocol_version,
        era=n.era,
        probe=n.probe,
        ms=ms,
        tools=tuple(t.name for t in up.tools),
        resources=tuple(sorted(str(r.uri) for r in up.resources)),
        templates=tuple(t.uri_template for t in up.templates),
    )


async def _check_model(
    settings: Settings, spec: str, env: Mapping[str, str], out: dict[str, ModelCheck]
) -> None:
    from agentd.models import Message, ModelSettings, Prompt, ScriptModel, make_model

    providers = {name: p.config(name) for name, p in settings.providers.items()}
    t0 = time.monotonic()
    try:
        # The cheapest request a provider takes: one token out, no tools, none of the run's
        # model settings (a setting the provider refuses is the run's to find).
        model = make_model(
            spec,
            env=env,
            providers=providers,
            settings=ModelSettings(max_output_tokens=1),
            timeout=min(settings.model_timeout, MODEL_CHECK_TIMEOUT),
        )
    except AgentdError as exc:
        out[spec] = ModelCheck(spec, "failed", str(exc))
        return
    try:
        if isinstance(model, ScriptModel):
            turns = len(model.script.turns)
            out[spec] = ModelCheck(spec, "ok", f"script loaded: {turns} turn{'s' * (turns != 1)}, not run")
            return
        try:
            reply = await model.complete(Prompt(system=None, messages=[Message.user("Say OK.")], tools=[]))
        except AgentdError as exc:
            out[spec] = ModelCheck(spec, "failed", str(exc), ms=_ms(t0))
            return
        usage = reply.usage
        out[spec] = ModelCheck(
            spec,
            "ok",
            f"answered one request ({usage.input_tokens} tokens in, {usage.output_tokens} out)",
            ms=_ms(t0),
        )
    finally:
        await model.aclose()


def _ms(t0: float) -> float:
    return round((time.monotonic() - t0) * 1000, 1)


def main(settings: Settings, *, env: Mapping[str, str] | None = None) -> int:
    """Run the check, print the report (text, or JSON with ``--output json``), return the exit code."""
    report = trio.run(check_connect, settings, os.environ if env is None else env)
    if settings.output == "json":
        text = json.dumps(valid_json(report.to_json()), indent=2, ensure_ascii=False)
        print_line(escape_json_controls(text.encode()).decode())
    else:
        print_line(report.to_text())
    failure = report.failure()
    if failure is not None:
        print_line(failure.line, err=True)
    return int(report.exit_code())

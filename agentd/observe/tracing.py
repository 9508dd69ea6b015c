"""Traces: OpenTelemetry spans of each cause, exported over OTLP/HTTP when the ``OTEL_*`` variables ask.

Off by default. On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` or
``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` is set (or ``OTEL_TRACES_EXPORTER=otlp``),
unless ``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. The
exporter is the optional extra ``agentd[otel]`` (the SDK and the OTLP/HTTP
exporter); the API comes with the ``mcp`` SDK. Every other ``OTEL_*``
variable (headers, timeout, service name, resource attributes) is read by the
SDK as usual.

One trace per cause. The supervisor turns its own telemetry into spans
(:meth:`Tracing.on_event`, a telemetry tap), following the OpenTelemetry GenAI
and MCP semantic conventions::

    notifications/resources/updated URI   (or agentd.timer.fire)   the cause: a root span
      agentd.route ROUTE                  received → delivered (debounce, queueing)
        invoke_agent ROUTE|ROLE           one per turn of an agent
          agentd.spawn                    spawn request → child running
          chat MODEL                      one per model call (from the child's usage report)
          tools/call NAME                 the supervisor's self-MCP server span (the MCP SDK's;
                                          its parent crosses the child process in _meta)
          execute_tool NAME               the hub running it
            MCP send tools/call TOOL      the MCP SDK's client span; traceparent in _meta upstream

The child gets its turn's ``traceparent`` in its spawn payload and makes it
the current context of its turn, so the MCP SDK puts it in the ``_meta`` of
every tool call it sends to the supervisor; the supervisor's self-MCP
server (the SDK's OpenTelemetry middleware) continues the trace from it, and
the SDK's client span injects it into the ``_meta`` of the upstream call.

No content: prompts, completions, tool arguments and results are recorded
only with ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``.

agentd's own warm-up is no one's work: spans started under :func:`untraced`
(the supervisor's rehearsed self-MCP exchange, rfcs/0187) are dropped by the
processor, with every span they parent, wherever the SDK made them.

No idle wake-ups: spans are exported by :class:`QuietBatchProcessor`, whose
thread sleeps without a timeout while nothing is pending (the SDK's batch
processor wakes every few seconds). On exit the pending spans are flushed
within the drain grace (:meth:`Tracing.shutdown`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Span, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from agentd.core.extras import install_hint
from agentd.core.jsonvalue import as_array, get_number

if TYPE_CHECKING:
    # The SDK is the optional extra agentd[otel]: imported at run time only when tracing is on.
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace import Span as SdkSpan
    from opentelemetry.sdk.trace.export import SpanExporter

    from agentd.observe.telemetry import Telemetry

#: Seconds a finished span waits before its batch is exported: spans of one
#: turn go out together, and an idle daemon exports nothing at all.
EXPORT_DELAY = 1.0
#: Spans held at most while the collector is slow or down; beyond, new spans are dropped (counted).
MAX_QUEUE = 4096
#: Spans per export request.
MAX_BATCH = 512
#: Longest text recorded in a span attribute when content capture is on.
MAX_CONTENT_CHARS = 8192
#: Updates whose root span waits for its route's delivery, at most: an update
#: a route coalesced or dropped is never delivered, and its URI may never
#: change again. The oldest goes first (its trace then has no route span).
MAX_PENDING_UPDATES = 1024

_PROPAGATOR = TraceContextTextMapPropagator()
_active: Tracing | None = None
#: Set in the context of agentd's own warm-up (:func:`untraced`): spans started there are not exported.
_UNTRACED = otel_context.create_key("agentd.untraced")
#: The attribute that marks such a span between its start and its end (never exported).
_UNTRACED_ATTRIBUTE = "agentd.untraced"


def enabled_by(env: Mapping[str, str]) -> bool:
    """Whether the standard ``OTEL_*`` variables ask for traces."""
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    exporters = {e.strip().lower() for e in env.get("OTEL_TRACES_EXPORTER", "").split(",") if e.strip()}
    if "none" in exporters:
        return False
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
        or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
        or "otlp" in exporters
    )


def capture_content(env: Mapping[str, str]) -> bool:
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: prompts and completions go in spans."""
    return env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "").strip().lower() == "true"


def active() -> Tracing | None:
    """The process's tracing, when on (the hub wraps tool calls in it)."""
    return _active


@contextlib.contextmanager
def untraced() -> Iterator[None]:
    """No span started here, or in a task started from here, is exported (agentd's own warm-up).

    The MCP SDK makes its spans itself (a client's ``MCP send``, a server's
    ``tools/call``), from the current context of the task that sends or
    serves; trio gives every task started here a copy of this context.
    """
    token = otel_context.attach(otel_context.set_value(_UNTRACED, True))
    try:
        yield
    finally:
        otel_context.detach(token)


class QuietBatchProcessor:
    """A span processor that exports in batches from one thread that never wakes while idle.

    A finished span is queued; the thread wakes, waits :data:`EXPORT_DELAY`
    for more, exports, and sleeps again without a timeout until the next span.
    """

    def __init__(
        self, exporter: SpanExporter, *, on_error: Callable[[str, int], object] | None = None
    ) -> None:
        self._exporter = exporter
        self._on_error = on_error
        self._cond = threading.Condition()
        self._queue: list[ReadableSpan] = []
        self._stopping = False
        self._exporting = False
        self._flush = False
        self.dropped = 0
        self.exported = 0
        self._thread = threading.Thread(target=self._run, name="agentd-otlp", daemon=True)
        self._thread.start()

    # The SDK's SpanProcessor interface, duck-typed: importing the SDK (~60 ms) only when
    # tracing is on. The SDK also calls the private _on_ending; the tracing e2e tests
    # fail if that interface changes.
    def on_start(self, span: SdkSpan, parent_context: otel_context.Context | None = None) -> None:
        # The current context, not the parent's: a server span's parent comes from the
        # request's _meta, while the task that serves it runs in the warm-up's context.
        if otel_context.get_value(_UNTRACED):
            span.set_attribute(_UNTRACED_ATTRIBUTE, True)

    def _on_ending(self, span: SdkSpan) -> None:
        return None

    def on_end(self, span: ReadableSpan) -> None:
        if span.attributes and span.attributes.get(_UNTRACED_ATTRIBUTE):
            return  # agentd's own warm-up (untraced)
        with self._cond:
            if self._stopping or len(self._queue) >= MAX_QUEUE:
                self.dropped += 1
                return
            self._queue.append(span)
            if len(self._queue) == 1 or len(self._queue) >= MAX_BATCH:
                self._cond.notify_all()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._queue and not self._stopping:
                    self._cond.wait()  # no timeout: an idle daemon is not woken
                if not self._queue and self._stopping:
                    return
                if not (self._stopping or self._flush or len(self._queue) >= MAX_BATCH):
                    self._cond.wait(EXPORT_DELAY)  # let the rest of the turn's spans join the batch
                batch, self._queue = self._queue[:MAX_BATCH], self._queue[MAX_BATCH:]
                self._exporting = True
            try:
                self._export(batch)
            finally:
                with self._cond:
                    self._exporting = False
                    if not self._queue:
                        self._flush = False
                    self._cond.notify_all()

    def _export(self, batch: list[ReadableSpan]) -> None:
        from opentelemetry.sdk.trace.export import SpanExportResult

        error: str | None
        try:
            result = self._exporter.export(batch)
        except Exception as exc:  # the collector's problem must never be agentd's
            error = f"{type(exc).__name__}: {exc}"
        else:
            error = None if result is SpanExportResult.SUCCESS else "the collector refused or did not answer"
        if error is None:
            self.exported += len(batch)
            return
        self.dropped += len(batch)
        if self._on_error is not None:
            with contextlib.suppress(Exception):
                self._on_error(error, len(batch))

    def force_flush(self, timeout_millis: int = 30_000) -> bool:
        """Export what is queued now, without the batching delay; wait at most ``timeout_millis``."""
        deadline = time.monotonic() + timeout_millis / 1000
        with self._cond:
            self._flush = bool(self._queue)
            self._cond.notify_all()
            while self._queue or self._exporting:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(left)
            return True

    def shutdown(self, timeout: float = 5.0) -> bool:
        """Flush (bounded by ``timeout`` seconds) and stop the thread."""
        with self._cond:
            self._stopping = True
            self._cond.notify_all()
        self._thread.join(timeout)
        done = not self._thread.is_alive()
        with contextlib.suppress(Exception):
            self._exporter.shutdown()
        return done


class Tracing:
    """The supervisor's spans, built from its telemetry events (a tap) and around tool calls.

    Args:
        provider: the SDK's tracer provider (already made the global one).
        processor: its exporting processor.
        capture: record prompt and completion text.
    """

    def __init__(self, provider: TracerProvider, processor: QuietBatchProcessor, *, capture: bool) -> None:
        self._provider = provider
        self._processor = processor
        self._tracer = provider.get_tracer("agentd")
        self.capture = capture
        self._pending: dict[str, Span] = {}
        """The latest update's root span, by URI, until a route delivers it."""
        self._cause: Span | None = None
        """The delivery span the next spawn or warm turn continues."""
        self._turns: dict[str, Span] = {}
        """Each agent's current ``invoke_agent`` span."""
        self._spawns: dict[str, Span] = {}
        self._starting: dict[str, list[Span]] = {}
        """Each agent's ``agent_start`` tool spans in flight, oldest first: the agents they start
        are their children in the trace (rfcs/0370)."""

    # -- the tap ----------------------------------------------------------------------

    def on_event(self, event: str, f: Mapping[str, object]) -> None:
        """A telemetry tap: every event and step; never raises."""
        try:
            self._on_event(event, f)
        except Exception:
            return

    def _on_event(self, event: str, f: Mapping[str, object]) -> None:
        now = time.time_ns()
        if event == "resource.updated" and f.get("route") is not None:
            uri = str(f.get("uri"))
            method = "notifications/resources/updated"
            span = self._tracer.start_span(
                f"{method} {uri}",
                context=otel_context.Context(),  # a new trace: the update is the cause
                kind=SpanKind.CONSUMER,
                attributes={
                    "mcp.method.name": method,
                    "mcp.resource.uri": uri,
                    "agentd.server": str(f.get("server")),
                    "agentd.route": str(f.get("route")),
                    "agentd.update.kind": str(f.get("kind")),
                },
                start_time=now,
            )
            span.end(now)
            self._pending.pop(uri, None)  # the newest update of a URI goes last in the order
            self._pending[uri] = span
            if len(self._pending) > MAX_PENDING_UPDATES:
                del self._pending[next(iter(self._pending))]
        elif event == "timer.fire":
            span = self._tracer.start_span(
                "agentd.timer.fire", context=otel_context.Context(), start_time=now
            )
            span.end(now)
            self._cause = span
        elif event == "route.deliver":
            uris = [str(u) for u in as_array(f.get("uris")) or ()]
            roots = [self._pending.pop(u) for u in uris if u in self._pending]
            parent = roots[0] if roots else None
            start = min((getattr(r, "start_time", None) or now) for r in roots) if roots else now
            span = self._tracer.start_span(
                f"agentd.route {f.get('route')}",
                context=trace.set_span_in_context(parent) if parent is not None else otel_context.Context(),
                attributes={"agentd.route": str(f.get("route")), "agentd.uris": uris},
                links=[trace.Link(r.get_span_context()) for r in roots[1:]],
                start_time=start,
            )
            span.end(now)
            self._cause = span
        elif event == "subagent.spawn":
            agent = str(f.get("agent"))
            starting = self._starting.get(str(f.get("parent"))) if f.get("parent") is not None else None
            if starting:
                # An agent another started: one trace per cause, under the parent's agent_start call.
                self._cause = starting.pop(0)
            self._start_turn(
                agent, route=f.get("route"), role=f.get("role"), session=f.get("session"), now=now
            )
            turn = self._turns[agent]
            self._spawns[agent] = self._tracer.start_span(
                "agentd.spawn", context=trace.set_span_in_context(turn), start_time=now
            )
        elif event == "subagent.started":
            spawn = self._spawns.pop(str(f.get("agent")), None)
            if spawn is not None:
                spawn.set_attribute("agentd.zygote", bool(f.get("zygote")))
                spawn.end(now)
        elif event == "session.deliver" and f.get("agent") is not None:
            agent = str(f.get("agent"))
            self._start_turn(agent, route=f.get("route"), role="session", session=f.get("session"), now=now)
        elif event == "step.assistant":
            self._chat(f, now)
        elif event == "turn.end":
            ended = self._turns.pop(str(f.get("agent")), None)
            if ended is not None:
                status = str(f.get("status"))
                ended.set_attribute("agentd.status", status)
                if status in ("crashed", "stalled", "refused"):
                    ended.set_status(Status(StatusCode.ERROR, status))
                    ended.set_attribute("error.type", status)
                ended.end(now)
        elif event == "subagent.exit":
            agent = str(f.get("agent"))
            for spans in (self._turns, self._spawns):
                left = spans.pop(agent, None)
                if left is not None:
                    left.set_status(Status(StatusCode.ERROR, str(f.get("status"))))
                    left.end(now)

    def _start_turn(self, agent: str, *, route: object, role: object, session: object, now: int) -> None:
        old = self._turns.pop(agent, None)
        if old is not None:
            old.end(now)
        cause, self._cause = self._cause, None
        name = str(route or role or "agent")
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": name,
            "gen_ai.agent.id": agent,
        }
        if session:
            attributes["gen_ai.conversation.id"] = str(session)
        if route:
            attributes["agentd.route"] = str(route)
        self._turns[agent] = self._tracer.start_span(
            f"invoke_agent {name}",
            context=trace.set_span_in_context(cause) if cause is not None else otel_context.Context(),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=now,
        )

    def _chat(self, f: Mapping[str, object], now: int) -> None:
        turn = self._turns.get(str(f.get("agent")))
        model = str(f.get("model") or "")
        latency_ns = int((get_number(f, "latency_ms") or 0.0) * 1_000_000)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": str(f.get("provider") or ""),
            "gen_ai.request.model": model,
            "gen_ai.response.model": model,
            "gen_ai.response.finish_reasons": ["tool_calls" if f.get("tool_calls") else "stop"],
            "gen_ai.usage.input_tokens": int(get_number(f, "input_tokens") or 0),
            "gen_ai.usage.output_tokens": int(get_number(f, "output_tokens") or 0),
            "gen_ai.usage.cache_read.input_tokens": int(get_number(f, "cached_input_tokens") or 0),
        }
        if self.capture and f.get("text"):
            attributes["gen_ai.output.messages"] = _messages("assistant", str(f["text"]))
        span = self._tracer.start_span(
            f"chat {model}",
            context=trace.set_span_in_context(turn) if turn is not None else otel_context.Context(),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=now - latency_ns,
        )
        span.end(now)

    # -- around work ------------------------------------------------------------------

    def traceparent(self, agent: str) -> str | None:
        """The W3C ``traceparent`` of ``agent``'s current turn (for its spawn payload)."""
        span = self._turns.get(agent)
        if span is None:
            return None
        carrier: dict[str, str] = {}
        _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
        return carrier.get("traceparent")

    @contextlib.contextmanager
    def tool_span(self, agent: str, name: str, arguments: Mapping[str, object]) -> Iterator[Span]:
        """``execute_tool NAME`` around one tool call, current while it runs.

        Its parent is the current span (the self-MCP server's, continued from
        the child) when it belongs to the agent's current turn, else the turn itself.
        """
        turn = self._turns.get(agent)
        current = trace.get_current_span()
        parent_ctx = None
        if turn is not None and current.get_span_context().trace_id != turn.get_span_context().trace_id:
            parent_ctx = trace.set_span_in_context(turn)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": name,
            "gen_ai.agent.id": agent,
        }
        if self.capture:
            from agentd.core.safetext import json_bytes

            attributes["gen_ai.tool.call.arguments"] = json_bytes(dict(arguments), default=str).decode()[
                :MAX_CONTENT_CHARS
            ]
        with self._tracer.start_as_current_span(
            f"execute_tool {name}",
            context=parent_ctx,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            record_exception=False,
        ) as span:
            starting = self._starting.setdefault(agent, []) if name == "agent_start" else None
            if starting is not None:
                starting.append(span)
            try:
                yield span
            finally:
                if starting is not None:
                    if span in starting:
                        starting.remove(span)
                    if not starting:
                        self._starting.pop(agent, None)

    def tool_result(self, span: Span, *, is_error: bool, text: str) -> None:
        """Record a tool call's outcome on its span (its text only with content capture)."""
        if is_error:
            span.set_status(Status(StatusCode.ERROR))
            span.set_attribute("error.type", "tool_error")
        if self.capture:
            span.set_attribute("gen_ai.tool.call.result", text[:MAX_CONTENT_CHARS])

    # -- exit ---------------------------------------------------------------------------

    def shutdown(self, timeout: float) -> bool:
        """End open spans and export everything within ``timeout`` seconds; True if all went out."""
        now = time.time_ns()
        for spans in (self._spawns, self._turns):
            for span in spans.values():
                span.end(now)
            spans.clear()
        done = self._processor.force_flush(int(timeout * 1000))
        self._processor.shutdown(timeout=max(0.1, timeout))
        return done

    @property
    def dropped(self) -> int:
        """Spans lost (queue full, or the collector refused them)."""
        return self._processor.dropped


def _messages(role: str, text: str) -> str:
    import orjson

    return orjson.dumps(
        [{"role": role, "parts": [{"type": "text", "content": text[:MAX_CONTENT_CHARS]}]}]
    ).decode()


def setup(env: Mapping[str, str], telemetry: Telemetry) -> Tracing | None:
    """Start tracing when the ``OTEL_*`` variables ask (and ``agentd[otel]`` is installed); else None.

    Makes the tracer provider the global one (the MCP SDK's spans join it)
    and taps ``telemetry`` for the supervisor's own spans.
    """
    global _active
    if not enabled_by(env):
        return None
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
    except ImportError as exc:
        telemetry.emit(
            "tracing.unavailable",
            reason=f"the OTLP exporter is not installed ({exc.name}); {install_hint('otel')}",
        )
        return None
    from agentd import __version__

    attributes = {"service.version": __version__}
    if not env.get("OTEL_SERVICE_NAME") and "service.name=" not in env.get("OTEL_RESOURCE_ATTRIBUTES", ""):
        attributes["service.name"] = "agentd"
    exporter = OTLPSpanExporter()
    processor = QuietBatchProcessor(
        exporter,
        on_error=lambda error, spans: telemetry.emit("tracing.export_failed", error=error, spans=spans),
    )
    provider = TracerProvider(resource=Resource.create(attributes))
    provider.add_span_processor(processor)  # type: ignore[arg-type]  # duck-typed
    trace.set_tracer_provider(provider)
    tracing = Tracing(provider, processor, capture=capture_content(env))
    telemetry.add_tap(tracing.on_event)
    _active = tracing
    telemetry.emit(
        "tracing.enabled",
        endpoint=getattr(exporter, "_endpoint", None),
        service=provider.resource.attributes.get("service.name"),
    )
    return tracing


@contextlib.contextmanager
def child_turn_context(traceparent: str | None) -> Iterator[None]:
    """In a child: make the supervisor's turn span the current context (the MCP SDK propagates it)."""
    if not traceparent:
        yield
        return
    ctx = _PROPAGATOR.extract({"traceparent": traceparent})
    token = otel_context.attach(ctx)
    try:
        yield
    finally:
        otel_context.detach(token)


def attach_traceparent(traceparent: str) -> None:
    """In a child: make ``traceparent`` the current context of this task from now on (a warm session's next turn)."""
    otel_context.attach(_PROPAGATOR.extract({"traceparent": traceparent}))


def from_environ() -> Mapping[str, str]:
    """The process environment (a seam for tests)."""
    return os.environ


__all__ = [
    "EXPORT_DELAY",
    "MAX_PENDING_UPDATES",
    "QuietBatchProcessor",
    "Tracing",
    "active",
    "attach_traceparent",
    "capture_content",
    "child_turn_context",
    "enabled_by",
    "setup",
    "untraced",
]

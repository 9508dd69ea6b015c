"""The run's telemetry, Python ``logging`` routed into it, and the model settings' warnings."""

from __future__ import annotations

import logging
import os
from typing import TYPE_CHECKING

from agentd.config import Settings, deprecations
from agentd.observe.humanlog import HumanView, colours_wanted, terminal_width
from agentd.observe.telemetry import Telemetry

if TYPE_CHECKING:
    from agentd.config import LogFormat
    from agentd.observe.telemetry import LineFormat


def line_format(log_format: LogFormat, fd: int) -> LineFormat:
    """``--log-format``: ``auto`` is human when ``fd`` is a terminal (a person reads it), else JSON."""
    if log_format == "auto":
        try:
            return "human" if os.isatty(fd) else "json"
        except OSError:
            return "json"
    return log_format


def make_telemetry(settings: Settings, *, fd: int, closed: bool) -> Telemetry:
    """The run's telemetry on ``fd``, in the settings' format, level and verbosity (rfcs/0320).

    ``--quiet`` is the level ``error`` (only errors and a failed run's final
    line; the answer is on stdout); ``--verbose`` is ``debug``, and the
    human format then shows every event besides its progress lines.
    """
    level = settings.log_level or ("error" if settings.quiet else None)
    verbose = bool(settings.verbose) or level == "debug"
    view = HumanView(
        colour=colours_wanted(os.environ, fd), width=terminal_width(fd, os.environ), verbose=verbose
    )
    return Telemetry(
        verbose=bool(settings.verbose),
        fd=fd,
        buffer_bytes=settings.telemetry_buffer,
        fd_closed=closed,
        level=level,
        line_format=line_format(settings.log_format, fd),
        view=view,
    )


#: Python logging levels as telemetry levels (CRITICAL is an error too).
_LOG_LEVELS = {logging.DEBUG: "debug", logging.INFO: "info", logging.WARNING: "warning"}


def route_logging(telemetry: Telemetry) -> logging.Handler:
    """Send Python ``logging`` (and ``warnings``) into telemetry.

    Libraries log through ``logging`` (the MCP SDK on a peer's bad message);
    unconfigured, that writes plain text to stderr synchronously, from the
    reactor's thread, between the NDJSON lines. Routed here it becomes
    ``log`` events: same format, buffered, rate-limited, never blocking.
    Records below WARNING are taken only at ``--log-level debug``: libraries'
    INFO records (an HTTP client's line per request) are debugging detail.
    Returns the handler (removed at exit).
    """
    level = {"debug": logging.DEBUG, "info": logging.WARNING, "warning": logging.WARNING}.get(
        telemetry.level, logging.ERROR
    )
    handler = _LogToTelemetry(telemetry, level)
    root = logging.getLogger()
    root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    return handler


class _LogToTelemetry(logging.Handler):
    """Python log records as ``log`` telemetry events, at their logger's level."""

    def __init__(self, telemetry: Telemetry, level: int) -> None:
        super().__init__(level=level)
        self._telemetry = telemetry

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = record.getMessage()
        except Exception:  # a library's bad format string must not break anything
            message = str(record.msg)
        level = _LOG_LEVELS.get(record.levelno, "error" if record.levelno > logging.WARNING else "debug")
        fields: dict[str, object] = {}
        if record.exc_info and record.exc_info[1] is not None:
            import traceback

            fields["error"] = f"{type(record.exc_info[1]).__name__}: {record.exc_info[1]}"[:2000]
            fields["traceback"] = "".join(traceback.format_exception(*record.exc_info))[-8000:]
        self._telemetry.emit("log", logger=record.name, level=level, message=message[:2000], **fields)


def model_warnings(settings: Settings, telemetry: Telemetry) -> None:
    """Warnings about the model configuration: deprecated names, a USD budget that cannot see a price."""
    for old in deprecations(settings):
        telemetry.emit("config.deprecated", setting=old.old, use=old.new)
    if settings.budget_usd is None or settings.model is None:
        return
    # Lazy: the price database is loaded only when a USD budget needs it.
    from agentd.models.pricing import has_price, price_provider_for

    for spec in sorted({settings.model, *(r.model for r in settings.routes if r.model)}):
        provider, _, name = spec.partition(":")  # validated: PROVIDER:NAME
        if not has_price(price_provider_for(provider, settings.providers.get(provider)), name):
            # Not an error: the provider may answer with a priced model name (an Azure
            # deployment's model), or the model may be free (a local server).
            telemetry.emit(
                "budget.unpriced_model",
                model=spec,
                reason="genai-prices has no price for it: its calls count 0 USD toward --budget-usd",
            )

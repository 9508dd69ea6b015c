"""A small MCP server (``mcp`` SDK) that exports its own spans over OTLP, to see the trace reach it.

With ``OTEL_EXPORTER_OTLP_ENDPOINT`` set it installs a tracer provider
(service ``traced-server``) with a simple span processor; the SDK's
OpenTelemetry middleware then records a ``tools/call NAME`` server span whose
parent is the ``traceparent`` the client put in the request's ``_meta``.
Tool ``stamp(text)`` answers ``stamped: TEXT``.
"""

from __future__ import annotations

import os

import anyio
from mcp.server.mcpserver import MCPServer


def _tracing() -> None:
    if not os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT"):
        return
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "traced-server"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)


def main() -> None:
    _tracing()
    server = MCPServer("traced")

    @server.tool()
    def stamp(text: str) -> str:
        """Stamp a text."""
        return f"stamped: {text}"

    anyio.run(server.run_stdio_async)


if __name__ == "__main__":
    main()

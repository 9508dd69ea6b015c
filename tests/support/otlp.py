"""A real OTLP/HTTP trace receiver on loopback: decodes the protobuf payloads with ``opentelemetry-proto``.

``async with otlp_receiver() as rx:`` serves ``POST /v1/traces`` on
127.0.0.1 (HTTP/1.1, keep-alive, ``application/x-protobuf``), decodes each
``ExportTraceServiceRequest`` and keeps every span as a :class:`RxSpan`;
``await rx.wait_for(pred)`` waits (no sleeping) until a span matches.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


@dataclass
class RxSpan:
    """One received span, its ids as hex."""

    name: str
    trace_id: str
    span_id: str
    parent_id: str
    kind: int
    attributes: dict[str, Any]
    service: str
    start_ns: int
    end_ns: int
    status_code: int


def _value(v: Any) -> Any:
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [_value(x) for x in v.array_value.values]
    if kind is None:
        return None
    return getattr(v, kind)


@dataclass
class Receiver:
    port: int = 0
    spans: list[RxSpan] = field(default_factory=list)
    requests: int = 0
    content_types: set[str] = field(default_factory=set)
    _changed: trio.Event = field(default_factory=trio.Event)

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _add(self, body: bytes) -> None:
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        for rs in req.resource_spans:
            resource = {a.key: _value(a.value) for a in rs.resource.attributes}
            for ss in rs.scope_spans:
                for s in ss.spans:
                    self.spans.append(
                        RxSpan(
                            name=s.name,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_id=s.parent_span_id.hex(),
                            kind=s.kind,
                            attributes={a.key: _value(a.value) for a in s.attributes},
                            service=str(resource.get("service.name")),
                            start_ns=s.start_time_unix_nano,
                            end_ns=s.end_time_unix_nano,
                            status_code=s.status.code,
                        )
                    )
        self.requests += 1
        self._changed.set()
        self._changed = trio.Event()

    async def wait_for(self, pred: Callable[[RxSpan], bool], *, timeout: float = 30) -> RxSpan:
        with trio.fail_after(timeout):
            while True:
                for s in self.spans:
                    if pred(s):
                        return s
                await self._changed.wait()

    def by_id(self) -> dict[str, RxSpan]:
        return {s.span_id: s for s in self.spans}

    def ancestors(self, span: RxSpan) -> list[RxSpan]:
        """The span's parents up to its trace's root (nearest first)."""
        ids = self.by_id()
        out = []
        while span.parent_id and span.parent_id in ids:
            span = ids[span.parent_id]
            out.append(span)
        return out

    async def _serve(self, stream: trio.SocketStream) -> None:
        try:
            async for request_line, headers, body in http_requests(stream):
                self.content_types.add(headers.get("content-type", ""))
                if request_line.startswith("POST /v1/traces"):
                    self._add(body)
                    payload = ExportTraceServiceResponse().SerializeToString()
                    status = b"200 OK"
                else:
                    payload, status = b"", b"404 Not Found"
                await stream.send_all(
                    b"HTTP/1.1 " + status + b"\r\nContent-Type: application/x-protobuf\r\n"
                    b"Content-Length: " + str(len(payload)).encode() + b"\r\n\r\n" + payload
                )
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return


async def http_requests(stream: trio.abc.ReceiveStream) -> AsyncIterator[tuple[str, dict[str, str], bytes]]:
    """The HTTP/1.1 requests on a keep-alive connection, until the peer closes it.

    Each is its request line, its headers (names lower-cased) and its body (``Content-Length`` bytes).
    """
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            buf += chunk
        head, buf = buf.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (x.partition(":") for x in lines[1:])}
        length = int(headers.get("content-length", "0"))
        while len(buf) < length:
            chunk = await stream.receive_some(65536)
            if not chunk:
                return
            buf += chunk
        body, buf = buf[:length], buf[length:]
        yield lines[0], headers, body


@asynccontextmanager
async def otlp_receiver() -> AsyncIterator[Receiver]:
    rx = Receiver()
    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, rx._serve, 0, host="127.0.0.1"))
        rx.port = listeners[0].socket.getsockname()[1]
        try:
            yield rx
        finally:
            nursery.cancel_scope.cancel()

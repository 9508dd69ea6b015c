"""A loopback HTTP/1.1 server that plays scripted model-provider responses and records requests.

Real sockets, real HTTP (keep-alive included), provider-shaped JSON, so the
providers' code paths run exactly as against OpenAI / Anthropic / vLLM.

Use it from a trio test::

    async with provider_server([openai_reply("hi")]) as server:
        model = OpenAIModel("m", base_url=server.url("/v1"))
        ...
        assert server.requests[0].json["model"] == "m"

or from synchronous code (e.g. a test that runs ``agentd`` as a subprocess)::

    with provider_server_thread([anthropic_reply("hi")]) as server:
        subprocess.run([...], env={"ANTHROPIC_BASE_URL": server.base_url, ...})

Each request takes the next scripted :class:`Reply` (or calls a responder
that builds one from the request). When the script runs out the server
answers 500 with a body saying so, which makes a test's mistake obvious.

Misbehaviour on demand (for the fault catalog): a :class:`Reply` can trickle
its body (``trickle_s``: one byte per interval), or stream an endless or huge
body in chunked encoding (``stream``: an iterable of chunks, stopped when the
client hangs up); ``server.body_bytes_sent`` records how much of each body
actually left, so a test can show a client stopped reading at its cap.
"""

from __future__ import annotations

import contextlib
import http
import queue
import random
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import trio

#: Largest request head the fake accepts (requests from our clients are tiny).
_MAX_HEAD = 64 * 1024


@dataclass(frozen=True)
class RecordedRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    """Header names lower-cased; repeated headers joined with ``", "``."""
    body: bytes

    @property
    def json(self) -> Any:
        """The body decoded as JSON."""
        return orjson.loads(self.body)


@dataclass(frozen=True)
class Reply:
    """One scripted response.

    Attributes:
        status: the HTTP status.
        json: a body to send as JSON (ignored when ``body`` is given).
        body: raw body bytes (for malformed answers).
        headers: extra response headers (e.g. ``Retry-After``).
        drop: close the connection without answering (a transport error).
        trickle_s: send the head at once, then the body one byte every ``trickle_s`` seconds.
        stream: send the body as these chunks, ``Transfer-Encoding: chunked``,
            until they run out or the client hangs up (``json``/``body`` ignored).
    """

    status: int = 200
    json: Any = None
    body: bytes | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    drop: bool = False
    trickle_s: float | None = None
    stream: Iterable[bytes] | None = None


Responder = Callable[[RecordedRequest], Reply]


class ProviderServer:
    """The server. ``requests`` grows as requests arrive; ``push`` adds replies."""

    def __init__(self, replies: Iterable[Reply | Responder] = ()) -> None:
        self._replies: list[Reply | Responder] = list(replies)
        self.requests: list[RecordedRequest] = []
        self.body_bytes_sent: list[int] = []
        """Body bytes that left for each answered request (a hang-up cuts it short)."""
        self.port = 0

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str = "") -> str:
        """``base_url`` + ``path``."""
        return self.base_url + path

    def push(self, *replies: Reply | Responder) -> None:
        """Append replies to the script."""
        self._replies.extend(replies)

    @property
    def pending(self) -> int:
        """Scripted replies not yet used."""
        return len(self._replies)

    async def serve(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Listen on 127.0.0.1 (a free port) until cancelled; ``started()`` once listening."""
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        self.port = listeners[0].socket.getsockname()[1]
        task_status.started()
        await trio.serve_listeners(self._handle, listeners)

    def _next_reply(self, request: RecordedRequest) -> Reply:
        if not self._replies:
            return Reply(
                500, {"error": {"message": f"fake provider: no scripted reply left for {request.path}"}}
            )
        item = self._replies.pop(0)
        return item(request) if callable(item) else item

    async def _handle(self, stream: trio.SocketStream) -> None:
        buf = bytearray()
        async with stream:
            while True:
                request = await self._read_request(stream, buf)
                if request is None:
                    return
                self.requests.append(request)
                reply = self._next_reply(request)
                if reply.drop:
                    return
                if not await self._send(stream, reply):
                    return

    async def _send(self, stream: trio.SocketStream, reply: Reply) -> bool:
        """Send ``reply``; False when the client hung up (the connection is then done)."""
        index = len(self.body_bytes_sent)
        self.body_bytes_sent.append(0)
        try:
            if reply.stream is not None:
                await stream.send_all(_head(reply, None, chunked=True))
                for chunk in reply.stream:
                    await stream.send_all(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.body_bytes_sent[index] += len(chunk)
                await stream.send_all(b"0\r\n\r\n")
                return True
            body = _body(reply)
            if reply.trickle_s is not None:
                await stream.send_all(_head(reply, len(body)))
                for i in range(len(body)):
                    await stream.send_all(body[i : i + 1])
                    self.body_bytes_sent[index] += 1
                    await trio.sleep(reply.trickle_s)  # the misbehaviour itself: a slow drip
                return True
            await stream.send_all(_head(reply, len(body)) + body)
            self.body_bytes_sent[index] = len(body)
            return True
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False

    @staticmethod
    async def _read_request(stream: trio.SocketStream, buf: bytearray) -> RecordedRequest | None:
        while b"\r\n\r\n" not in buf:
            if len(buf) > _MAX_HEAD:
                return None
            try:
                chunk = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not chunk:
                return None
            buf += chunk
        head_end = buf.index(b"\r\n\r\n")
        head = bytes(buf[:head_end]).decode("latin-1")
        del buf[: head_end + 4]
        request_line, *header_lines = head.split("\r\n")
        method, path, _version = request_line.split(" ", 2)
        headers: dict[str, str] = {}
        for line in header_lines:
            name, _, value = line.partition(":")
            key = name.strip().lower()
            headers[key] = f"{headers[key]}, {value.strip()}" if key in headers else value.strip()
        length = int(headers.get("content-length", "0"))
        while len(buf) < length:
            try:
                chunk = await stream.receive_some(65536)
            except trio.BrokenResourceError:
                return None
            if not chunk:
                return None
            buf += chunk
        body = bytes(buf[:length])
        del buf[:length]
        return RecordedRequest(method=method, path=path, headers=headers, body=body)


def _body(reply: Reply) -> bytes:
    return reply.body if reply.body is not None else orjson.dumps(reply.json)


def _head(reply: Reply, length: int | None, *, chunked: bool = False) -> bytes:
    try:
        phrase = http.HTTPStatus(reply.status).phrase
    except ValueError:
        phrase = "Overloaded" if reply.status == 529 else "Unknown"
    lines = [f"HTTP/1.1 {reply.status} {phrase}"]
    lines.append("transfer-encoding: chunked" if chunked else f"content-length: {length}")
    if not any(k.lower() == "content-type" for k in reply.headers):
        lines.append("content-type: application/json")
    lines += [f"{k}: {v}" for k, v in reply.headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


@contextlib.asynccontextmanager
async def provider_server(replies: Iterable[Reply | Responder] = ()) -> AsyncIterator[ProviderServer]:
    """Run a :class:`ProviderServer` in the current trio run for the block."""
    server = ProviderServer(replies)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


@contextlib.contextmanager
def provider_server_thread(replies: Iterable[Reply | Responder] = ()) -> Iterator[ProviderServer]:
    """Run a :class:`ProviderServer` in its own thread (own trio run) for the block.

    For synchronous tests. Reading ``server.requests`` from the caller's
    thread is safe once the requests of interest have been answered.
    """
    server = ProviderServer(replies)
    ready: queue.Queue[tuple[trio.lowlevel.TrioToken, trio.Event] | BaseException] = queue.Queue()

    async def main() -> None:
        stop = trio.Event()
        async with trio.open_nursery() as nursery:
            await nursery.start(server.serve)
            ready.put((trio.lowlevel.current_trio_token(), stop))
            await stop.wait()
            nursery.cancel_scope.cancel()

    def run() -> None:
        try:
            trio.run(main)
        except BaseException as exc:  # hand a startup failure to the caller
            ready.put(exc)

    thread = threading.Thread(target=run, name="fake-provider", daemon=True)
    thread.start()
    got = ready.get(timeout=10)
    if isinstance(got, BaseException):
        raise got
    token, stop = got
    try:
        yield server
    finally:
        trio.from_thread.run_sync(stop.set, trio_token=token)
        thread.join(timeout=10)


# --- provider-shaped bodies -------------------------------------------------------------


def openai_reply(
    text: str | None = None,
    *,
    tool_calls: Sequence[tuple[str, str, str]] = (),
    refusal: str | None = None,
    finish_reason: str | None = None,
    usage: tuple[int, int] | None = (11, 7),
    model: str = "fake-model",
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """A Chat Completions response; ``tool_calls`` are ``(id, name, arguments_json_text)``."""
    message: dict[str, Any] = {"role": "assistant", "content": text, "refusal": refusal}
    if tool_calls:
        message["tool_calls"] = [
            {"id": i, "type": "function", "function": {"name": n, "arguments": a}} for i, n, a in tool_calls
        ]
    if finish_reason is None:
        finish_reason = "tool_calls" if tool_calls else "stop"
    body: dict[str, Any] = {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": model,
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = {
            "prompt_tokens": usage[0],
            "completion_tokens": usage[1],
            "total_tokens": usage[0] + usage[1],
        }
    return Reply(200, body, headers=dict(headers or {}))


def anthropic_reply(
    text: str | None = None,
    *,
    tool_uses: Sequence[tuple[str, str, Any]] = (),
    stop_reason: str | None = None,
    usage: tuple[int, int] = (13, 5),
    model: str = "fake-model",
) -> Reply:
    """A Messages API response; ``tool_uses`` are ``(id, name, input)``."""
    content: list[dict[str, Any]] = []
    if text is not None:
        content.append({"type": "text", "text": text})
    content += [{"type": "tool_use", "id": i, "name": n, "input": inp} for i, n, inp in tool_uses]
    if stop_reason is None:
        stop_reason = "tool_use" if tool_uses else "end_turn"
    return Reply(
        200,
        {
            "id": "msg_fake",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": usage[1]},
        },
    )


def openai_error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    code: str | None = None,
    param: str | None = None,
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return Reply(status, body, headers=dict(headers or {}))


def anthropic_error(
    status: int,
    message: str,
    *,
    type_: str = "invalid_request_error",
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """An Anthropic-style error body: ``{"type": "error", "error": {"type", "message"}}``."""
    body = {"type": "error", "error": {"type": type_, "message": message}, "request_id": "req_fake"}
    return Reply(status, body, headers=dict(headers or {}))


def endless_chunks(total: int, chunk: int = 1024 * 1024) -> Iterator[bytes]:
    """``total`` bytes of a JSON-looking body in ``chunk``-sized pieces, made lazily (never all in memory)."""
    piece = b'{"pad": "' + b"x" * (chunk - 9)
    sent = 0
    while sent < total:
        yield piece
        sent += len(piece)


# --- retry seams ------------------------------------------------------------------------


class RecordingSleep:
    """An injectable ``sleep`` that records each delay and returns at once."""

    def __init__(self) -> None:
        self.delays: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.delays.append(seconds)
        await trio.lowlevel.checkpoint()


class FixedRandom(random.Random):
    """A random source whose ``random()`` always returns ``value`` (exact jitter in tests)."""

    def __init__(self, value: float = 0.5) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


def unused_port() -> int:
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port

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
import hashlib
import hmac
import http
import queue
import random
import re
import socket
import threading
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, quote, unquote

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


async def _receive_more(stream: trio.SocketStream, buf: bytearray) -> bool:
    """Append the next bytes from ``stream`` to ``buf``; False once the peer closed or broke the connection."""
    try:
        chunk = await stream.receive_some(65536)
    except trio.BrokenResourceError:
        return False
    buf += chunk
    return bool(chunk)


class ScriptedReplies:
    """A handler that answers every request with the next of ``replies``, and records the requests."""

    def __init__(self, replies: list[Reply]) -> None:
        self.replies = replies
        self.seen: list[RecordedRequest] = []

    def __call__(self, request: RecordedRequest) -> Reply:
        self.seen.append(request)
        return self.replies[len(self.seen) - 1]


class ProviderServer:
    """The server. ``requests`` grows as requests arrive; ``push`` adds replies.

    With ``handler``, every request is answered by ``handler(request)``
    instead (a fake with state of its own, e.g. a cloud endpoint that serves
    tokens and model calls on one port).
    """

    def __init__(
        self, replies: Iterable[Reply | Responder] = (), *, handler: Responder | None = None
    ) -> None:
        self._handler = handler
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
        if self._handler is not None:
            return self._handler(request)
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
            if len(buf) > _MAX_HEAD or not await _receive_more(stream, buf):
                return None
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
            if not await _receive_more(stream, buf):
                return None
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
async def provider_server(
    replies: Iterable[Reply | Responder] = (), *, handler: Responder | None = None
) -> AsyncIterator[ProviderServer]:
    """Run a :class:`ProviderServer` in the current trio run for the block."""
    server = ProviderServer(replies, handler=handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield server
        nursery.cancel_scope.cancel()


@contextlib.contextmanager
def provider_server_thread(
    replies: Iterable[Reply | Responder] = (), *, handler: Responder | None = None
) -> Iterator[ProviderServer]:
    """Run a :class:`ProviderServer` in its own thread (own trio run) for the block.

    For synchronous tests. Reading ``server.requests`` from the caller's
    thread is safe once the requests of interest have been answered.
    """
    server = ProviderServer(replies, handler=handler)
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
    cached_tokens: int | None = None,
    model: str = "fake-model",
    headers: Mapping[str, str] | None = None,
) -> Reply:
    """A Chat Completions response; ``tool_calls`` are ``(id, name, arguments_json_text)``.

    ``cached_tokens``: the part of the prompt OpenAI's automatic caching served
    (``usage.prompt_tokens_details.cached_tokens``).
    """
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
        if cached_tokens is not None:
            body["usage"]["prompt_tokens_details"] = {"cached_tokens": cached_tokens, "audio_tokens": 0}
            body["usage"]["completion_tokens_details"] = {"reasoning_tokens": 0}
    return Reply(200, body, headers=dict(headers or {}))


def anthropic_reply(
    text: str | None = None,
    *,
    tool_uses: Sequence[tuple[str, str, Any]] = (),
    stop_reason: str | None = None,
    usage: tuple[int, int] = (13, 5),
    cache: tuple[int, int] | None = None,
    thinking: Sequence[tuple[str, str]] = (),
    model: str = "fake-model",
) -> Reply:
    """A Messages API response; ``tool_uses`` are ``(id, name, input)``.

    ``cache``: ``(cache_read_input_tokens, cache_creation_input_tokens)``
    (``usage`` then gives the uncached ``input_tokens``, as the API counts them
    apart). ``thinking``: ``(thinking, signature)`` blocks that come first.
    """
    content: list[dict[str, Any]] = [
        {"type": "thinking", "thinking": t, "signature": sig} for t, sig in thinking
    ]
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
            "usage": {
                "input_tokens": usage[0],
                "output_tokens": usage[1],
                **(
                    {"cache_read_input_tokens": cache[0], "cache_creation_input_tokens": cache[1]}
                    if cache is not None
                    else {}
                ),
            },
        },
    )


def responses_reply(
    text: str | None = None,
    *,
    function_calls: Sequence[tuple[str, str, str]] = (),
    reasoning: Sequence[tuple[str, str]] = (),
    refusal: str | None = None,
    incomplete: str | None = None,
    usage: tuple[int, int] = (17, 9),
    cached_tokens: int = 0,
    model: str = "fake-model",
) -> Reply:
    """A Responses API response (``POST /v1/responses``).

    ``function_calls`` are ``(call_id, name, arguments_json_text)`` (each item
    gets the id ``fc_<call_id>``); ``reasoning`` are ``(id, encrypted_content)``
    items that come first; ``incomplete`` is an ``incomplete_details.reason``.
    """
    output: list[dict[str, Any]] = [
        {"type": "reasoning", "id": rid, "summary": [], "encrypted_content": enc, "status": "completed"}
        for rid, enc in reasoning
    ]
    if text is not None or refusal is not None:
        part = (
            {"type": "refusal", "refusal": refusal}
            if refusal is not None
            else {"type": "output_text", "text": text, "annotations": []}
        )
        output.append(
            {
                "type": "message",
                "id": "msg_fake",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
        )
    output += [
        {
            "type": "function_call",
            "id": f"fc_{call_id}",
            "call_id": call_id,
            "name": name,
            "arguments": args,
            "status": "completed",
        }
        for call_id, name, args in function_calls
    ]
    return Reply(
        200,
        {
            "id": "resp_fake",
            "object": "response",
            "created_at": 1_700_000_000,
            "model": model,
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": incomplete} if incomplete else None,
            "output": output,
            "usage": {
                "input_tokens": usage[0],
                "input_tokens_details": {"cached_tokens": cached_tokens},
                "output_tokens": usage[1],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage[0] + usage[1],
            },
        },
    )


class AnthropicCacheSim:
    """Anthropic prompt caching, simulated over real requests: wraps scripted Messages replies.

    Each request's prompt is flattened in the API's order (tools, system,
    then every message's blocks). A block with ``cache_control`` is a
    breakpoint: the prefix up to it is written to the cache. A breakpoint
    reads the longest prefix ending at it, or at most :data:`LOOKBACK` blocks
    before it, that an earlier request wrote (as the API does). The usage of
    the scripted reply is replaced by ``input_tokens`` (uncached),
    ``cache_read_input_tokens`` and ``cache_creation_input_tokens``, each
    ``ceil(characters / 4)`` of the blocks it covers; ``output_tokens`` stays.
    ``reads`` / ``writes`` record each request's figures.
    """

    #: Blocks before a breakpoint the API checks for an earlier cache entry.
    LOOKBACK = 20

    def __init__(self, replies: Iterable[Reply]) -> None:
        self._replies = list(replies)
        self._cache: set[str] = set()
        self.reads: list[int] = []
        self.writes: list[int] = []

    @staticmethod
    def _blocks(body: dict[str, Any]) -> list[tuple[str, bool]]:
        """(canonical text of the block, whether it is a breakpoint), in prompt order."""
        out: list[tuple[str, bool]] = []

        def add(block: Any, where: str) -> None:
            mark = isinstance(block, dict) and "cache_control" in block
            plain = (
                {k: v for k, v in block.items() if k != "cache_control"} if isinstance(block, dict) else block
            )
            out.append((where + orjson.dumps(plain, option=orjson.OPT_SORT_KEYS).decode(), mark))

        for tool in body.get("tools") or []:
            add(tool, "tool:")
        system = body.get("system")
        for block in [{"type": "text", "text": system}] if isinstance(system, str) else system or []:
            add(block, "system:")
        for message in body.get("messages") or []:
            content = message["content"]
            blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
            for block in blocks:
                add(block, message["role"] + ":")
        return out

    def __call__(self, request: RecordedRequest) -> Reply:
        if not self._replies:
            return Reply(500, {"error": {"message": "fake provider: no scripted reply left"}})
        reply = self._replies.pop(0)
        blocks = self._blocks(request.json)
        sizes = [-(-len(text) // 4) for text, _ in blocks]
        prefixes: list[str] = []
        digest = hashlib.sha256()
        for text, _ in blocks:
            digest.update(text.encode() + b"\x00")
            prefixes.append(digest.hexdigest())
        marks = [i for i, (_, mark) in enumerate(blocks) if mark]
        read_upto = -1
        for q in marks:
            for j in range(q, max(-1, q - self.LOOKBACK - 1), -1):
                if prefixes[j] in self._cache:
                    read_upto = max(read_upto, j)
                    break
        write_upto = marks[-1] if marks else -1
        for q in marks:
            self._cache.add(prefixes[q])
        read = sum(sizes[: read_upto + 1])
        written = max(0, sum(sizes[: write_upto + 1]) - read)
        uncached = sum(sizes) - read - written
        self.reads.append(read)
        self.writes.append(written)
        body = dict(reply.json)
        body["usage"] = {
            "input_tokens": uncached,
            "output_tokens": body.get("usage", {}).get("output_tokens", 5),
            "cache_read_input_tokens": read,
            "cache_creation_input_tokens": written,
        }
        return Reply(reply.status, body, headers=reply.headers)


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


# --- cloud authentication ---------------------------------------------------------------


def sigv4_problem(
    request: RecordedRequest,
    *,
    access_key: str,
    secret_key: str,
    region: str,
    service: str = "bedrock",
    session_token: str | None = None,
) -> str | None:
    """Why ``request`` is not signed with AWS Signature Version 4 for these credentials (None: it is).

    Verified the way AWS does it, written from the specification (not with
    botocore, so the client's signer is not checking itself): the canonical
    request (method, the path URI-encoded once more, the sorted query, the
    signed headers, the body's SHA-256), the string to sign over the
    credential scope, and the HMAC chain from the secret key.
    """
    auth = request.headers.get("authorization", "")
    m = re.fullmatch(
        r"AWS4-HMAC-SHA256 Credential=([^/]+)/(\d{8})/([^/]+)/([^/]+)/aws4_request, "
        r"SignedHeaders=([a-z0-9;-]+), Signature=([0-9a-f]{64})",
        auth,
    )
    if m is None:
        return f"no SigV4 Authorization header: {auth[:60]!r}"
    key, day, scope_region, scope_service, signed, signature = m.groups()
    if (key, scope_region, scope_service) != (access_key, region, service):
        return (
            f"credential scope {key}/{scope_region}/{scope_service}, expected {access_key}/{region}/{service}"
        )
    amz_date = request.headers.get("x-amz-date", "")
    if not amz_date.startswith(day):
        return f"x-amz-date {amz_date!r} does not match the scope's day {day}"
    if session_token is not None and request.headers.get("x-amz-security-token") != session_token:
        return "the session token (x-amz-security-token) is missing or wrong"
    names = signed.split(";")
    if "host" not in names:
        return "the host header is not signed"
    path, _, query = request.path.partition("?")
    pairs = sorted(
        (quote(unquote(k), safe="-_.~"), quote(unquote(v), safe="-_.~"))
        for k, _, v in (p.partition("=") for p in query.split("&") if p)
    )
    canonical = "\n".join(
        [
            request.method,
            quote(path, safe="/~"),
            "&".join(f"{k}={v}" for k, v in pairs),
            "".join(f"{n}:{' '.join(request.headers.get(n, '').split())}\n" for n in names),
            signed,
            hashlib.sha256(request.body).hexdigest(),
        ]
    )
    to_sign = "\n".join(
        [
            "AWS4-HMAC-SHA256",
            amz_date,
            f"{day}/{region}/{service}/aws4_request",
            hashlib.sha256(canonical.encode()).hexdigest(),
        ]
    )
    k = ("AWS4" + secret_key).encode()
    for part in (day, region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    expected = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    return None if hmac.compare_digest(expected, signature) else "the signature does not match"


@dataclass
class GoogleTokenEndpoint:
    """A Google OAuth 2.0 token endpoint for service-account credentials (the JWT-bearer grant).

    ``service_account(tmp_path, token_uri)`` writes a service-account key
    file whose ``token_uri`` points here (application default credentials
    find it through ``GOOGLE_APPLICATION_CREDENTIALS``). A token request's
    JWT is checked as Google does: RS256 over the key file's public key,
    ``iss`` the account's e-mail, ``aud`` the token URI, the scope
    requested, not expired. Each grant answers a fresh access token
    (``issued``), valid ``expires_in`` seconds.
    """

    expires_in: int = 3600
    issued: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    email: str = "agentd-test@agentd-test.iam.gserviceaccount.com"
    project: str = "agentd-test"
    _public_key: Any = None

    def service_account(self, directory: Any, token_uri: str) -> Any:
        """Write a fresh service-account key file (a new RSA key) and return its path."""
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric import rsa

        key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self._public_key = key.public_key()
        pem = key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        ).decode()
        path = directory / "service-account.json"
        path.write_text(
            orjson.dumps(
                {
                    "type": "service_account",
                    "project_id": self.project,
                    "private_key_id": "k1",
                    "private_key": pem,
                    "client_email": self.email,
                    "client_id": "1",
                    "token_uri": token_uri,
                }
            ).decode()
        )
        return path

    def vertex(self, replies: list[Reply]) -> Responder:
        """A handler for this endpoint (``/token``) and Vertex AI's ``rawPredict`` on one port: a
        request with one of the issued tokens gets the next of ``replies``, any other a 401."""

        def handle(request: RecordedRequest) -> Reply:
            if request.path == "/token":
                return self(request)
            if request.headers.get("authorization") not in {f"Bearer {t}" for t in self.issued}:
                return anthropic_error(401, "Request had invalid authentication credentials.")
            return replies.pop(0)

        return handle

    def vertex_env(self, key_file: Any, base_url: str, region: str) -> dict[str, str]:
        """The environment that points the Vertex provider at ``base_url`` with ``key_file``'s account."""
        return {
            "GOOGLE_APPLICATION_CREDENTIALS": str(key_file),
            "ANTHROPIC_VERTEX_BASE_URL": base_url,
            "CLOUD_ML_REGION": region,
            "ANTHROPIC_VERTEX_PROJECT_ID": self.project,
        }

    def __call__(self, request: RecordedRequest) -> Reply:
        problem = self._check(request)
        if problem is not None:
            self.problems.append(problem)
            return Reply(400, {"error": "invalid_grant", "error_description": problem})
        token = f"ya29.fake-{len(self.issued) + 1}-{random.randrange(10**9)}"
        self.issued.append(token)
        return Reply(200, {"access_token": token, "expires_in": self.expires_in, "token_type": "Bearer"})

    def _check(self, request: RecordedRequest) -> str | None:
        import base64
        import time

        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import padding

        form = dict(parse_qsl(request.body.decode()))
        if form.get("grant_type") != "urn:ietf:params:oauth:grant-type:jwt-bearer":
            return f"grant_type {form.get('grant_type')!r}"
        parts = form.get("assertion", "").split(".")
        if len(parts) != 3:
            return "the assertion is not a JWT"

        def b64(text: str) -> bytes:
            return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))

        try:
            self._public_key.verify(
                b64(parts[2]), f"{parts[0]}.{parts[1]}".encode(), padding.PKCS1v15(), hashes.SHA256()
            )
        except InvalidSignature:
            return "the JWT signature does not verify with the service account's key"
        header, claims = orjson.loads(b64(parts[0])), orjson.loads(b64(parts[1]))
        if header.get("alg") != "RS256":
            return f"alg {header.get('alg')!r}"
        if claims.get("iss") != self.email:
            return f"iss {claims.get('iss')!r}"
        if not str(claims.get("aud", "")).endswith(request.path):
            return f"aud {claims.get('aud')!r}"
        if "https://www.googleapis.com/auth/cloud-platform" not in str(claims.get("scope", "")).split():
            return f"scope {claims.get('scope')!r}"
        if not claims.get("iat", 0) <= time.time() + 60 <= claims.get("exp", 0) + 60:
            return "the JWT is expired or not yet valid"
        return None


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

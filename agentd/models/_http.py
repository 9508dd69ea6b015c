"""JSON-over-HTTP for the providers: one POST with retries, errors translated at the boundary.

Retry policy (see ``rfcs/0021-model-http-retries.md``):

* Retried: HTTP 408, 429, 500, 502, 503, 504, 529, and request failures
  (connection refused/reset, timeouts, a connection dropped mid-answer).
* Delay before retry *n* (1-based): the server's ``retry-after-ms`` /
  ``Retry-After`` (seconds or an HTTP date) when present, capped at
  :data:`RETRY_AFTER_MAX_S`; otherwise full jitter,
  ``uniform(0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2**(n-1)))``.
* At most :data:`MAX_ATTEMPTS` attempts, then
  :class:`~agentd.core.errors.ModelUnavailableError`.
* 401/403: :class:`~agentd.core.errors.ModelAuthError` at once (retrying cannot fix a key).
* Every other non-2xx: :class:`~agentd.core.errors.ModelRequestError` at once, with
  the HTTP status and the provider's own message (a 404 "model not found", a
  400 "invalid request").
* A 2xx whose body is not a JSON object: :class:`~agentd.core.errors.ModelResponseError`.
  A body orjson refuses only for its text (a JSON ``"\ud800"`` escape, which
  decodes to a lone surrogate; bytes that are not UTF-8) is read by the
  standard library instead, every string made valid (U+FFFD; rfcs/0270):
  a model's odd output is not an unusable answer.

Bounds (see ``rfcs/0122-model-call-bounds.md``): one call, retries and
backoff included, ends at its deadline (``--model-timeout``, default
:data:`DEFAULT_MODEL_TIMEOUT_S`); once the answer's headers arrived, each
body read must arrive within :data:`BODY_READ_TIMEOUT_S`; the body is
streamed and the call fails as soon as it passes :data:`MAX_RESPONSE_BYTES`
(a ``Content-Length`` above it fails before reading). Every failure is one of
the :class:`~agentd.core.errors.FatalInfraError` family, so it ends the run with
exit 4 and a message naming the status, the field or the bound.

URLs in messages go through :func:`agentd.core.redact.redact`; a base URL's
query string is kept on the request (:func:`join_url`).

The pure parts (:func:`retry_after_seconds`, :func:`backoff_delay`) take the
clock and the random source as arguments so tests assert exact delays.
"""

from __future__ import annotations

import email.utils
import http
import json
import math
import random
import re
import ssl
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import cast
from urllib.parse import urlsplit, urlunsplit

import httpx2
import orjson
import trio

from agentd import __version__
from agentd.core.durations import ascii_int, ascii_number
from agentd.core.errors import ModelAuthError, ModelRequestError, ModelResponseError, ModelUnavailableError
from agentd.core.jsonvalue import JSONObject, JSONValue, as_object, loads
from agentd.core.redact import redact
from agentd.core.safetext import json_bytes, valid_json
from agentd.observe.telemetry import NullTelemetry, Telemetry
from agentd.observe.timeline import mark

#: Attempts per model call, the first included. Five attempts with the
#: default backoff span about 15 s of expected waiting (up to 31 s), long
#: enough to ride out a provider blip, short enough that a dead endpoint
#: ends the run (exit 4) within a minute.
MAX_ATTEMPTS = 5

#: Upper bound of the first jittered delay; doubles per retry.
BACKOFF_BASE_S = 1.0

#: Cap of one exponential step, so late retries do not wait minutes.
BACKOFF_MAX_S = 30.0

#: Cap on a server-given Retry-After. A provider asking for longer (a daily
#: quota, say) will not recover within one run; waiting it out would only
#: hide the failure, so we wait at most this long and let the attempts run out.
RETRY_AFTER_MAX_S = 60.0

#: Time to establish a TCP/TLS connection. A healthy endpoint connects in
#: well under a second; ten allows a slow TLS handshake over a bad link.
CONNECT_TIMEOUT_S = 10.0

#: Default deadline of one model call, retries and backoff included
#: (``--model-timeout``). A long non-streaming generation of thousands of
#: tokens takes a minute or two on a hosted model; five minutes leaves room
#: for that plus a retry, and still ends a hung or trickling provider in a
#: time an operator would wait.
DEFAULT_MODEL_TIMEOUT_S = 300.0

#: Once the response headers arrived, the longest wait for the next piece of
#: the body. Providers send a non-streaming body in one go once it is ready;
#: a minute of silence mid-body is a stalled connection.
BODY_READ_TIMEOUT_S = 60.0

#: Largest response body read. Real answers are kilobytes (a model's whole
#: output limit is a few MB of JSON); the cap only stops a broken or hostile
#: endpoint from growing a child's memory without end (peak memory stays
#: within about twice the cap). It is set high enough that a runaway tool
#: call of tens of MB still arrives whole and goes back to the model as a
#: tool error (see ``MAX_TOOL_ARGUMENT_CHARS``) instead of ending the run.
MAX_RESPONSE_BYTES = 128 * 1024 * 1024

#: HTTP statuses worth retrying: timeouts, rate limits, overload and gateway errors.
RETRY_STATUSES: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504, 529})

#: Statuses that mean the credentials are wrong: fatal at once.
AUTH_STATUSES: frozenset[int] = frozenset({401, 403})

#: How much of an unparseable body an error message quotes.
_SNIPPET_CHARS = 300

_USER_AGENT = f"agentd/{__version__}"

#: What to do about a refused request, by status (the default: read the provider's message).
_REQUEST_FIXES = {
    400: "the provider rejected the request as invalid; its message above says which part",
    404: "check the model name{model} and the base URL ({base_url_var}); the provider does not know one of them",
    413: "the request is too large for the provider: shorten the instruction, the system prompt or the tool results",
    422: "the provider rejected the request as invalid; its message above says which part",
}

Sleep = Callable[[float], Awaitable[None]]

_SSL_CONTEXT: ssl.SSLContext | None = None

_first_sent: Callable[[], None] | None = None


def after_first_request_sent(callback: Callable[[], None]) -> None:
    """Call ``callback`` once, when this process's next request body has been written.

    An agent child forked by the zygote releases the zygote's next spare
    then (rfcs/0230): its warm-up no longer competes with the request.
    """
    global _first_sent
    _first_sent = callback


async def _trace(event: str, info: Mapping[str, object]) -> None:
    global _first_sent
    if event.endswith("send_request_body.complete") and _first_sent is not None:
        callback, _first_sent = _first_sent, None
        callback()


def shared_ssl_context() -> ssl.SSLContext:
    """One TLS context for every provider client of this process (built on first use).

    Building one loads the CA bundle (about 0.1 s here) and the first HTTP
    client imports the transport (another 0.1 s): the zygote calls
    :func:`prewarm` so that every forked child starts with both done, and each
    child's client costs well under a millisecond (``rfcs/0170``). The context
    honours ``SSL_CERT_FILE`` / ``SSL_CERT_DIR`` as httpx does.
    """
    global _SSL_CONTEXT
    if _SSL_CONTEXT is None:
        _SSL_CONTEXT = httpx2.create_ssl_context()
    return _SSL_CONTEXT


def new_client(timeout: float, *, read_timeout: float | None = None) -> httpx2.AsyncClient:
    """An ``httpx2.AsyncClient`` on the shared TLS context, bounded as a model call is.

    ``timeout`` bounds each read and write (a non-streaming answer's first
    byte only arrives when the whole generation is done, so it can be as long
    as the call's deadline); connecting takes at most :data:`CONNECT_TIMEOUT_S`.
    """
    read = timeout if read_timeout is None else read_timeout
    return httpx2.AsyncClient(
        verify=shared_ssl_context(), timeout=httpx2.Timeout(read, connect=min(CONNECT_TIMEOUT_S, timeout))
    )


def prewarm() -> None:
    """Build the shared TLS context and import the HTTP transport (the zygote does this before forking)."""
    httpx2.AsyncClient(verify=shared_ssl_context())


def retry_after_seconds(headers: Mapping[str, str], *, now_wall: float) -> float | None:
    """The delay a response asks for, or ``None`` when it names none (or an unusable one).

    ``retry-after-ms`` (OpenAI) wins over ``Retry-After``; ``Retry-After`` is
    either delta-seconds or an HTTP date (compared with ``now_wall``, Unix
    seconds). Negative results become 0. The value is not capped here.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:  # ASCII digits only, as every number from a header: float() reads "١٢" as 12
            return max(0.0, ascii_number(ms.strip()) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, ascii_number(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP date is GMT by definition
        return None
    return max(0.0, when.timestamp() - now_wall)


def backoff_delay(attempt: int, *, retry_after: float | None, rng: random.Random) -> float:
    """Seconds to wait after failed attempt number ``attempt`` (1-based).

    A server-given ``retry_after`` is honoured up to :data:`RETRY_AFTER_MAX_S`;
    otherwise the delay is full jitter over an exponentially growing window.
    """
    if retry_after is not None:
        return min(retry_after, RETRY_AFTER_MAX_S)
    window = min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2 ** (attempt - 1))
    return float(window * rng.random())


def join_url(base: str, path: str) -> str:
    """``base`` with ``path`` appended to its path, keeping its query string.

    ``join_url("https://h/v1?api-version=1", "/chat/completions")`` is
    ``https://h/v1/chat/completions?api-version=1`` (never ``…/v1?api-version=1/chat/completions``).
    A fragment is dropped: it is never sent to a server.
    """
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, parts.path.rstrip("/") + path, parts.query, ""))


def provider_message(body: bytes | bytearray) -> str:
    """The provider's error message from an error body, or a short quote of the body.

    Both OpenAI and Anthropic answer ``{"error": {"message": ...}}``; some
    OpenAI-compatible servers answer ``{"error": "..."}`` or ``{"message": ...}``.
    """
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    if isinstance(data, dict):
        err = data.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        if isinstance(err, str):
            return err
        if isinstance(data.get("message"), str):
            return str(data["message"])
    text = body.decode("utf-8", errors="replace").strip()
    return repr(text[:_SNIPPET_CHARS]) if text else "(empty body)"


#: Nesting an answer keeps when it nests deeper than orjson reads (1,024 levels): a value
#: below this depth is read as null. Only model output nests like that (a tool's input),
#: and arguments deeper than ``MAX_TOOL_ARGUMENT_DEPTH`` are refused anyway; the standard
#: library's parser, which recurses, reads this depth with room to spare.
DECODE_DEPTH = 256

#: A JSON string (escapes respected), or one bracket: what nesting is counted over.
_NESTING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def decode_answer(raw: bytes | bytearray) -> JSONValue:
    """A provider's JSON answer, whatever text its strings hold and however deep it nests.

    orjson reads it when it can (fast, and strict). It refuses a lone
    surrogate escape (``"\\ud800"``: valid JSON, not valid Unicode), bytes
    that are not UTF-8, and nesting past 1,024 levels; those answers are read
    by the standard library (invalid bytes replaced, values nested past
    :data:`DECODE_DEPTH` read as null) and every string made valid
    (:func:`agentd.core.safetext.valid_json`: a lone surrogate becomes U+FFFD).

    Raises:
        orjson.JSONDecodeError: the body is not JSON.
    """
    try:
        return loads(raw)
    except orjson.JSONDecodeError as exc:
        refused = exc
    try:
        value: JSONValue = json.loads(_flattened(bytes(raw), DECODE_DEPTH).decode("utf-8", errors="replace"))
    except (ValueError, RecursionError):  # not JSON after all (json.JSONDecodeError is a ValueError)
        raise refused from None
    return cast(JSONValue, valid_json(value))


def _flattened(raw: bytes, limit: int) -> bytes:
    """``raw`` with every array or object nested deeper than ``limit`` replaced by ``null``."""
    out = bytearray()
    depth = 0
    cut: int | None = None
    kept = 0
    for token in _NESTING.finditer(raw):
        bracket = token.group()
        if bracket[:1] == b'"':
            continue
        if bracket in (b"[", b"{"):
            depth += 1
            if depth == limit + 1:
                cut = token.start()
        else:
            if depth == limit + 1 and cut is not None:
                out += raw[kept:cut] + b"null"
                kept, cut = token.end(), None
            depth -= 1
    if kept == 0:
        return raw
    out += raw[kept:]
    return bytes(out)


class JsonPoster:
    """POSTs JSON to one provider and returns the JSON object it answers, retrying as documented.

    Args:
        provider: the provider name used in messages and telemetry.
        auth_fix: what to tell the user on 401/403 (which variable to set).
        model: the model name, for the fix of a 404.
        base_url_var: the variable that sets the base URL, for messages.
        timeout: the deadline of one call in seconds, retries included (``--model-timeout``).
        max_response_bytes: the largest body accepted.
        sleep: awaited between attempts (``trio.sleep``; tests inject a recorder).
        rng: the jitter source (tests inject a fixed one).
        wall_clock: Unix time now, only for ``Retry-After`` HTTP dates.
        telemetry: receives a ``model.retry`` event per retry.
        max_attempts: attempts per call, the first included.
        client: an ``httpx2.AsyncClient`` to use (one is created otherwise).
    """

    def __init__(
        self,
        *,
        provider: str,
        auth_fix: str,
        model: str = "",
        base_url_var: str = "the base URL",
        timeout: float = DEFAULT_MODEL_TIMEOUT_S,
        max_response_bytes: int = MAX_RESPONSE_BYTES,
        sleep: Sleep = trio.sleep,
        rng: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        client: httpx2.AsyncClient | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts!r}")
        if not (timeout > 0 and math.isfinite(timeout)):
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if max_response_bytes < 1:
            raise ValueError(f"max_response_bytes must be at least 1, got {max_response_bytes!r}")
        self.provider = provider
        self._auth_fix = auth_fix
        self._model = model
        self._base_url_var = base_url_var
        self.timeout = timeout
        self.max_response_bytes = max_response_bytes
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._wall_clock = wall_clock
        self._telemetry = telemetry if telemetry is not None else NullTelemetry()
        self.max_attempts = max_attempts
        # Per-read bound: a non-streaming answer sends its first byte only when the
        # whole generation is done, so the wait for it can be as long as the call's
        # deadline; the deadline itself (below) bounds everything, trickles included.
        self._client = client or new_client(timeout)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def post(self, url: str, *, headers: Mapping[str, str], body: JSONObject) -> JSONObject:
        """POST ``body`` as JSON to ``url`` and return the decoded JSON object.

        Raises:
            ModelAuthError: 401/403.
            ModelUnavailableError: every attempt failed with a retryable status or transport
                error, or the call's deadline passed.
            ModelRequestError: another non-2xx status (the status and the provider's message).
            ModelResponseError: a 2xx body that is not a JSON object, or larger than the cap.
        """
        mark("model.post")
        # The transcript holds model output (arguments with integers past 64 bits): json_bytes writes anything.
        payload = json_bytes(body)
        all_headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "user-agent": _USER_AGENT,
            **headers,
        }
        shown = redact(url)
        state = _Attempts()
        with trio.move_on_after(self.timeout):
            return await self._attempts(url, shown, payload, all_headers, state)
        raise ModelUnavailableError(
            f"{self.provider} at {shown} did not answer within {self.timeout:g}s "
            f"(--model-timeout; {state.count} attempt(s), last: {state.last_failure}). "
            "Fix: check that the provider is up and not overloaded, or raise --model-timeout "
            "for very long generations"
        )

    async def _attempts(
        self, url: str, shown: str, payload: bytes, headers: dict[str, str], state: _Attempts
    ) -> JSONObject:
        for attempt in range(1, self.max_attempts + 1):
            state.count = attempt
            retry_after: float | None = None
            try:
                mark("model.send")
                extensions = {"trace": _trace} if _first_sent is not None else None
                async with self._client.stream(
                    "POST", url, content=payload, headers=headers, extensions=extensions
                ) as response:
                    status = response.status_code
                    raw = await self._read_body(response, shown)
            except httpx2.RequestError as exc:  # transport failures, and a body that cannot be decoded
                state.last_failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            except _BodyStalled as stalled:
                state.last_failure = str(stalled)
            else:
                if 200 <= status < 300:
                    return self._decode(shown, status, raw)
                message = provider_message(raw)
                if status in AUTH_STATUSES:
                    raise ModelAuthError(
                        f"{self.provider} rejected the credentials (HTTP {status} from {shown}): "
                        f"{message}. Fix: {self._auth_fix}"
                    )
                if status not in RETRY_STATUSES:
                    raise ModelRequestError(
                        f"{self.provider} refused the request with HTTP {status} {_phrase(status)} "
                        f"from {shown}: {message}. Fix: {self._request_fix(status)}",
                        status=status,
                        provider_message=message,
                    )
                state.last_failure = f"HTTP {status}: {message}"
                retry_after = retry_after_seconds(response.headers, now_wall=self._wall_clock())
            if attempt == self.max_attempts:
                break
            delay = backoff_delay(attempt, retry_after=retry_after, rng=self._rng)
            self._telemetry.emit(
                "model.retry",
                provider=self.provider,
                attempt=attempt,
                delay_s=round(delay, 3),
                reason=state.last_failure,
            )
            self._telemetry.incr("model.retries")
            await self._sleep(delay)
        raise ModelUnavailableError(
            f"{self.provider} at {shown} still failing after {self.max_attempts} attempts; "
            f"last: {state.last_failure}. Fix: check the base URL and that the provider is up, then run again"
        )

    async def _read_body(self, response: httpx2.Response, shown: str) -> bytearray:
        """The body, streamed: at most ``max_response_bytes``, each read within :data:`BODY_READ_TIMEOUT_S`."""
        cap = self.max_response_bytes
        try:  # never isdigit()/int(): "²" passes one and fails the other
            declared = ascii_int(response.headers.get("content-length", ""))
        except ValueError:
            declared = -1  # absent or unreadable: the streamed read below bounds the body
        if declared > cap:
            raise ModelResponseError(
                f"{self.provider} at {shown} answered HTTP {response.status_code} with a "
                f"{declared}-byte body, over the {cap}-byte response cap; nothing was read. "
                "Fix: check that the base URL points at a model provider's API"
            )
        body = bytearray()
        chunks = response.aiter_bytes()
        while True:
            with trio.move_on_after(BODY_READ_TIMEOUT_S) as scope:
                chunk = await anext(chunks, None)
            if scope.cancelled_caught:
                raise _BodyStalled(
                    f"the body stalled: no data for {BODY_READ_TIMEOUT_S:g}s after {len(body)} bytes"
                )
            if chunk is None:
                return body
            body += chunk
            if len(body) > cap:
                raise ModelResponseError(
                    f"{self.provider} at {shown} answered HTTP {response.status_code} with a body "
                    f"over the {cap}-byte response cap; it was cut off there. "
                    "Fix: check that the base URL points at a model provider's API"
                )

    def _request_fix(self, status: int) -> str:
        fix = _REQUEST_FIXES.get(status)
        if fix is None:
            return "read the provider's message above; the same request will fail again"
        return fix.format(model=f" ({self._model!r})" if self._model else "", base_url_var=self._base_url_var)

    def _decode(self, shown: str, status: int, raw: bytearray) -> JSONObject:
        try:
            data = decode_answer(raw)
        except orjson.JSONDecodeError as exc:
            snippet = bytes(raw[:_SNIPPET_CHARS]).decode("utf-8", errors="replace")
            raise ModelResponseError(
                f"{self.provider} returned an unexpected response: HTTP {status} from {shown} "
                f"with a body that is not JSON ({exc}): {snippet!r}"
            ) from exc
        obj = as_object(data)
        if obj is None:
            raise ModelResponseError(
                f"{self.provider} returned an unexpected response: HTTP {status} from {shown} "
                f"with JSON that is not an object: {type(data).__name__}"
            )
        return obj


class _Attempts:
    """How far one call got, for the deadline's message."""

    def __init__(self) -> None:
        self.count = 0
        self.last_failure = "no answer yet"


class _BodyStalled(Exception):
    """The body stopped arriving for :data:`BODY_READ_TIMEOUT_S` (retried like a dropped connection)."""


def _phrase(status: int) -> str:
    try:
        return f"({http.HTTPStatus(status).phrase})"
    except ValueError:
        return ""

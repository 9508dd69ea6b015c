"""JSON-over-HTTP for the providers: one POST with retries, errors translated at the boundary.

Retry policy (see ``rfcs/0021-model-http-retries.md``):

* Retried: HTTP 408, 429, 500, 502, 503, 504, 529, and transport failures
  (connection refused/reset, timeouts, a connection dropped mid-answer).
* Delay before retry *n* (1-based): the server's ``retry-after-ms`` /
  ``Retry-After`` (seconds or an HTTP date) when present, capped at
  :data:`RETRY_AFTER_MAX_S`; otherwise full jitter,
  ``uniform(0, min(BACKOFF_MAX_S, BACKOFF_BASE_S * 2**(n-1)))``.
* At most :data:`MAX_ATTEMPTS` attempts, then
  :class:`~agentd.errors.ModelUnavailableError`.
* 401/403: :class:`~agentd.errors.ModelAuthError` at once (retrying cannot fix a key).
* Any other non-2xx, or a 2xx whose body is not a JSON object:
  :class:`~agentd.errors.ModelError` with the provider's own message.

The pure parts (:func:`retry_after_seconds`, :func:`backoff_delay`) take the
clock and the random source as arguments so tests assert exact delays.
"""

from __future__ import annotations

import email.utils
import random
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import httpx2
import orjson
import trio

from agentd import __version__
from agentd.errors import ModelAuthError, ModelError, ModelUnavailableError
from agentd.telemetry import NullTelemetry, Telemetry

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

#: Time to wait for a whole (non-streaming) answer. A long generation of
#: thousands of tokens takes minutes; the official SDKs use 10 minutes too.
REQUEST_TIMEOUT_S = 600.0

#: HTTP statuses worth retrying: rate limits, overload and gateway errors.
RETRY_STATUSES: frozenset[int] = frozenset({408, 429, 500, 502, 503, 504, 529})

#: Statuses that mean the credentials are wrong: fatal at once.
AUTH_STATUSES: frozenset[int] = frozenset({401, 403})

#: How much of an unparseable body an error message quotes.
_SNIPPET_CHARS = 300

_USER_AGENT = f"agentd/{__version__}"

Sleep = Callable[[float], Awaitable[None]]


def retry_after_seconds(headers: Mapping[str, str], *, now_wall: float) -> float | None:
    """The delay a response asks for, or ``None`` when it names none (or an unusable one).

    ``retry-after-ms`` (OpenAI) wins over ``Retry-After``; ``Retry-After`` is
    either delta-seconds or an HTTP date (compared with ``now_wall``, Unix
    seconds). Negative results become 0. The value is not capped here.
    """
    lowered = {k.lower(): v for k, v in headers.items()}
    ms = lowered.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
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


def provider_message(body: bytes) -> str:
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


class JsonPoster:
    """POSTs JSON to one provider and returns the JSON object it answers, retrying as documented.

    Args:
        provider: the provider name used in messages and telemetry.
        auth_fix: what to tell the user on 401/403 (which variable to set).
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
        sleep: Sleep = trio.sleep,
        rng: random.Random | None = None,
        wall_clock: Callable[[], float] = time.time,
        telemetry: Telemetry | None = None,
        max_attempts: int = MAX_ATTEMPTS,
        client: httpx2.AsyncClient | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError(f"max_attempts must be at least 1, got {max_attempts!r}")
        self.provider = provider
        self._auth_fix = auth_fix
        self._sleep = sleep
        self._rng = rng if rng is not None else random.Random()
        self._wall_clock = wall_clock
        self._telemetry = telemetry if telemetry is not None else NullTelemetry()
        self.max_attempts = max_attempts
        self._client = client or httpx2.AsyncClient(
            timeout=httpx2.Timeout(REQUEST_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        )

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()

    async def post(self, url: str, *, headers: Mapping[str, str], body: Mapping[str, Any]) -> dict[str, Any]:
        """POST ``body`` as JSON to ``url`` and return the decoded JSON object.

        Raises:
            ModelAuthError: 401/403.
            ModelUnavailableError: every attempt failed with a retryable status or transport error.
            ModelError: another non-2xx status, or a 2xx body that is not a JSON object.
        """
        payload = orjson.dumps(body)
        all_headers = {
            "content-type": "application/json",
            "accept": "application/json",
            "user-agent": _USER_AGENT,
            **headers,
        }
        last_failure = "no attempt made"
        for attempt in range(1, self.max_attempts + 1):
            retry_after: float | None = None
            try:
                response = await self._client.post(url, content=payload, headers=all_headers)
            except httpx2.TransportError as exc:
                last_failure = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            else:
                status = response.status_code
                raw = response.content
                if 200 <= status < 300:
                    return self._decode(url, status, raw)
                message = provider_message(raw)
                if status in AUTH_STATUSES:
                    raise ModelAuthError(
                        f"{self.provider} rejected the credentials (HTTP {status} from {url}): "
                        f"{message}. Fix: {self._auth_fix}"
                    )
                if status not in RETRY_STATUSES:
                    raise ModelError(
                        f"{self.provider} refused the request (HTTP {status} from {url}): {message}"
                    )
                last_failure = f"HTTP {status}: {message}"
                retry_after = retry_after_seconds(response.headers, now_wall=self._wall_clock())
            if attempt == self.max_attempts:
                break
            delay = backoff_delay(attempt, retry_after=retry_after, rng=self._rng)
            self._telemetry.emit(
                "model.retry",
                provider=self.provider,
                attempt=attempt,
                delay_s=round(delay, 3),
                reason=last_failure,
            )
            self._telemetry.incr("model.retries")
            await self._sleep(delay)
        raise ModelUnavailableError(
            f"{self.provider} at {url} still failing after {self.max_attempts} attempts; "
            f"last: {last_failure}. Fix: check the base URL and that the provider is up, then run again"
        )

    def _decode(self, url: str, status: int, raw: bytes) -> dict[str, Any]:
        try:
            data = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            snippet = raw[:_SNIPPET_CHARS].decode("utf-8", errors="replace")
            raise ModelError(
                f"{self.provider} answered HTTP {status} from {url} with a body that is not JSON "
                f"({exc}): {snippet!r}"
            ) from exc
        if not isinstance(data, dict):
            raise ModelError(
                f"{self.provider} answered HTTP {status} from {url} with JSON that is not an object: "
                f"{type(data).__name__}"
            )
        return data

"""What the HTTP providers share: the client class, and the readers of usage and model names.

:class:`HttpModel` is one JSON ``POST`` per call (through
:class:`~agentd.models._http.JsonPoster`), the reply priced from the usage
the provider reported; the Chat Completions, Responses and Messages clients
subclass it with their request body, their reply parser, their path and
their authentication header.

A provider's answer is untrusted wire input: the readers here narrow every
field and never raise; a figure of the wrong shape (a string, a boolean, a
negative count) counts as absent.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from types import EllipsisType
from typing import ClassVar, Protocol, TypedDict, Unpack

import httpx2

from agentd.core.errors import ModelRequestError
from agentd.core.jsonvalue import JSONObject, get_object, get_str
from agentd.core.redact import redact
from agentd.models._http import JsonPoster, Sleep, join_url
from agentd.models.base import ModelReply, Prompt, ToolCall, Usage, estimate_input_tokens, estimate_tokens
from agentd.models.pricing import price_call
from agentd.models.settings import ModelSettings, WireApi, images_by_default
from agentd.observe.telemetry import Telemetry

#: Longest model name kept from an answer (a hostile server cannot grow telemetry through it).
_MAX_MODEL_NAME = 200

#: Statuses with which a provider refuses a request it cannot take (an image
#: for a text-only model is one reason): the error then says images were sent.
_IMAGE_REFUSAL_STATUSES = frozenset({400, 413, 422})


class PosterOptions(TypedDict, total=False):
    """The retry and transport seams of :class:`~agentd.models._http.JsonPoster` (see its arguments)."""

    timeout: float
    sleep: Sleep
    rng: random.Random | None
    wall_clock: Callable[[], float]
    telemetry: Telemetry | None
    max_attempts: int
    client: httpx2.AsyncClient | None


def token_count(obj: Mapping[str, object], key: str) -> int | None:
    """``obj[key]`` when it is a token count (an integer >= 0, not a boolean), else ``None``."""
    value = obj.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def usage_from(usage: Mapping[str, object], input_key: str, output_key: str, details_key: str) -> Usage:
    """OpenAI usage (Chat Completions or Responses spelling) as a :class:`Usage`.

    The input count already includes the cached tokens; the cache figures are
    clamped into it, so a server reporting more cached tokens than input
    tokens cannot make a count negative.
    """
    total_in = token_count(usage, input_key) or 0
    details = get_object(usage, details_key) or {}
    cached = min(token_count(details, "cached_tokens") or 0, total_in)
    written = min(token_count(details, "cache_write_tokens") or 0, total_in - cached)
    return Usage(total_in, token_count(usage, output_key) or 0, cached, written)


def openai_usage(
    body: JSONObject,
    input_key: str,
    output_key: str,
    details_key: str,
    *,
    estimated_input: int,
    text: str,
    calls: Sequence[ToolCall],
) -> Usage:
    """The usage an OpenAI answer reports, or an estimate when it has no usable ``usage`` block.

    Some compatible servers omit usage: input is then ``estimated_input``,
    output is estimated from the text and the tool calls.
    """
    usage = get_object(body, "usage")
    if usage is not None and token_count(usage, input_key) is not None:
        return usage_from(usage, input_key, output_key, details_key)
    return estimated_usage(estimated_input, text, calls)


def estimated_usage(estimated_input: int, text: str, calls: Sequence[ToolCall]) -> Usage:
    """Usage estimated from the characters of the answer (its text, and each call's name and arguments)."""
    return Usage(estimated_input, estimate_tokens(text + "".join(c.name + c.raw_arguments for c in calls)))


def messages_usage(body: JSONObject) -> Usage:
    """Anthropic Messages usage: the API counts uncached, cache-read and cache-written input apart."""
    usage = get_object(body, "usage") or {}
    read = token_count(usage, "cache_read_input_tokens") or 0
    written = token_count(usage, "cache_creation_input_tokens") or 0
    uncached = token_count(usage, "input_tokens") or 0
    return Usage(uncached + read + written, token_count(usage, "output_tokens") or 0, read, written)


def response_model(body: JSONObject) -> str | None:
    """The model name the provider reported (a dated snapshot, an Azure deployment's model), if any."""
    name = get_str(body, "model")
    return name[:_MAX_MODEL_NAME] if name else None


class RequestBuilder(Protocol):
    """A wire format's ``build_request``: the request body for a prompt (pure)."""

    def __call__(self, model: str, prompt: Prompt, settings: ModelSettings | None = None) -> JSONObject: ...


class ReplyParser(Protocol):
    """A wire format's ``parse_response``: the reply in an answer (``estimated_input``: input tokens when it reports none)."""

    def __call__(self, body: JSONObject, *, estimated_input: int = 0) -> ModelReply: ...


@dataclass(frozen=True, slots=True)
class WireFormat:
    """The two pure halves of a provider's wire format."""

    build_request: RequestBuilder
    parse_response: ReplyParser


class HttpModel:
    """A model behind one JSON endpoint: one ``POST`` per call, the reply priced.

    Args:
        name: the model name sent as ``model`` (for Azure: the deployment).
        base_url: the API root; the subclass's path is appended (default: the provider's own).
        api_key: sent as the subclass's authentication header; ``None`` sends none.
        max_tokens: the older spelling of ``settings.max_output_tokens``.
        settings: the model settings sent with every call.
        url: the whole request URL, when the path is not the usual one under
            ``base_url`` (Azure's deployment URLs); overrides ``base_url``.
        headers: extra request headers (``api-key``, a ``[providers.NAME]`` table).
        provider: the provider name in telemetry and messages (default: the subclass's).
        price_provider: the ``genai-prices`` provider id to price calls with
            (None: unknown; default: the subclass's).
        auth_fix, base_url_var: what 401/403 and 404 messages tell the user
            (default: the subclass's key and base URL variables).
        options: the retry and transport seams of :class:`agentd.models._http.JsonPoster`
            (``timeout`` is the deadline of one call, retries included: ``--model-timeout``).
    """

    provider: str
    price_provider: str | None
    wire: ClassVar[WireFormat]
    #: The wire API (what ``images`` defaults to depends on it).
    wire_api: ClassVar[WireApi]
    #: Whether the model takes images from tool results (``settings.images``, resolved).
    takes_images: bool
    #: The path under the base URL.
    path: ClassVar[str]
    default_base_url: ClassVar[str]
    #: The variables named by the default error fixes.
    key_var: ClassVar[str]
    base_url_env: ClassVar[str]

    def __init__(
        self,
        name: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        max_tokens: int | None = None,
        settings: ModelSettings | None = None,
        url: str | None = None,
        headers: Mapping[str, str] | None = None,
        provider: str | None = None,
        price_provider: str | EllipsisType | None = ...,
        auth_fix: str | None = None,
        base_url_var: str | None = None,
        **options: Unpack[PosterOptions],
    ) -> None:
        self.name = name
        self.provider = provider if provider is not None else type(self).provider
        if not isinstance(price_provider, EllipsisType):
            self.price_provider = price_provider
        base = base_url if base_url is not None else self.default_base_url
        self.url = url if url is not None else join_url(base, self.path)
        self.settings = settings or ModelSettings()
        if max_tokens is not None and self.settings.max_output_tokens is None:
            self.settings = replace(self.settings, max_output_tokens=max_tokens)
        if self.settings.images is None:
            own = url is None and self.url == join_url(self.default_base_url, self.path)
            self.settings = replace(
                self.settings, images=images_by_default(self.wire_api, own_endpoint=own, model=name)
            )
        self.takes_images = self.settings.images is True
        self._headers = self._auth_headers(api_key)
        self._headers.update(headers or {})
        self._poster = JsonPoster(
            provider=self.provider,
            auth_fix=auth_fix or f"set {self.key_var} to a valid key for this base URL ({self.base_url_env})",
            model=name,
            base_url_var=base_url_var or self.base_url_env,
            **options,
        )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}, provider={self.provider!r}, url={redact(self.url)!r})"

    def _auth_headers(self, api_key: str | None) -> dict[str, str]:
        """The headers that carry the key (a bearer token unless the API says otherwise)."""
        return {"authorization": f"Bearer {api_key}"} if api_key else {}

    async def complete(self, prompt: Prompt) -> ModelReply:
        """One call (see :class:`agentd.models.base.Model`)."""
        body = self.wire.build_request(self.name, prompt, self.settings)
        try:
            answer = await self._poster.post(self.url, headers=self._headers, body=body)
        except ModelRequestError as exc:
            images = sum(len(m.images) for m in prompt.messages) if self.takes_images else 0
            if images and exc.status in _IMAGE_REFUSAL_STATUSES:
                raise ModelRequestError(
                    f"{exc}; the request carried {images} image(s) from tool results: if {self.name!r} "
                    "takes no images, set images = false in [model_settings] (or in its [providers.NAME] table)",
                    status=exc.status,
                    provider_message=exc.provider_message,
                ) from exc
            raise
        reply = self.wire.parse_response(answer, estimated_input=estimate_input_tokens(prompt))
        cost = price_call(self.price_provider, (response_model(answer), self.name), reply.usage)
        return replace(reply, cost_usd=cost)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._poster.aclose()

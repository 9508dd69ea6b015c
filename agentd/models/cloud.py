"""``bedrock:MODEL`` and ``vertex:MODEL``: Anthropic models on AWS Bedrock and Google Vertex AI.

These go through the official ``anthropic`` SDK's async Bedrock and Vertex
clients, because they carry the cloud authentication that would be foolish
to hand-write: AWS SigV4 request signing with the whole boto credential chain
(environment, profile, IAM role for service accounts, instance metadata) and
Google's application default credentials (a service-account file, workload
identity, the metadata server) with token refresh. The SDK is an optional
extra (``bedrock``, ``vertex``), imported only when such a
model is used, and then in the zygote before it forks (:func:`prewarm`), so
a child does not pay its 2-3 s import.

The request body is exactly what ``anthropic:`` sends
(:func:`agentd.models.anthropic.build_request`: settings, prompt caching,
thinking replay); the SDK moves the model into the URL
(``/model/{model}/invoke`` on Bedrock,
``/projects/{project}/locations/{region}/publishers/anthropic/models/{model}:rawPredict``
on Vertex), adds ``anthropic_version`` and signs the request. The answer is
parsed by :func:`agentd.models.anthropic.parse_response`.

The SDK runs on ``anyio``, so it runs under trio; its blocking credential
work (boto's signing, google-auth's token refresh) runs in a worker thread.

Settings from the environment, as the SDK and the clouds define them:

* Bedrock: ``AWS_REGION`` / ``AWS_DEFAULT_REGION`` (or the profile's region),
  credentials from boto's chain (``AWS_ACCESS_KEY_ID`` /
  ``AWS_SECRET_ACCESS_KEY`` / ``AWS_SESSION_TOKEN``, ``AWS_PROFILE``, web
  identity, instance roles), or a Bedrock API key in
  ``AWS_BEARER_TOKEN_BEDROCK``; ``ANTHROPIC_BEDROCK_BASE_URL`` overrides the
  endpoint.
* Vertex: ``CLOUD_ML_REGION``, ``ANTHROPIC_VERTEX_PROJECT_ID`` (required:
  the SDK builds the URL before it loads credentials), application default credentials
  (``GOOGLE_APPLICATION_CREDENTIALS`` …); ``ANTHROPIC_VERTEX_BASE_URL``
  overrides the endpoint.

Errors are translated at this boundary into agentd's model errors (exit 4):
401/403 and unresolvable credentials → :class:`~agentd.core.errors.ModelAuthError`;
connection failures, 429 and 5xx after the SDK's retries, or the call's
deadline → :class:`~agentd.core.errors.ModelUnavailableError`; any other status →
:class:`~agentd.core.errors.ModelRequestError`.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

import trio

from agentd.core.errors import (
    ConfigError,
    ModelAuthError,
    ModelRequestError,
    ModelResponseError,
    ModelUnavailableError,
)
from agentd.core.extras import install_hint
from agentd.core.jsonvalue import JSONObject
from agentd.core.redact import redact
from agentd.models._http import DEFAULT_MODEL_TIMEOUT_S, MAX_ATTEMPTS, new_client
from agentd.models.anthropic import beta_headers, build_request, parse_response
from agentd.models.base import ModelReply, Prompt
from agentd.models.pricing import price_usd
from agentd.models.settings import ModelSettings, images_by_default

if TYPE_CHECKING:
    import anthropic
    from anthropic.types import Message as SdkMessage

CloudProvider = Literal["bedrock", "vertex"]

#: The extra (of agentd's distribution) that brings each provider's SDK, and the modules it needs.
EXTRAS: dict[CloudProvider, tuple[str, tuple[str, ...]]] = {
    "bedrock": ("bedrock", ("anthropic", "boto3", "botocore")),
    "vertex": ("vertex", ("anthropic", "google.auth")),
}

#: The ``genai-prices`` provider id of each cloud.
PRICE_PROVIDERS: dict[CloudProvider, str] = {"bedrock": "aws", "vertex": "google"}

#: What to do when the cloud refuses the credentials.
AUTH_FIXES: dict[CloudProvider, str] = {
    "bedrock": (
        "check the AWS credentials (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, AWS_PROFILE, the pod's IAM role, "
        "or AWS_BEARER_TOKEN_BEDROCK) and that they may invoke this model in AWS_REGION"
    ),
    "vertex": (
        "check the Google credentials (GOOGLE_APPLICATION_CREDENTIALS or the workload identity), that they may "
        "use Vertex AI in the project (ANTHROPIC_VERTEX_PROJECT_ID), and CLOUD_ML_REGION"
    ),
}

#: Body fields passed to ``messages.create`` as keywords; everything else goes in ``extra_body``.
_KEYWORDS = ("model", "max_tokens", "messages")


def missing_modules(provider: CloudProvider) -> list[str]:
    """The modules of the provider's extra that cannot be imported (no import happens)."""
    missing = []
    for module in EXTRAS[provider][1]:
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(module)
    return missing


def check_environment(provider: CloudProvider, spec: str, env: Mapping[str, str]) -> None:
    """What can be checked before any I/O: the extra is installed, the region (and Vertex project) known.

    Raises:
        ConfigError: with ``setting="model"``, naming what is missing and how to get it.
    """
    missing = missing_modules(provider)
    if missing:
        extra = EXTRAS[provider][0]
        raise ConfigError(
            "model",
            spec,
            f"{provider}: needs the optional SDK ({', '.join(missing)} not installed); {install_hint(extra)}",
        )
    if provider == "bedrock":
        if not (env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or env.get("AWS_PROFILE")):
            raise ConfigError(
                "model",
                spec,
                "bedrock: no AWS region: export AWS_REGION=us-east-1 (or AWS_DEFAULT_REGION, or an "
                "AWS_PROFILE that names one)",
            )
    else:
        if not env.get("CLOUD_ML_REGION"):
            raise ConfigError(
                "model", spec, "vertex: no region: export CLOUD_ML_REGION=us-east5 (or global, us, eu)"
            )
        # The SDK builds the request URL before it loads credentials, so the
        # project cannot come from them: it must be named.
        if not env.get("ANTHROPIC_VERTEX_PROJECT_ID"):
            raise ConfigError(
                "model", spec, "vertex: no project: export ANTHROPIC_VERTEX_PROJECT_ID=your-gcp-project"
            )


def prewarm(provider: CloudProvider) -> None:
    """Import the SDK client (and its auth libraries) now, so forked children inherit them."""
    if provider == "bedrock":
        import boto3
        import botocore.auth
        import botocore.awsrequest  # noqa: F401
        from anthropic import AsyncAnthropicBedrock  # noqa: F401

        # The SDK signs with a boto3 session of its own, made in the child on
        # its first call; the import (~0.3 s) and one session here load what
        # every session shares. Credentials are not resolved here: they may
        # need the network (an instance role) and belong to each child.
        boto3.Session()
    else:
        import google.auth
        import google.auth.transport.requests
        import google.oauth2.service_account  # noqa: F401
        from anthropic import AsyncAnthropicVertex  # noqa: F401


def make_client(provider: CloudProvider, *, timeout: float, max_retries: int) -> Any:
    """The SDK's async client for ``provider``, configured from the environment, on agentd's HTTP client.

    ``Any``: the optional SDK's two client classes (imported only here), whose
    ``messages.create`` is called with the body agentd built; tests hand in fakes.
    """
    http_client = new_client(timeout)
    if provider == "bedrock":
        from anthropic import AsyncAnthropicBedrock

        return AsyncAnthropicBedrock(timeout=timeout, max_retries=max_retries, http_client=http_client)
    from anthropic import AsyncAnthropicVertex

    return AsyncAnthropicVertex(timeout=timeout, max_retries=max_retries, http_client=http_client)


class CloudAnthropicModel:
    """An Anthropic model on Bedrock or Vertex, called through the official SDK.

    Args:
        name: the model id (Bedrock: ``anthropic.claude-…`` or an inference profile
            such as ``us.anthropic.claude-…``; Vertex: ``claude-…@DATE``).
        provider: ``bedrock`` or ``vertex``.
        settings: the model settings sent with every call.
        timeout: the deadline of one call, retries included (``--model-timeout``).
        max_attempts: attempts per call (the SDK retries ``max_attempts - 1`` times).
        client: an SDK client to use (one is built from the environment otherwise).
    """

    def __init__(
        self,
        name: str,
        *,
        provider: CloudProvider,
        settings: ModelSettings | None = None,
        timeout: float = DEFAULT_MODEL_TIMEOUT_S,
        max_attempts: int = MAX_ATTEMPTS,
        client: Any = None,  # an SDK client, or a fake with its messages.create (see make_client)
    ) -> None:
        self.name = name
        self.provider: str = provider
        self.cloud: CloudProvider = provider
        self.price_provider: str | None = PRICE_PROVIDERS[provider]
        self.settings = settings or ModelSettings()
        if self.settings.images is None:
            # The cloud's own endpoint: the model is the Claude model its id names.
            self.settings = replace(
                self.settings, images=images_by_default("messages", own_endpoint=True, model=name)
            )
        self.takes_images = self.settings.images is True
        # The SDK turns it into the body's anthropic_beta on Bedrock, a header on Vertex.
        self._beta = beta_headers(self.settings) or None
        self.timeout = timeout
        self._client = client or make_client(provider, timeout=timeout, max_retries=max_attempts - 1)

    def __repr__(self) -> str:
        return f"CloudAnthropicModel({self.name!r}, provider={self.provider!r})"

    async def complete(self, prompt: Prompt) -> ModelReply:
        """One Messages call through the SDK (see :class:`agentd.models.base.Model`)."""
        body = build_request(self.name, prompt, self.settings)
        keywords = {k: body.pop(k) for k in _KEYWORDS}
        answer: SdkMessage | None = None
        with trio.move_on_after(self.timeout):
            answer = await self._call(keywords, body)
        if answer is None:
            raise ModelUnavailableError(
                f"{self.provider} did not answer within {self.timeout:g}s (--model-timeout). "
                "Fix: check that the endpoint is reachable and not overloaded, or raise --model-timeout"
            )
        try:
            data = answer.model_dump(mode="json")
        except Exception as exc:  # the SDK handed back something that is not a message
            raise ModelResponseError(f"{self.provider} returned an unexpected response: {exc}") from exc
        if not isinstance(data, dict):
            raise ModelResponseError(f"{self.provider} returned an unexpected response: not an object")
        reply = parse_response(data)
        return replace(reply, cost_usd=price_usd(self.price_provider, self.name, reply.usage))

    async def _call(self, keywords: JSONObject, extra_body: JSONObject) -> SdkMessage:
        import anthropic

        try:
            message: SdkMessage = await self._client.messages.create(
                **keywords, extra_body=extra_body, extra_headers=self._beta, timeout=self.timeout
            )
            return message
        except anthropic.APIStatusError as exc:
            raise self._status_error(exc) from exc
        except Exception as exc:
            # A credential that cannot be resolved or refreshed surfaces bare (boto,
            # google-auth) or inside a connection error, depending on where it failed.
            cause = _credential_cause(exc)
            if cause is not None:
                raise ModelAuthError(
                    f"{self.provider}: no usable credentials ({type(cause).__name__}: {redact(str(cause))}). "
                    f"Fix: {AUTH_FIXES[self.cloud]}"
                ) from exc
            if isinstance(exc, anthropic.APIConnectionError):  # timeouts included, after the SDK's retries
                raise ModelUnavailableError(
                    f"{self.provider} could not be reached after {MAX_ATTEMPTS} attempts: {type(exc).__name__}: "
                    f"{redact(str(exc))}. Fix: check the network, the region and the endpoint "
                    "(ANTHROPIC_BEDROCK_BASE_URL / ANTHROPIC_VERTEX_BASE_URL)"
                ) from exc
            if isinstance(exc, anthropic.APIResponseValidationError):
                raise ModelResponseError(f"{self.provider} returned an unexpected response: {exc}") from exc
            raise

    def _status_error(self, exc: anthropic.APIStatusError) -> Exception:
        status = int(getattr(exc, "status_code", 0) or 0)
        message = _provider_message(exc)
        if status in (401, 403):
            return ModelAuthError(
                f"{self.provider} rejected the credentials (HTTP {status}): {message}. "
                f"Fix: {AUTH_FIXES[self.cloud]}"
            )
        if status in (408, 409, 429) or status >= 500:
            return ModelUnavailableError(
                f"{self.provider} still failing after {MAX_ATTEMPTS} attempts; last: HTTP {status}: {message}. "
                "Fix: check the model's quota and that the service is up, then run again"
            )
        fix = (
            f"check the model id ({self.name!r}) and that it is enabled in this region"
            if status == 404
            else "read the provider's message above; the same request will fail again"
        )
        return ModelRequestError(
            f"{self.provider} refused the request with HTTP {status}: {message}. Fix: {fix}",
            status=status,
            provider_message=message,
        )

    async def aclose(self) -> None:
        """Close the SDK client's connection pool."""
        await self._client.close()


def _provider_message(exc: anthropic.APIStatusError) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            return str(err["message"])
        for key in ("message", "Message"):  # Bedrock's own errors say {"message": ...}
            if isinstance(body.get(key), str):
                return str(body[key])
    return redact(str(getattr(exc, "message", "") or exc))[:300]


#: Error classes (by name, so neither SDK is imported here) of credentials that
#: could not be resolved, signed with or refreshed. botocore only runs to sign
#: (the HTTP is the SDK's own), so any of its errors is a credential problem.
_CREDENTIAL_ERRORS = frozenset(
    {"BotoCoreError", "GoogleAuthError", "DefaultCredentialsError", "RefreshError"}
)


def _credential_cause(exc: BaseException) -> BaseException | None:
    """The credential error behind ``exc`` (itself, or what it was raised from), if any."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        names = {cls.__name__ for cls in type(current).__mro__}
        if names & _CREDENTIAL_ERRORS or (
            isinstance(current, RuntimeError) and "credentials" in str(current).lower()
        ):
            return current
        current = current.__cause__ or current.__context__
    return None

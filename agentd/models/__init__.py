"""Model providers behind one small interface (rfcs/0020).

``make_model("openai:gpt-4o-mini", env=os.environ, settings=ModelSettings(...))``
returns a :class:`Model`; ``await model.complete(Prompt(system=..., messages=[...],
tools=[...]))`` returns the next :class:`ModelReply`, with its :class:`Usage`
(cached tokens included) and its cost in USD. Providers: ``openai:`` (Chat
Completions, any compatible base URL), ``openai-responses:`` (Responses API),
``anthropic:`` (Messages API), ``azure:`` (Azure OpenAI deployments),
``bedrock:`` / ``vertex:`` (Anthropic models through the official SDK, optional
extras), ``NAME:`` (a ``[providers.NAME]`` endpoint) and ``script:`` (a JSON
file of assistant turns, offline and deterministic).

Errors (from :mod:`agentd.core.errors`)::

    ConfigError              bad spec or script file (exit 2), before any I/O
    FatalInfraError          (exit 4)
    ├── ModelAuthError       401/403, at once
    ├── ModelUnavailableError  429/5xx/connection errors after every retry, or the call's deadline
    └── ModelError           any other unusable answer
        ├── ModelRequestError   another 4xx: the status and the provider's own message
        └── ModelResponseError  a malformed 2xx body (names the field) or one over the size cap
"""

from agentd.models.base import (
    ImagePart,
    Message,
    Model,
    ModelReply,
    Prompt,
    Role,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
    estimate_tokens,
    valid_reply,
)
from agentd.models.factory import (
    PROVIDERS,
    Provider,
    ProviderConfig,
    make_model,
    parse_model_spec,
    prewarm,
    settings_problems,
    validate_model_spec,
    wire_api,
)
from agentd.models.script import NO_REPLY, Script, ScriptModel, load_script
from agentd.models.settings import ModelSettings, SettingError, WireApi

__all__ = [
    "NO_REPLY",
    "PROVIDERS",
    "ImagePart",
    "Message",
    "Model",
    "ModelReply",
    "ModelSettings",
    "Prompt",
    "Provider",
    "ProviderConfig",
    "Role",
    "Script",
    "ScriptModel",
    "SettingError",
    "StopReason",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "WireApi",
    "estimate_tokens",
    "load_script",
    "make_model",
    "parse_model_spec",
    "prewarm",
    "settings_problems",
    "valid_reply",
    "validate_model_spec",
    "wire_api",
]

"""Model providers behind one small interface (ARCHITECTURE.md decision 7).

``make_model("openai:gpt-4o-mini", env=os.environ)`` returns a :class:`Model`;
``await model.complete(system=..., messages=[...], tools=[...])`` returns the
next :class:`ModelReply`. Providers: ``openai:`` (Chat Completions, any
compatible base URL), ``anthropic:`` (Messages API), ``script:`` (a JSON file
of assistant turns, offline and deterministic).

Errors (from :mod:`agentd.errors`)::

    ConfigError              bad spec or script file (exit 2), before any I/O
    FatalInfraError          (exit 4)
    ├── ModelAuthError       401/403, at once
    ├── ModelUnavailableError  429/5xx/connection errors after every retry, or the call's deadline
    └── ModelError           any other unusable answer
        ├── ModelRequestError   another 4xx: the status and the provider's own message
        └── ModelResponseError  a malformed 2xx body (names the field) or one over the size cap
"""

from agentd.models.base import (
    Message,
    Model,
    ModelReply,
    Role,
    StopReason,
    ToolCall,
    ToolSpec,
    Usage,
    estimate_tokens,
)
from agentd.models.factory import PROVIDERS, Provider, make_model, parse_model_spec, validate_model_spec
from agentd.models.script import NO_REPLY, Script, ScriptModel, load_script

__all__ = [
    "NO_REPLY",
    "PROVIDERS",
    "Message",
    "Model",
    "ModelReply",
    "Provider",
    "Role",
    "Script",
    "ScriptModel",
    "StopReason",
    "ToolCall",
    "ToolSpec",
    "Usage",
    "estimate_tokens",
    "load_script",
    "make_model",
    "parse_model_spec",
    "validate_model_spec",
]

"""agentd's exception tree.

::

    AgentdError                      base; ``exit_code`` says how the process ends
    ├── ConfigError                  invalid setting, found before any side effect (2)
    ├── FatalInfraError              the model provider cannot be used (4)
    │   ├── ModelAuthError           401/403 from the provider
    │   ├── ModelUnavailableError    retries exhausted on 429/5xx/connection errors, or the
    │   │                            call's deadline (``--model-timeout``) passed
    │   └── ModelError               the provider refused the request or answered something unusable
    │       ├── ModelRequestError    a 4xx other than 401/403/408/429: status + the provider's message
    │       └── ModelResponseError   a 2xx body that is malformed (names the field) or over the size cap
    ├── RequiredServerFailed         a required MCP server failed (6)
    ├── UpstreamError                an MCP server call failed (not fatal by itself)
    │   ├── ServerUnavailable        the server is not connected right now
    │   ├── CapabilityMissing        the server lacks what the call needs
    │   └── MalformedReadError       a watched resource's read broke the read contract
    ├── RouteError                   a routing rule was violated (e.g. URI already owned)
    ├── LimitReached                 a cap on what a model may create was reached (rfcs/0265)
    ├── SandboxError                 a watch filter was refused or failed
    │   └── FilterRejected           ``on_event`` refused at ``watch_start`` (line, column)
    ├── WatchError                   a watch cannot start or stop (limit, name taken, bad URI)
    ├── WatchStateError              the ``--watch-state`` file cannot be read or written
    ├── StateFileError               a path agentd keeps or reads is not what it may use
    │   ├── NotAFile                 a link, FIFO, device, socket or directory where a file belongs
    │   └── NotOurs                  owned by another user, or writable by others
    ├── ProtocolError                a child broke the control protocol (the child is killed)
    └── LifecycleError               an illegal state transition (a bug: names both states)

Errors that end the process carry their exit code; everything else is
reported to whoever made the call (often the model, as a tool error).

Every message goes through :func:`agentd.core.redact.redact` when it is turned
into text (``str(exc)``), so a credential in a URL, an argument or a
provider's answer never reaches a log line, a tool result or stderr.
"""

from __future__ import annotations

from agentd.core.exitcodes import ExitCode
from agentd.core.limits import ModelLimit
from agentd.core.redact import redact


class AgentdError(Exception):
    """Base of every error agentd raises on purpose."""

    exit_code: ExitCode = ExitCode.CRASHED

    def __str__(self) -> str:
        return redact(super().__str__())


class ConfigError(AgentdError):
    """An invalid setting. The message names the setting, the value and the fix."""

    exit_code = ExitCode.CONFIG

    def __init__(self, setting: str, value: object, fix: str) -> None:
        self.setting = setting
        self.value = value
        self.fix = fix
        super().__init__(f"{setting}: {value!r} is not valid: {fix}")


class FatalInfraError(AgentdError):
    """The model provider cannot be used: auth failed, or unreachable after retries."""

    exit_code = ExitCode.FATAL_INFRA


class ModelAuthError(FatalInfraError):
    """The provider rejected the credentials (401/403)."""


class ModelUnavailableError(FatalInfraError):
    """The provider stayed unreachable or overloaded after every retry, or the call's deadline passed."""


class ModelError(FatalInfraError):
    """The provider answered, but with something agentd cannot use.

    Fatal (exit 4): sending the same request again cannot fix it (a wrong
    model name, a request the provider rejects, a body agentd cannot read).
    """


class ModelRequestError(ModelError):
    """The provider refused the request (a 4xx other than 401/403/408/429).

    Attributes:
        status: the HTTP status.
        provider_message: the provider's own error message.
    """

    def __init__(self, message: str, *, status: int, provider_message: str) -> None:
        self.status = status
        self.provider_message = provider_message
        super().__init__(message)


class ModelResponseError(ModelError):
    """The provider answered 2xx with a body agentd cannot use: not JSON, a missing or
    mistyped field (named in the message), or more bytes than the response cap."""


class RequiredServerFailed(AgentdError):
    """A server marked ``required`` could not start or reconnect."""

    exit_code = ExitCode.REQUIRED_SERVER


class UpstreamError(AgentdError):
    """An MCP server call failed; reported to the caller, not fatal by itself."""


class ServerUnavailable(UpstreamError):
    """The server is not connected (starting, restarting, or failed)."""


class CapabilityMissing(UpstreamError):
    """The server does not offer what the call needs (e.g. ``resources.subscribe``)."""


class RouteError(AgentdError):
    """A routing rule was violated, e.g. a URI already owned by another session."""


class LimitReached(AgentdError):
    """A cap on what a model may create was reached (rfcs/0265): the call is refused, nothing else.

    Reported to the calling agent as a tool error; the message names the cap,
    the setting that raises it and what the model can do instead.

    Attributes:
        limit: the cap, named as its setting.
        value: the cap's value.
        first: the first refusal since the cap was reached (telemetry says it once).
    """

    def __init__(self, message: str, *, limit: ModelLimit, value: int, first: bool = True) -> None:
        self.limit: ModelLimit = limit
        self.value = value
        self.first = first
        super().__init__(message)


class SandboxError(AgentdError):
    """A watch filter was refused at validation or failed at run time."""


class MalformedReadError(UpstreamError):
    """A resource read broke the watch read contract (not JSON, no ``events`` list, ...).

    The message names the URI when known, what was wrong, and what the server
    must send instead. The extractor's baseline is unchanged.
    """


class FilterRejected(SandboxError):
    """``on_event`` was refused at ``watch_start`` (wrong type, syntax, unknown name...).

    Attributes:
        line, column: 1-based position in the source when known, else ``None``.
    """

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None) -> None:
        self.line = line
        self.column = column
        super().__init__(message)


class WatchError(AgentdError):
    """A watch cannot be started or stopped: over the limit, name taken, unknown URI...

    Reported to the calling agent as a tool error; the message says what to do.

    Attributes:
        transient: The same call may succeed later (the server is down, a read
            failed); ``False`` when the arguments themselves are refused.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        self.transient = transient
        super().__init__(message)


class WatchStateError(AgentdError):
    """The ``--watch-state`` file cannot be read or written.

    Not fatal: the supervisor reports it and keeps watches in memory only.
    The message names the path, the OS error and the fix.
    """


class StateFileError(AgentdError):
    """A path agentd keeps (under ``--state-dir``) or reads (``@FILE``) is not what it may use.

    Attributes:
        path: the path, as given.
        problem: what it is (``"is a FIFO (named pipe)"``, ``"is owned by uid 1001"``).
    """

    def __init__(self, path: str, problem: str) -> None:
        self.path = path
        self.problem = problem
        super().__init__(f"{path!r} {problem}")


class NotAFile(StateFileError):
    """Not a regular file: a symbolic link (where links are not followed), FIFO, device, socket or directory.

    Attributes:
        kind: what it is instead (``"a FIFO (named pipe)"``).
    """

    def __init__(self, path: str, kind: str) -> None:
        self.kind = kind
        super().__init__(path, f"is {kind}, not a regular file")


class NotOurs(StateFileError):
    """Owned by another user than agentd's (or a directory others may write): refused, left untouched."""


class LifecycleError(AgentdError):
    """An illegal state transition; the message names the current and allowed states."""


class ProtocolError(AgentdError):
    """A frame on a child's control channel broke the protocol (malformed, out of bounds, out of turn).

    The supervisor kills that child and reports the message as the reason in
    ``subagent.exit``; nothing of the frame reaches the reactor.
    """

"""One line for an exception from an upstream server or its transport (for messages and telemetry)."""

from __future__ import annotations

from mcp.shared.exceptions import MCPError

from agentd.core.errors import UpstreamError

__all__ = ["describe", "unwrap"]


def unwrap(exc: BaseException) -> BaseException:
    """The one exception inside single-member groups (a nursery wraps what its body raises)."""
    while isinstance(exc, BaseExceptionGroup) and len(exc.exceptions) == 1:
        exc = exc.exceptions[0]
    return exc


def describe(exc: BaseException) -> str:
    """One line for an exception, unwrapping single-member groups."""
    exc = unwrap(exc)
    text = str(exc) or type(exc).__name__
    return text if isinstance(exc, MCPError | UpstreamError) else f"{type(exc).__name__}: {text}"

"""agentd's single exit-code table, and the map from terminal status to code.

Every other place that needs an exit code (the CLI, the drivers, the
Kubernetes manifests' ``podFailurePolicy``) takes it from here; a test fails
if the manifests drift from this table.

| code | when |
| --- | --- |
| 0 | once: root completed; daemons: clean drain |
| 1 | once: root crashed; loop: restart breaker open; internal error |
| 2 | configuration or usage error, found before any side effect |
| 3 | budget exhausted, with a usable partial result on stdout |
| 4 | fatal infra: model provider unreachable or auth failed after retries, or it refused |
|   | the request / answered unusably (the HTTP status and its message in ``model.fatal``) |
| 5 | the model refused |
| 6 | a required MCP server failed (could not start / reconnect) |
| 7 | budget exhausted (tree token or step ceiling) |
| 8 | once: the result could not be written to stdout (closed, full, not read) |
| 124 | deadline reached |
| 143 | drain did not finish within the grace period (or a second signal) |
"""

from __future__ import annotations

import enum
from typing import Literal, get_args


class ExitCode(enum.IntEnum):
    """Process exit codes; the values are a contract with Jobs and scripts."""

    OK = 0
    """once: the root completed; daemons: a clean drain."""
    CRASHED = 1
    """once: the root crashed; loop: restart breaker open; internal error."""
    CONFIG = 2
    """Configuration or usage error, found before any side effect."""
    BUDGET_PARTIAL = 3
    """Budget exhausted, but a usable partial result was printed."""
    FATAL_INFRA = 4
    """Model provider unreachable or auth failed after retries, or it refused the request or answered unusably."""
    REFUSED = 5
    """The model refused."""
    REQUIRED_SERVER = 6
    """A required MCP server failed (could not start or reconnect)."""
    BUDGET = 7
    """Tree token or step ceiling spent."""
    OUTPUT_FAILED = 8
    """once: the run ended but its result could not be written to stdout (closed, full, or not read)."""
    DEADLINE = 124
    """The wall-clock deadline was reached (the value ``timeout(1)`` uses)."""
    DRAIN_TIMEOUT = 143
    """Drain did not finish within the grace period, or a second signal (128 + SIGTERM)."""


TerminalStatus = Literal[
    "completed",
    "refused",
    "exhausted_steps",
    "exhausted_tokens",
    "deadline",
    "stalled",
    "crashed",
]
"""How one run of the inner agentic loop ended."""

TERMINAL_STATUSES: tuple[TerminalStatus, ...] = get_args(TerminalStatus)


def code_for_status(status: TerminalStatus, *, partial: bool = False) -> ExitCode:
    """Map a root's terminal status to the process exit code (``once`` and ``schedule`` fires).

    Args:
        status: the root's terminal status.
        partial: for the ``exhausted_*`` statuses, whether a usable partial
            result (non-empty final text) was produced and printed.
    """
    if status == "completed":
        return ExitCode.OK
    if status == "refused":
        return ExitCode.REFUSED
    if status in ("exhausted_steps", "exhausted_tokens"):
        return ExitCode.BUDGET_PARTIAL if partial else ExitCode.BUDGET
    if status == "deadline":
        return ExitCode.DEADLINE
    # stalled and crashed: the root did not finish its job.
    return ExitCode.CRASHED

"""The last line of a failed run: ``agentd: error: WHAT — fix: HOW`` (rfcs/0321).

Every non-zero exit ends with exactly one such line on stderr, whole: never
cut, never wrapped, one line a person reads at the end of whatever scrolled
by and a script finds with ``tail -n1``. On a terminal and with
``--log-format text`` it is that plain line; where stderr is NDJSON it is
the stream's last object (``run.failed``), whose ``message`` is the same
plain line and whose ``error`` and ``fix`` are its two halves, so the stream
stays machine-readable (:mod:`agentd.observe.telemetry` writes it last, at close).

Errors found before the run starts (exit 2, the command line and the
configuration) are plain lines in every format: the format is itself a
setting that may be what is wrong.

What each exit code says when nothing more precise is known is
:data:`FALLBACK`; the run's own account (:func:`agentd.supervisor.report.run_error`)
comes first.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from agentd.core.errors import ConfigError
from agentd.core.exitcodes import ExitCode
from agentd.core.redact import redact
from agentd.core.safetext import escape_controls

#: Every such line starts with this.
PREFIX = "agentd: error: "
#: Between what happened and what to do.
FIX_SEPARATOR = " — fix: "


@dataclass(frozen=True, slots=True)
class Failure:
    """Why a run failed and what to do: the final line's two halves.

    Attributes:
        kind: the class of failure (``config``, ``provider``, ``server``, ``budget``,
            ``deadline``, ``refused``, ``drain_timeout``, ``crashed``, ``output``, ``internal``),
            as in a JSON result's ``error.kind``.
        error: what happened (WHAT).
        fix: what to do about it (HOW).
        exit_code: the process's exit code.
    """

    kind: str
    error: str
    fix: str
    exit_code: int

    @property
    def line(self) -> str:
        """The plain line, without its newline."""
        return error_line(self.error, self.fix)


def error_line(error: str, fix: str) -> str:
    """``agentd: error: WHAT — fix: HOW``: redacted, every control shown escaped, so always one line."""
    return (
        PREFIX + escape_controls(redact(error.strip())) + FIX_SEPARATOR + escape_controls(redact(fix.strip()))
    )


#: What an exit code says when the run has no more precise account: kind, what happened, the fix.
FALLBACK: Mapping[ExitCode, tuple[str, str, str]] = {
    ExitCode.CRASHED: (
        "crashed",
        "the agent crashed",
        "read the subagent.exit and child.stderr lines above; --verbose shows more",
    ),
    ExitCode.CONFIG: (
        "config",
        "the configuration is not valid",
        "correct the setting named above; `agentd check` validates the settings without running anything",
    ),
    ExitCode.BUDGET_PARTIAL: (
        "budget",
        "a budget ran out; the partial result is on stdout",
        "raise --budget-tokens, --budget-steps, --budget-usd or --max-turn-steps",
    ),
    ExitCode.FATAL_INFRA: (
        "provider",
        "the model provider cannot be used",
        "check the model name, its API key and the provider's base URL (model.fatal above says why)",
    ),
    ExitCode.REFUSED: (
        "refused",
        "the model refused the task",
        "rephrase the instruction or use another model",
    ),
    ExitCode.REQUIRED_SERVER: (
        "server",
        "a required MCP server failed",
        "check the server's command or URL (server.state and upstream.* lines above)",
    ),
    ExitCode.BUDGET: (
        "budget",
        "a budget ran out",
        "raise --budget-tokens, --budget-steps, --budget-usd or --max-turn-steps",
    ),
    ExitCode.OUTPUT_FAILED: (
        "output",
        "the result could not be written to stdout (result.unwritten above says why)",
        "run agentd with a stdout that is open and read to the end",
    ),
    ExitCode.DEADLINE: (
        "deadline",
        "the --deadline was reached",
        "raise --deadline or give the agent less to do",
    ),
    ExitCode.DRAIN_TIMEOUT: (
        "drain_timeout",
        "agentd was stopped before running turns finished (the drain grace ran out, or a second signal came)",
        "raise --grace (and terminationGracePeriodSeconds on Kubernetes), or send one signal and wait",
    ),
}


def failure_for(code: int, account: Mapping[str, str] | None = None) -> Failure:
    """The failure of a run that exits ``code`` (non-zero).

    Args:
        code: the exit code.
        account: the run's own ``{kind, message, fix}`` (a JSON result's ``error``), when it has one.
    """
    if account is not None:
        error, own_fix = split_fix(account["message"])
        return Failure(account["kind"], error, own_fix or account["fix"], int(code))
    try:
        kind, error, fix = FALLBACK[ExitCode(code)]
    except (ValueError, KeyError):
        kind, error, fix = "crashed", f"agentd exited with code {code}", "read the lines above"
    return Failure(kind, error, fix, int(code))


#: How a message that carries its own fix spells it (the model providers' ". Fix: …",
#: a required server's "; fix …"): the last one splits the message.
_OWN_FIX = re.compile(r"(?:\. Fix: |; fix )(?!.*(?:\. Fix: |; fix ))", re.DOTALL)


def split_fix(message: str) -> tuple[str, str | None]:
    """A message that ends with its own fix, as (what happened, the fix); (message, None) otherwise.

    The message's own fix is the precise one (which variable, for which base
    URL): the final line gives it rather than a general one.
    """
    found = _OWN_FIX.search(message)
    if found is None:
        return message, None
    what, fix = message[: found.start()], message[found.end() :].strip()
    if not fix:
        return message, None
    return what, fix


def internal_failure(exc: BaseException) -> Failure:
    """A bug inside agentd ended the run (exit 1)."""
    return Failure(
        "internal",
        f"internal error: {type(exc).__name__}: {exc}",
        "this is a bug in agentd: report it with the traceback above (supervisor.internal_error)",
        int(ExitCode.CRASHED),
    )


def config_failure(problems: Sequence[ConfigError]) -> Failure:
    """The final line of a configuration error (exit 2): the one problem, or how many there are.

    A setting's message already says why its value is refused and what
    would be accepted (``SETTING: VALUE is not valid: WHY AND HOW``); it is
    the line's WHAT, whole, and the fix says where to make the change.
    """
    if len(problems) == 1:
        (problem,) = problems
        fix = f"correct {problem.setting} as it says; `agentd check` validates the settings without running anything"
        return Failure("config", str(problem), fix, int(ExitCode.CONFIG))
    return Failure(
        "config",
        f"{len(problems)} settings are not valid (each is named above)",
        "correct each as its line says; `agentd check` validates the settings without running anything",
        int(ExitCode.CONFIG),
    )


def config_error_lines(problems: Sequence[ConfigError]) -> list[str]:
    """Every line a configuration error prints (without newlines): each problem, whole, then the final line.

    One problem is one line, the final one; several are a line each
    (``agentd: SETTING: VALUE is not valid: …``) and then the final line.
    """
    lines = [] if len(problems) == 1 else ["agentd: " + escape_controls(str(p)) for p in problems]
    lines.append(config_failure(problems).line)
    return lines


__all__ = [
    "FALLBACK",
    "FIX_SEPARATOR",
    "PREFIX",
    "Failure",
    "config_error_lines",
    "config_failure",
    "error_line",
    "failure_for",
    "internal_failure",
    "split_fix",
]

"""The end of a run: the once result, the JSON summary and the error object with its fix."""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson
import trio

from agentd.config import Settings
from agentd.core.exitcodes import ExitCode, TerminalStatus, code_for_status
from agentd.core.redact import redact
from agentd.observe.output import LineWriter
from agentd.observe.telemetry import Telemetry
from agentd.supervisor.loop.reactor import Reactor

if TYPE_CHECKING:
    from agentd.observe.streamjson import StreamJson


#: How long a once run waits for stdout to take its result before it gives up
#: (exit OUTPUT_FAILED): a reader that is slow is waited for, one that never
#: reads does not hold the process forever.
RESULT_WRITE_TIMEOUT = 30.0


def run_error(reactor: Reactor, code: ExitCode, settings: Settings | None = None) -> dict[str, str] | None:
    """The ``error`` object of a JSON result: ``kind``, ``message`` and ``fix`` (None when the run succeeded).

    A budget exit names the limit actually reached (rfcs/0302): a tree-wide
    ceiling (tokens, US dollars, steps) with its value and what was used, or
    the per-turn ``--max-turn-steps`` cap of the root's turn; a deadline
    names ``--deadline`` and its value (``settings`` gives the values).
    """
    budget = reactor.budget.spent()
    error: tuple[str, str, str] | None = None
    if reactor.status.fatal_infra is not None:
        # Why the provider could not be used (HTTP status and its message), as in model.fatal.
        message = reactor.status.fatal_infra
        if any(marker in message for marker in ("HTTP 401", "HTTP 403", "credentials", "auth")):
            fix = (
                "check the model's API key (OPENAI_API_KEY, ANTHROPIC_API_KEY, or the endpoint's api_key_env)"
            )
        else:
            fix = "check the model name and the provider's base URL, and that it is reachable from here"
        error = ("provider", message, fix)
    elif code is ExitCode.REQUIRED_SERVER:
        error = (
            "server",
            reactor.status.required_failed_error
            or f"required server {reactor.status.required_failed!r} failed",
            "check the server's command or URL and its stderr (server.state and upstream.* lines on stderr)",
        )
    elif code in (ExitCode.BUDGET, ExitCode.BUDGET_PARTIAL):
        error = _budget_error(reactor, budget, settings)
    elif code is ExitCode.DEADLINE:
        limit = f" {_seconds(settings.deadline)}" if settings is not None and settings.deadline else ""
        error = (
            "deadline",
            f"the --deadline{limit} was reached",
            "raise --deadline or give the agent less to do",
        )
    elif code is ExitCode.REFUSED:
        error = ("refused", "the model refused the task", "rephrase the instruction or use another model")
    elif code is ExitCode.DRAIN_TIMEOUT:
        error = (
            "drain_timeout",
            "running turns did not finish within the drain grace",
            "raise --grace (and terminationGracePeriodSeconds on Kubernetes)",
        )
    elif code is ExitCode.CRASHED and reactor.status.breaker_open:
        error = (
            "crashed",
            "the agent kept crashing: more restarts than --max-restarts within --restart-period "
            "(the restart breaker opened)",
            "read the crashes' subagent.exit and child.stderr lines above; raise --max-restarts only "
            "once the cause is known",
        )
    elif code is ExitCode.CRASHED:
        status = reactor.status.root_status or "crashed"
        error = (
            "crashed",
            f"the agent ended {status}",
            "see subagent.exit and child.stderr on stderr; --log-level debug shows more",
        )
    if error is None:
        return None
    kind, message, fix = error
    return {"kind": kind, "message": redact(message), "fix": fix}


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _budget_error(reactor: Reactor, spent: str | None, settings: Settings | None) -> tuple[str, str, str]:
    """What a budget exit (3 or 7) says: the limit that was reached, its value, and the flag to raise."""
    b = reactor.budget
    if spent == "tokens":
        return (
            "budget",
            f"the tree-wide token budget is spent: {b.tokens} tokens used of --budget-tokens {b.max_tokens}",
            "raise --budget-tokens, or give the agent less to do",
        )
    if spent == "usd":
        return (
            "budget",
            f"the tree-wide cost budget is spent: {b.usd:.4f} USD used of --budget-usd {b.max_usd:g}",
            "raise --budget-usd, or use a cheaper model",
        )
    if spent == "steps":
        return (
            "budget",
            f"the tree-wide step budget is spent: {b.steps} model calls of --budget-steps {b.max_steps}",
            "raise --budget-steps, or give the agent less to do",
        )
    status = reactor.status.root_status
    if status == "exhausted_steps":
        cap = settings.max_turn_steps if settings is not None else None
        limit = f" {cap}" if cap is not None else ""
        return (
            "budget",
            f"the agent's turn reached --max-turn-steps{limit} (model calls in one turn) while it was still "
            "calling tools",
            "raise --max-turn-steps (0 turns the cap off), or give the agent a smaller task",
        )
    return (
        "budget",
        f"the agent stopped with status {status or 'unknown'!r} before a budget was spent",
        "raise --budget-tokens, --budget-steps, --budget-usd or --max-turn-steps",
    )


def run_summary(
    reactor: Reactor, code: ExitCode, duration: float, session_id: str, settings: Settings | None = None
) -> dict[str, object]:
    """What every JSON result carries: exit code, session id, turns, steps, usage, cost, duration, error."""
    counters = reactor.counters
    return {
        "exit_code": int(code),
        "session_id": session_id,
        "turns": counters.turns,
        "steps": counters.model_calls,
        "usage": {
            "input_tokens": counters.input_tokens,
            "output_tokens": counters.output_tokens,
            "cached_input_tokens": counters.cached_input_tokens,
            "cache_creation_input_tokens": counters.cache_creation_input_tokens,
            "model_calls": counters.model_calls,
        },
        "cost_usd": reactor.budget.cost_usd(),
        "agents": agent_usage(reactor),
        "duration_s": round(duration, 3),
        "error": run_error(reactor, code, settings),
    }


def agent_usage(reactor: Reactor) -> list[dict[str, object]]:
    """Each agent's own usage and cost, with its parent and depth (rfcs/0370), oldest first.

    The run's ``usage`` and ``cost_usd`` are these rolled up. Exited agents are
    the table's last :data:`~agentd.supervisor.loop.agents.RECENT_EXITED`; a
    once run's fit whole.
    """
    rows: list[dict[str, object]] = []
    for done in reactor.agents.recent():
        rows.append(
            {
                "id": done.id,
                "parent": done.parent,
                "depth": done.depth,
                "type": done.type,
                "status": done.status,
                "steps": done.steps,
                "tokens": done.tokens,
                "cost_usd": "unknown" if done.cost_usd is None else round(done.cost_usd, 8),
            }
        )
    for live in reactor.agents.live():
        rows.append(
            {
                "id": live.id,
                "parent": live.parent,
                "depth": live.depth,
                "type": live.type,
                "status": live.status,
                "steps": live.steps,
                "tokens": live.tokens,
                "cost_usd": "unknown" if live.unpriced_calls else round(live.cost_usd, 8),
            }
        )
    return rows


async def print_once(
    reactor: Reactor,
    code: ExitCode,
    json_out: bool,
    duration: float,
    telemetry: Telemetry,
    stdout: LineWriter,
    stream: StreamJson | None = None,
    session_id: str = "",
    settings: Settings | None = None,
) -> ExitCode:
    """Write the once run's result; the exit code, OUTPUT_FAILED if the result could not be written."""
    text = reactor.status.root_text
    status = reactor.status.root_status
    line: bytes | None = None
    if json_out or stream is not None:
        summary = run_summary(reactor, code, duration, session_id, settings)
        result: dict[str, object] = {"status": status, "exit_code": int(code), "result": text, **summary}
        if stream is not None:
            lost_before = stdout.dropped
            stream.result(result)
            return await flushed(stdout, lost_before, code, status, telemetry)
        line = orjson.dumps(result)
    elif (
        text and status is not None and code in (ExitCode.OK, ExitCode.BUDGET_PARTIAL, ExitCode.REFUSED)
    ) or (text and status is not None and code == code_for_status(status, partial=True)):
        line = text.encode(errors="replace")
    if line is None:
        return code
    lost_before = stdout.dropped
    stdout.put(line + b"\n")
    return await flushed(stdout, lost_before, code, status, telemetry)


async def flushed(
    stdout: LineWriter, lost_before: int, code: ExitCode, status: TerminalStatus | None, telemetry: Telemetry
) -> ExitCode:
    """Wait (bounded) until stdout took the result; the exit code, OUTPUT_FAILED if it did not."""
    flushed = await trio.to_thread.run_sync(stdout.flush, RESULT_WRITE_TIMEOUT, abandon_on_cancel=True)
    if flushed and stdout.dropped == lost_before:
        return code
    if stdout.closed_at_start:
        why = "stdout was closed when agentd started"
    elif not flushed:
        why = f"stdout did not take it within {RESULT_WRITE_TIMEOUT:g}s (a pipe nobody reads?)"
    else:
        why = f"writing to stdout failed: {stdout.last_error}"
    telemetry.emit("result.unwritten", status=status, exit_code=int(ExitCode.OUTPUT_FAILED), error=why)
    return ExitCode.OUTPUT_FAILED

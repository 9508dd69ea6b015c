"""Child reports as the reactor receives them, for tests that play the children.

A real child's usage reports and turn ends arrive in the reactor as
:class:`~agentd.events.UsageReported` / :class:`~agentd.events.TurnEnded`
events carrying validated frames and a :class:`~agentd.events.Reply`.
These helpers build the same events; the answer arrives on the returned
channel, either as the frame itself or (``as_dict=True``) as a plain dict:
``{"continue": bool, "reason": ...}`` for a usage verdict, ``{"action": "exit"}``
or ``{"action": "continue", "input": ...}`` for a next turn.
"""

from __future__ import annotations

import itertools
from typing import Any

import trio

from agentd.core.exitcodes import TerminalStatus
from agentd.events import Reply, TurnEnded, UsageReported
from agentd.selfmcp.protocol import NextTurn, TurnEnd, UsageReport, UsageVerdict

_ids = itertools.count(1)


def answer_dict(answer: UsageVerdict | NextTurn) -> dict[str, Any]:
    """The plain-dict view of a reactor answer."""
    if isinstance(answer, UsageVerdict):
        return {"continue": answer.proceed, "reason": answer.reason}
    if answer.action == "continue":
        return {"action": "continue", "input": answer.input}
    return {"action": answer.action}


class _DictSender:
    """Passes answers on as plain dicts."""

    def __init__(self, send: trio.MemorySendChannel[Any]) -> None:
        self._send = send

    def send_nowait(self, value: UsageVerdict | NextTurn) -> None:
        self._send.send_nowait(answer_dict(value))


def _reply(as_dict: bool) -> tuple[Reply[Any], trio.MemoryReceiveChannel[Any]]:
    send, recv = trio.open_memory_channel[Any](1)
    return Reply(_DictSender(send) if as_dict else send), recv


def usage_reported(
    agent: str,
    *,
    input_tokens: int = 10,
    output_tokens: int = 0,
    steps: int = 1,
    as_dict: bool = True,
) -> tuple[UsageReported, trio.MemoryReceiveChannel[Any]]:
    """A usage report from ``agent`` and the channel its verdict arrives on."""
    reply, recv = _reply(as_dict)
    report = UsageReport(
        id=next(_ids), input_tokens=input_tokens, output_tokens=output_tokens, steps=steps, provider="script"
    )
    return UsageReported(agent=agent, report=report, reply=reply), recv


def turn_ended(
    agent: str,
    *,
    status: TerminalStatus = "completed",
    text: str = "",
    idle: bool = False,
    fatal_infra: str | None = None,
    as_dict: bool = True,
) -> tuple[TurnEnded, trio.MemoryReceiveChannel[Any]]:
    """A turn end from ``agent`` and the channel its next-turn answer arrives on."""
    reply, recv = _reply(as_dict)
    end = TurnEnd(id=next(_ids), status=status, text=text, idle=idle, fatal_infra=fatal_infra)
    return TurnEnded(agent=agent, end=end, reply=reply), recv

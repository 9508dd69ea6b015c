"""The agent child process: connect to the supervisor over self-MCP, run the loop.

A child starts in one of two ways, with the same code after that:

* forked from the zygote (:mod:`agentd.agent.zygote`), the fast path: the
  heavy imports are already done, so a child is ready in milliseconds;
* as a fresh interpreter, ``python -m agentd.agent.child FD`` with the spawn
  payload as one JSON line on that socket, the fallback when no zygote runs.

The child's only channel to the world is the socket ``fd``: it is an MCP
client of the supervisor there. Model calls go straight to the provider.
Exit status: 0 after the supervisor said exit; 3 when the model provider is
unusable (the supervisor already got the reason as a turn end); 1 on a bug.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Any

import orjson
import trio

#: Exit status of a child whose provider failed fatally (auth / unreachable).
EXIT_FATAL_INFRA = 4
#: Exit status of a child that hit an unexpected error.
EXIT_CRASH = 1

#: How long a child waits on one self-MCP request before treating the
#: supervisor as gone. Turn ends of warm sessions wait without this bound.
LINK_TIMEOUT = 120.0


class SelfMcpLink:
    """:class:`agentd.agent.loop.SupervisorLink` over an MCP client session."""

    def __init__(self, client: Any) -> None:
        self._client = client

    async def _call(self, name: str, arguments: dict[str, Any], *, timeout: float | None) -> tuple[str, bool]:
        if timeout is None:
            result = await self._client.call_tool(name, arguments)
        else:
            with trio.fail_after(timeout):
                result = await self._client.call_tool(name, arguments)
        text = "\n".join(getattr(c, "text", "") or "" for c in result.content)
        return text, bool(result.is_error)

    async def call_tool(self, name: str, arguments: dict[str, object]) -> Any:
        from agentd.agent.loop import ToolResult

        try:
            text, is_error = await self._call(name, dict(arguments), timeout=LINK_TIMEOUT)
        except trio.TooSlowError:
            return ToolResult(f"tool {name!r} did not answer within {LINK_TIMEOUT:g}s", True)
        except Exception as exc:  # an MCPError from the supervisor: the model sees it
            return ToolResult(f"tool {name!r} failed: {exc}", True)
        return ToolResult(text, is_error)

    async def report_usage(self, **usage: Any) -> Any:
        from agentd.agent.loop import UsageVerdict
        from agentd.selfmcp.protocol import USAGE_TOOL

        text, _ = await self._call(USAGE_TOOL, usage, timeout=LINK_TIMEOUT)
        data = orjson.loads(text)
        return UsageVerdict(proceed=bool(data["continue"]), reason=data.get("reason"))

    async def turn_end(self, **end: Any) -> Any:
        from agentd.agent.loop import NextTurn
        from agentd.selfmcp.protocol import TURN_END_TOOL

        text, _ = await self._call(TURN_END_TOOL, end, timeout=None)
        data = orjson.loads(text)
        return NextTurn(action=data["action"], input=data.get("input", ""))


async def amain(payload: dict[str, Any], sock: socket.socket) -> int:
    """Run one agent to the end; returns the process exit status."""
    from mcp import Client

    from agentd.agent.loop import run_agent
    from agentd.errors import FatalInfraError
    from agentd.models import ToolSpec, make_model
    from agentd.selfmcp.protocol import TURN_END_TOOL
    from agentd.selfmcp.transport import stream_transport

    stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
    model = make_model(payload["model"], env=os.environ, **_model_options(payload))
    tools = [ToolSpec(**t) for t in payload["tools"]]
    async with Client(stream_transport(stream), mode="2026-07-28", cache=None) as client:
        link = SelfMcpLink(client)
        try:
            await run_agent(
                model,
                link,
                system=payload.get("system"),
                instruction=payload["instruction"],
                tools=tools,
                max_turn_steps=payload.get("max_turn_steps"),
            )
        except FatalInfraError as exc:
            # Tell the supervisor why before going: it decides the exit code (4).
            await link._call(
                TURN_END_TOOL,
                {"status": "crashed", "text": "", "idle": False, "fatal_infra": str(exc)},
                timeout=LINK_TIMEOUT,
            )
            return EXIT_FATAL_INFRA
        finally:
            await model.aclose()
    return 0


def _model_options(payload: dict[str, Any]) -> dict[str, Any]:
    """``make_model`` keywords the spawn payload carries (absent: the model's defaults)."""
    from agentd.models import ModelSettings, ProviderConfig

    options: dict[str, Any] = {}
    timeout = payload.get("model_timeout")
    if timeout is not None:
        options["timeout"] = float(timeout)
    if payload.get("model_settings"):
        options["settings"] = ModelSettings.from_mapping(payload["model_settings"])
    if payload.get("providers"):
        options["providers"] = {
            name: ProviderConfig.from_payload(table) for name, table in payload["providers"].items()
        }
    return options


def run_child(payload: dict[str, Any], sock: socket.socket) -> int:
    """Entry used after fork and by ``python -m``: run the agent under a fresh trio run."""
    try:
        return trio.run(amain, payload, sock)
    except BaseException as exc:  # the supervisor sees the crash as the socket closing
        from agentd.redact import redact

        print(redact(f"agentd child {payload.get('agent')}: {type(exc).__name__}: {exc}"), file=sys.stderr)
        return EXIT_CRASH


def read_payload(sock: socket.socket) -> dict[str, Any]:
    """Read the one JSON line of the spawn payload from a freshly started child's socket."""
    buf = b""
    while b"\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise EOFError("supervisor closed the channel before sending the spawn payload")
        buf += chunk
    line, _, rest = buf.partition(b"\n")
    if rest:
        raise ValueError("unexpected bytes after the spawn payload")
    payload: dict[str, Any] = orjson.loads(line)
    return payload


def main(argv: list[str] | None = None) -> int:
    """``python -m agentd.agent.child FD``: the slow path (no zygote)."""
    args = sys.argv[1:] if argv is None else argv
    # No PR_SET_PDEATHSIG on this path: we are started from a trio worker
    # thread, whose exit would fire it. A dead supervisor closes our socket.
    os.setpgid(0, 0)
    sock = socket.socket(fileno=int(args[0]))
    payload = read_payload(sock)
    return run_child(payload, sock)


if __name__ == "__main__":
    raise SystemExit(main())

"""A child process that misbehaves on its private channels, on purpose (fuzz and fault tests).

The real :class:`agentd.supervisor.children.tree.Tree` starts it in place of
``agentd.agent.child`` (``child_command``), with the same arguments:
``MCP_FD CONTROL_FD``. It reads its real spawn payload from the control
channel; the payload's instruction ends with the path of a JSON *plan*:

``{"mcp": [base64, ...], "control": [base64, ...], "calls": [[name, arguments], ...], "record": PATH}``

* ``mcp`` / ``control``: raw bytes written to each channel, in that order;
* ``calls`` (optional): tool calls made first with the real MCP client (as a
  compromised child would), each result recorded as ``{"name", "text",
  "is_error"}`` in the JSON file ``record``;

then it waits until the supervisor closes the control channel (or kills it).
Only ``calls`` needs the MCP SDK; without it the plan runs on the standard
library alone (fast to start under ``python -S``).
"""

from __future__ import annotations

import base64
import json
import socket
import sys


def _read_line(sock: socket.socket) -> bytes:
    buf = b""
    while b"\n" not in buf:
        chunk = sock.recv(65536)
        if not chunk:
            raise SystemExit(0)
        buf += chunk
    return buf.split(b"\n", 1)[0]


def _calls(mcp_sock: socket.socket, calls: list[list[object]], record: str) -> None:
    import trio
    from mcp import Client

    from agentd.selfmcp.transport import stream_transport

    async def run() -> list[dict[str, object]]:
        stream = trio.SocketStream(trio.socket.from_stdlib_socket(mcp_sock))
        out: list[dict[str, object]] = []
        async with Client(stream_transport(stream), mode="2026-07-28", cache=None) as client:
            for name, arguments in calls:
                try:
                    result = await client.call_tool(str(name), arguments)  # type: ignore[arg-type]
                except Exception as exc:
                    out.append({"name": name, "text": f"{type(exc).__name__}: {exc}", "is_error": True})
                    continue
                text = "\n".join(getattr(c, "text", "") or "" for c in result.content)
                out.append({"name": name, "text": text, "is_error": bool(result.is_error)})
        return out

    results = trio.run(run)
    with open(record, "w") as f:
        json.dump(results, f)


def main() -> int:
    mcp_sock = socket.socket(fileno=int(sys.argv[1]))
    control = socket.socket(fileno=int(sys.argv[2]))
    payload = json.loads(_read_line(control))
    with open(payload["instruction"].split()[-1]) as f:
        plan = json.load(f)
    if plan.get("calls"):
        _calls(mcp_sock.dup(), plan["calls"], plan["record"])
    try:
        for chunk in plan.get("mcp", []):
            mcp_sock.sendall(base64.b64decode(chunk))
        for chunk in plan.get("control", []):
            control.sendall(base64.b64decode(chunk))
    except OSError:
        return 0  # the supervisor closed the channel: it is done with us
    while True:
        try:
            if not control.recv(65536):
                return 0
        except OSError:
            return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""A JSON-RPC MCP client over a server process's stdio, speaking the handshake era as Claude Code does.

Claude Code is not a Python SDK client: it initializes with
``capabilities: {"roots": {"listChanged": true}}`` (newer builds add
``elicitation``), declares nothing for channels, and surfaces
``notifications/claude/channel``. :data:`CLAUDE_CODE_CAPABILITIES` is that
declaration. The client keeps every notification it receives (in order,
with the time it arrived) and answers server requests with an error.

Usage::

    async with raw_server([sys.executable, "-m", "agentd.servers", "inbox", ...]) as client:
        await client.initialize()
        result = await client.request("resources/read", {"uri": "inbox://bob"})
        note = await client.next_notification("notifications/claude/channel")

No sleeps: waits are on the client's own events, bounded by ``fail_after``.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

REPO = str(Path(__file__).resolve().parents[2])

CLAUDE_CODE_CAPABILITIES: dict[str, Any] = {"roots": {"listChanged": True}}
"""What Claude Code declares at ``initialize`` (2.1.x): roots only; nothing for channels."""

CLIENT_TIMEOUT = 60.0
"""Bound on one request's answer or awaited notification: a guard against a hang, not a
performance bound (a 20 MiB message read back took over 20 s with the suite run four times
oversubscribed on 2 cores beside other work)."""


class RpcError(Exception):
    """The server answered a request with a JSON-RPC error."""

    def __init__(self, error: dict[str, Any]) -> None:
        self.error = error
        super().__init__(f"{error.get('code')}: {error.get('message')}")


class ServerGone(Exception):
    """The server's stdout closed (it exited or was killed)."""


@dataclass
class Notification:
    method: str
    params: dict[str, Any]
    at: float
    """``time.monotonic()`` when the line was read."""


@dataclass
class RawClient:
    proc: trio.Process
    notifications: list[Notification] = field(default_factory=list)
    gone: bool = False
    _next_id: int = 0
    _waiting: dict[int, trio.MemorySendChannel[dict[str, Any]]] = field(default_factory=dict)
    _changed: trio.Event = field(default_factory=trio.Event)

    async def _reader(self) -> None:
        assert self.proc.stdout is not None
        buf = b""
        try:
            while True:
                chunk = await self.proc.stdout.receive_some(1 << 20)
                if not chunk:
                    break
                now = time.monotonic()
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    if line.strip():
                        await self._dispatch(json.loads(line), now)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self.gone = True
            for send in self._waiting.values():
                send.close()
            self._wake()

    async def _dispatch(self, msg: dict[str, Any], now: float) -> None:
        if "method" in msg and "id" in msg:  # a server request: we support none of them
            await self._send({"jsonrpc": "2.0", "id": msg["id"], "error": {"code": -32601, "message": "no"}})
        elif "method" in msg:
            self.notifications.append(Notification(msg["method"], msg.get("params") or {}, now))
            self._wake()
        elif "id" in msg:
            send = self._waiting.pop(msg["id"], None)
            if send is not None:
                send.send_nowait(msg)

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def wake(self) -> None:
        """Make :meth:`wait_until` re-check its predicate (it depends on something outside the client)."""
        self._wake()

    async def _send(self, msg: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        try:
            await self.proc.stdin.send_all(json.dumps(msg).encode() + b"\n")
        except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise ServerGone("the server's stdin is closed") from exc

    async def request(
        self, method: str, params: dict[str, Any] | None = None, *, timeout: float = CLIENT_TIMEOUT
    ) -> Any:
        """Send a request and return its ``result``.

        Raises:
            RpcError: the server answered with an error.
            ServerGone: the server went away first.
        """
        if self.gone:
            raise ServerGone("the server is gone")
        self._next_id += 1
        rid = self._next_id
        send, recv = trio.open_memory_channel[dict[str, Any]](1)
        self._waiting[rid] = send
        await self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        with trio.fail_after(timeout):
            try:
                answer = await recv.receive()
            except trio.EndOfChannel:
                raise ServerGone(f"the server went away before answering {method}") from None
        if "error" in answer:
            raise RpcError(answer["error"])
        return answer.get("result")

    async def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        await self._send({"jsonrpc": "2.0", "method": method, **({"params": params} if params else {})})

    async def initialize(
        self,
        capabilities: dict[str, Any] | None = None,
        *,
        name: str = "claude-code",
        version: str = "2026-06-18",
    ) -> dict[str, Any]:
        """The handshake, as Claude Code does it (its capabilities by default)."""
        result = await self.request(
            "initialize",
            {
                "protocolVersion": version,
                "capabilities": CLAUDE_CODE_CAPABILITIES if capabilities is None else capabilities,
                "clientInfo": {"name": name, "version": "2.1.0"},
            },
        )
        await self.notify("notifications/initialized")
        return result

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        return await self.request("tools/call", {"name": name, "arguments": arguments})

    async def read_json(self, uri: str) -> Any:
        result = await self.request("resources/read", {"uri": uri})
        return json.loads(result["contents"][0]["text"])

    def of(self, method: str) -> list[Notification]:
        return [n for n in self.notifications if n.method == method]

    async def wait_until(self, predicate: Any, *, timeout: float = CLIENT_TIMEOUT) -> None:
        """Wait (on arrivals, no polling) until ``predicate()`` is true, or raise TooSlowError."""
        with trio.fail_after(timeout):
            while not predicate():
                if self.gone:
                    raise ServerGone("the server went away while waiting")
                await self._changed.wait()

    async def next_notification(
        self, method: str, *, after: int = 0, timeout: float = CLIENT_TIMEOUT
    ) -> Notification:
        """The first ``method`` notification with index ``>= after`` among those of that method."""
        await self.wait_until(lambda: len(self.of(method)) > after, timeout=timeout)
        return self.of(method)[after]


def server_env(**extra: str) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": REPO, **extra}


@asynccontextmanager
async def raw_server(
    argv: Sequence[str], *, env: dict[str, str] | None = None, stderr: int | None = None
) -> AsyncIterator[RawClient]:
    """Start ``argv`` with piped stdio and yield a :class:`RawClient` for it.

    ``stderr``: a descriptor for the server's stderr (default: this process's).
    On exit stdin is closed, the process gets 10 s to leave, then SIGKILL.
    """
    proc = await trio.lowlevel.open_process(
        list(argv),
        cwd=REPO,
        env=env or server_env(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=stderr,
    )
    client = RawClient(proc)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client._reader)
            try:
                yield client
            finally:
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True):
            if proc.stdin is not None:
                await proc.stdin.aclose()
            with trio.move_on_after(10):
                await proc.wait()
            if proc.returncode is None:
                proc.kill()
                await proc.wait()

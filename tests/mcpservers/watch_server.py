"""A real MCP server (``mcp`` SDK, 2026-07-28, stdio) for watch tests, that misbehaves on command.

Resources:
    ``state://doc`` (``application/json``): a JSON object, changed with
    ``set_key`` or the control command ``set``.
    ``events://log`` (``application/vnd.agentd.events+json``): a bounded ring
    (``--ring``, default 256) of events with a ``seq``; ``append_events`` or the
    control command ``append`` adds events and can make ``seq`` jump.

Tools (read-only ones are annotated so, and so usable from watch filters):
    ``get_key(key)`` read-only, answers at once.
    ``slow_get(key, seconds)`` read-only, answers after ``seconds``.
    ``gate_wait(gate)`` read-only, answers once ``gate`` is opened (the n-th
    waiter publishes an update of ``gate://<gate>?waiters=<n>``, so a test can
    wait until n filters are waiting).
    ``set_key(key, value)``, ``append_events(events, skip)``, ``gate_open(gate)``: mutating.

How resource subscriptions (``subscriptions/listen`` with resource URIs) are
served, ``--listen`` or the control command ``listen``:
    ``normal``: the SDK's own handler.
    ``flap``: acknowledge, then end the stream at once (after ``--flap-after``
    seconds, if given), delivering nothing.
    ``refuse``: answer with an error before acknowledging.
``--flap-catalog`` serves the list_changed streams the same way as ``flap``.

Control (``--control PATH``): a FIFO the server creates and reads; each line
is one JSON command (no polling: the server waits for the FIFO to be readable):
    ``{"op": "set", "key": k, "value": v}``, ``{"op": "delete", "key": k}``,
    ``{"op": "append", "events": [{...}], "skip": n}`` (``seq`` jumps by ``n``
    before the first event; each event is stored as given plus its ``seq``),
    ``{"op": "append_many", "count": n, "type": "ADDED", "prefix": "o"}`` (``n``
    events about objects ``o0`` .. ``o<n-1>`` in ``default``),
    ``{"op": "open", "gate": name}``, ``{"op": "listen", "mode": "flap"}``.
Every change publishes ``notifications/resources/updated`` for its URI.

Every listen request is logged to stderr as ``listen <mode> <uris>``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections import deque
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel.server import NotificationOptions
from mcp.server.mcpserver import MCPServer
from mcp.server.stdio import stdio_server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ResourceUpdated
from mcp.shared.exceptions import MCPError
from mcp.shared.subscriptions import SUBSCRIPTION_ID_META_KEY

READ_ONLY = types.ToolAnnotations(read_only_hint=True)
EVENT_LOG_MIME = "application/vnd.agentd.events+json"
STATE_URI = "state://doc"
LOG_URI = "events://log"


class World:
    """What the server serves, and how it misbehaves."""

    def __init__(self, args: argparse.Namespace, bus: InMemorySubscriptionBus) -> None:
        self.bus = bus
        self.state: dict[str, Any] = {}
        self.ring: deque[dict[str, Any]] = deque(maxlen=args.ring)
        self.seq = 0
        self.listen_mode: str = args.listen
        self.flap_after: float = args.flap_after
        self.flap_catalog: bool = args.flap_catalog
        self.gates: dict[str, anyio.Event] = {}
        self.waiters: dict[str, int] = {}

    def gate(self, name: str) -> anyio.Event:
        return self.gates.setdefault(name, anyio.Event())

    async def set(self, key: str, value: Any) -> None:
        self.state[key] = value
        await self.bus.publish(ResourceUpdated(uri=STATE_URI))

    async def delete(self, key: str) -> None:
        self.state.pop(key, None)
        await self.bus.publish(ResourceUpdated(uri=STATE_URI))

    async def append(self, events: list[dict[str, Any]], skip: int = 0) -> list[int]:
        self.seq += skip
        seqs = []
        for ev in events:
            self.seq += 1
            self.ring.append({**ev, "seq": self.seq})
            seqs.append(self.seq)
        await self.bus.publish(ResourceUpdated(uri=LOG_URI))
        return seqs

    async def apply(self, command: dict[str, Any]) -> None:
        op = command.get("op")
        if op == "set":
            await self.set(command["key"], command.get("value"))
        elif op == "delete":
            await self.delete(command["key"])
        elif op == "append":
            await self.append(command.get("events", []), int(command.get("skip", 0)))
        elif op == "append_many":
            # Too many events for one FIFO line: named objects <prefix><i>, i = 0 .. count-1.
            prefix, kind = command.get("prefix", "o"), command.get("type", "ADDED")
            events = [{"type": kind, "object": _object(f"{prefix}{i}")} for i in range(int(command["count"]))]
            await self.append(events, int(command.get("skip", 0)))
        elif op == "open":
            self.gate(command["gate"]).set()
        elif op == "listen":
            self.listen_mode = command["mode"]
        else:
            print(f"watch server: unknown control op {op!r}", file=sys.stderr, flush=True)


def _object(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "default", "uid": f"uid-{name}"}}


class MisbehavingListen:
    """``subscriptions/listen`` served normally, flapping, or refused (see the module docstring)."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.inner = ListenHandler(world.bus)

    async def __call__(self, ctx: Any, params: types.SubscriptionsListenRequestParams) -> Any:
        uris = list(params.notifications.resource_subscriptions or ())
        catalog_mode = "flap" if self.world.flap_catalog else "normal"
        mode = self.world.listen_mode if uris else catalog_mode
        print(f"listen {mode} {' '.join(uris) or '(catalog)'}", file=sys.stderr, flush=True)
        if mode == "refuse":
            raise MCPError(types.INTERNAL_ERROR, "subscriptions refused (watch server knob)")
        if mode == "flap":
            meta: dict[str, Any] = {SUBSCRIPTION_ID_META_KEY: ctx.request_id}
            await ctx.session.send_notification(
                types.SubscriptionsAcknowledgedNotification(
                    params=types.SubscriptionsAcknowledgedNotificationParams(
                        notifications=params.notifications, _meta=meta
                    )
                ),
                related_request_id=ctx.request_id,
            )
            if self.world.flap_after:
                await anyio.sleep(self.world.flap_after)
            return types.SubscriptionsListenResult(_meta=meta)
        return await self.inner(ctx, params)


def build(args: argparse.Namespace) -> tuple[MCPServer[Any], World]:
    bus = InMemorySubscriptionBus()
    world = World(args, bus)
    mcp: MCPServer[Any] = MCPServer("watchy", subscriptions=bus)

    @mcp.resource(STATE_URI, mime_type="application/json")
    def doc() -> str:
        return json.dumps(world.state)

    @mcp.resource(LOG_URI, mime_type=EVENT_LOG_MIME)
    def log() -> str:
        return json.dumps({"events": list(world.ring)})

    @mcp.tool(annotations=READ_ONLY)
    def get_key(key: str) -> Any:
        """The value of ``key`` in ``state://doc`` (null if absent)."""
        return world.state.get(key)

    @mcp.tool(annotations=READ_ONLY)
    async def slow_get(key: str, seconds: float) -> Any:
        """The value of ``key``, after ``seconds``."""
        await anyio.sleep(seconds)
        return world.state.get(key)

    @mcp.tool(annotations=READ_ONLY)
    async def gate_wait(gate: str) -> str:
        """Answer once ``gate`` is opened. The n-th waiter publishes ``gate://<gate>?waiters=<n>``."""
        world.waiters[gate] = world.waiters.get(gate, 0) + 1
        await bus.publish(ResourceUpdated(uri=f"gate://{gate}?waiters={world.waiters[gate]}"))
        await world.gate(gate).wait()
        return f"{gate} open"

    @mcp.tool()
    async def set_key(key: str, value: Any) -> str:
        """Set ``key`` in ``state://doc`` and notify."""
        await world.set(key, value)
        return "ok"

    @mcp.tool()
    async def append_events(events: list[dict[str, Any]], skip: int = 0) -> list[int]:
        """Append ``events`` to ``events://log`` (``seq`` first jumps by ``skip``); return their seqs."""
        return await world.append(events, skip)

    @mcp.tool()
    def gate_open(gate: str) -> str:
        """Open ``gate``: every ``gate_wait(gate)`` answers."""
        world.gate(gate).set()
        return "ok"

    mcp._lowlevel_server.add_request_handler(
        "subscriptions/listen", types.SubscriptionsListenRequestParams, MisbehavingListen(world)
    )
    return mcp, world


async def read_control(path: Path, world: World) -> None:
    """Apply JSON commands written to the FIFO at ``path``, one per line."""
    with contextlib.suppress(FileExistsError):
        os.mkfifo(path)
    # Read-write, so the FIFO never reports end-of-file between writers.
    fd = os.open(path, os.O_RDWR | os.O_NONBLOCK)
    buf = b""
    try:
        while True:
            await anyio.wait_readable(fd)
            try:
                chunk = os.read(fd, 65536)
            except BlockingIOError:
                continue
            buf += chunk
            *lines, buf = buf.split(b"\n")
            for line in lines:
                if line.strip():
                    await world.apply(json.loads(line))
    finally:
        os.close(fd)


async def main_async(args: argparse.Namespace) -> None:
    mcp, world = build(args)
    low = mcp._lowlevel_server
    options = low.create_initialization_options(
        NotificationOptions(resources_changed=True, tools_changed=True)
    )
    async with anyio.create_task_group() as tg:
        if args.control:
            tg.start_soon(read_control, Path(args.control), world)
        async with stdio_server() as (read_stream, write_stream):
            await low.run(read_stream, write_stream, options)
        tg.cancel_scope.cancel()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--listen", choices=["normal", "flap", "refuse"], default="normal")
    parser.add_argument("--flap-after", type=float, default=0.0)
    parser.add_argument("--flap-catalog", action="store_true")
    parser.add_argument("--ring", type=int, default=256)
    parser.add_argument("--control", help="FIFO of JSON commands (created if missing)")
    args = parser.parse_args()
    anyio.run(main_async, args)


if __name__ == "__main__":
    main()

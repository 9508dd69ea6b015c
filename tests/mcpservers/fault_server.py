"""The notes server (``tests/mcpservers/notes_server.py``) plus misbehaviour on demand.

Everything the notes server does, over stdio, in either era, plus tools that
break the protocol in the ways the fault catalog needs:

* ``spew(count, seed)``: write ``count`` seeded-random lines to stdout that are
  *not* valid JSON-RPC messages (broken JSON, wrong shapes, invalid UTF-8, …);
  returns how many were written. Lines that happen to validate are skipped, so
  the count is exact.
* ``bad_ids()``: write three responses nobody asked for: an unknown numeric id,
  an unknown string id, and a duplicate of the previous request's id.
* ``storm(uri, count, rate)``: publish ``count`` updates of ``uri`` at about
  ``rate`` per second (0 = as fast as possible).
* ``storm_items(count, rounds)``: bump every ``item://{i}`` (``i < count``)
  ``rounds`` times and publish an update for each bump.
* SIGUSR1: run the storm described in ``<state>.storm`` (JSON: ``{"uri", "count",
  "rate"}`` for one URI, or ``{"items": N, "rounds": R}``), then publish one
  update of ``note://beta`` as an end marker. No agent has to ask: the test
  starts storms from outside. Handshake-era storms go to the session that
  subscribed last.
* ``await_storm()``: return once a signalled storm has made its last change (a
  session that calls it stays busy, its route's queue filling, until then).
* ``push_updated(uri)`` (handshake era): send ``notifications/resources/updated``
  for ``uri`` whether or not the client subscribed to it.
* SIGUSR2: add the next ``item://{i}`` resource and announce
  ``resources/list_changed`` (a client's declared glob now matches one more URI).
* ``--hold-listen PORT``: while the file ``<state>.hold`` exists, a
  ``subscriptions/listen`` request is never answered: the server writes
  ``held <number of URIs>`` to ``127.0.0.1:PORT`` and keeps it (a server slow to
  acknowledge the stream that would replace the one open).

Resources added: ``item://{i}`` for ``i < --items`` (text ``"<i>:<version>"``)
and the template ``big://{size}`` (a body of ``size`` bytes).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.resources.types import FunctionResource

# agentd starts this file as a script (``python .../fault_server.py``) and the
# SDK gives a stdio server only its default environment (no PYTHONPATH): the
# repository root goes on sys.path here, the one place a test file needs it.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.mcpservers.notes_server import _RawStdout, build, serve_stdio


def invalid_lines(count: int, seed: int) -> list[bytes]:
    """``count`` lines (without newline) that are not JSON-RPC messages, from ``seed``."""
    rng = random.Random(seed)
    makers = [
        lambda: rng.randbytes(rng.randint(1, 200)).replace(b"\n", b" "),
        lambda: b'{"jsonrpc": "2.0", "id": ' + str(rng.randint(0, 99)).encode(),
        lambda: json.dumps(rng.choice([1, "text", None, True, [1, 2], 3.5])).encode(),
        lambda: json.dumps({"jsonrpc": "1.0", "id": rng.randint(0, 9), "result": {}}).encode(),
        lambda: json.dumps({"jsonrpc": "2.0", "method": rng.randint(0, 9)}).encode(),
        lambda: json.dumps({"hello": "x" * rng.randint(0, 50)}).encode(),
        lambda: b"\xff\xfe" + rng.randbytes(8).replace(b"\n", b" ") + b'{"jsonrpc":"2.0"}',
        lambda: b"Traceback (most recent call last): " + str(rng.random()).encode(),
        lambda: b"[" * rng.randint(1, 500),
        lambda: b'{"jsonrpc":"2.0","id":1,"result":' + b"{" * rng.randint(1, 100),
    ]
    out: list[bytes] = []
    while len(out) < count:
        line = rng.choice(makers)()
        if not line.strip():
            continue
        try:
            types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError:
            out.append(line)
    return out


def _write_bytes(data: bytes) -> None:
    """Write raw bytes onto fd 1 (the wire), as the notes server's writer does: whole, from one thread."""
    while data:
        data = data[os.write(1, data) :]


def extend(mcp: MCPServer[Any], args: argparse.Namespace) -> dict[str, Any]:
    """Add the fault tools and resources; returns shared state (``items``, last ``session``)."""
    legacy = args.era == "legacy"
    items: dict[int, int] = dict.fromkeys(range(args.items), 0)
    ext: dict[str, Any] = {"items": items, "session": None}

    def add_item(i: int) -> None:
        def read() -> str:
            return f"{i}:{items[i]}"

        mcp.add_resource(FunctionResource.from_function(read, uri=f"item://{i}", name=f"item{i}"))

    for i in items:
        add_item(i)
    ext["add_item"] = add_item

    @mcp.resource("big://{size}", mime_type="text/plain")
    def big(size: str) -> str:
        return "x" * int(size)

    async def updated(ctx: Context, uri: str) -> None:
        if legacy:
            await ctx.session.send_resource_updated(uri)
        else:
            await ctx.notify_resource_updated(uri)

    @mcp.tool()
    async def spew(count: int, seed: int = 0) -> int:
        """Write ``count`` invalid lines onto stdout; returns the number written."""
        lines = invalid_lines(count, seed)
        _write_bytes(b"\n".join(lines) + b"\n")
        return len(lines)

    @mcp.tool()
    async def bad_ids(ctx: Context) -> str:
        """Write responses for an unknown int id, an unknown string id and the previous request's id."""
        previous = int(ctx.request_id) - 1
        for rid in (10**9, "no-such-request", previous):
            line = json.dumps({"jsonrpc": "2.0", "id": rid, "result": {"content": [], "isError": False}})
            await _RawStdout().write(line + "\n")
        return "ok"

    @mcp.tool()
    async def storm(uri: str, count: int, rate: float, ctx: Context) -> int:
        """Publish ``count`` updates of ``uri`` at about ``rate`` per second (0: no pacing)."""
        batch = max(1, int(rate / 100)) if rate else count
        for start in range(0, count, batch):
            for _ in range(min(batch, count - start)):
                await updated(ctx, uri)
            if rate:
                await anyio.sleep(batch / rate)
        return count

    @mcp.tool()
    async def storm_items(count: int, rounds: int, ctx: Context) -> int:
        """Bump ``item://0`` … ``item://{count-1}`` ``rounds`` times, publishing each bump."""
        for _ in range(rounds):
            for i in range(count):
                items[i] += 1
                await updated(ctx, f"item://{i}")
        return count * rounds

    @mcp.tool()
    async def await_storm() -> str:
        """Return once a signalled storm has made its last change (at once if one has)."""
        await storm_ended(ext).wait()
        return "the storm is over"

    @mcp.tool()
    async def push_updated(uri: str, ctx: Context) -> str:
        """Send ``notifications/resources/updated`` for ``uri``, subscribed or not (handshake era)."""
        await ctx.session.send_resource_updated(uri)
        return "ok"

    if legacy:
        # Remember the subscriber's session so a signalled storm can reach it.
        low = mcp._lowlevel_server
        inner = low._request_handlers["resources/subscribe"].handler

        async def on_subscribe(ctx: Any, params: types.SubscribeRequestParams) -> Any:
            ext["session"] = ctx.session
            return await inner(ctx, params)

        low.add_request_handler("resources/subscribe", types.SubscribeRequestParams, on_subscribe)
    return ext


def storm_ended(ext: dict[str, Any]) -> anyio.Event:
    """Set once a signalled storm has made its last change (``await_storm`` waits on it)."""
    if ext.get("storm_ended") is None:
        ext["storm_ended"] = anyio.Event()
    event: anyio.Event = ext["storm_ended"]
    return event


def storm_on_signal(mcp: MCPServer[Any], args: argparse.Namespace, ext: dict[str, Any]) -> Any:
    """A task that runs a storm per SIGUSR1 (see the module docstring)."""
    from mcp.client.subscriptions import ResourceUpdated  # the event type the bus carries

    async def publish(uri: str) -> None:
        if args.era == "legacy":
            session = ext.get("session")
            if session is not None:
                await session.send_resource_updated(uri)
        else:
            await mcp._subscriptions.publish(ResourceUpdated(uri=uri))

    async def grow() -> None:
        with anyio.open_signal_receiver(signal.SIGUSR2) as signals:
            async for _ in signals:
                i = len(ext["items"])
                ext["items"][i] = 0
                ext["add_item"](i)
                if args.era == "legacy":
                    session = ext.get("session")
                    if session is not None:
                        await session.send_resource_list_changed()
                else:
                    from mcp.client.subscriptions import ResourcesListChanged

                    await mcp._subscriptions.publish(ResourcesListChanged())

    async def run() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(grow)
            await storms()

    async def storms() -> None:
        with anyio.open_signal_receiver(signal.SIGUSR1) as signals:
            async for _ in signals:
                spec = json.loads(await anyio.Path(args.state + ".storm").read_text())
                if "items" in spec:
                    for _ in range(spec["rounds"]):
                        for i in range(spec["items"]):
                            ext["items"][i] += 1
                            await publish(f"item://{i}")
                else:
                    rate, count = spec["rate"], spec["count"]
                    batch = max(1, int(rate / 100)) if rate else count
                    for start in range(0, count, batch):
                        for _ in range(min(batch, count - start)):
                            await publish(spec["uri"])
                        if rate:
                            await anyio.sleep(batch / rate)
                storm_ended(ext).set()
                await publish("note://beta")

    return run


async def serve(mcp: MCPServer[Any], args: argparse.Namespace, ext: dict[str, Any]) -> None:
    async with anyio.create_task_group() as tg:
        tg.start_soon(storm_on_signal(mcp, args, ext))
        await serve_stdio(mcp, args)
        tg.cancel_scope.cancel()


def hold_listen(mcp: MCPServer[Any], args: argparse.Namespace) -> None:
    """``--hold-listen PORT`` (see the module docstring)."""
    low = mcp._lowlevel_server
    inner = low._request_handlers["subscriptions/listen"].handler
    hold = Path(args.state + ".hold")

    async def on_listen(ctx: Any, params: types.SubscriptionsListenRequestParams) -> Any:
        if hold.exists():  # noqa: ASYNC240 (a test knob, checked once per request)
            uris = params.notifications.resource_subscriptions or []
            async with await anyio.connect_tcp("127.0.0.1", args.hold_listen) as receipt:
                await receipt.send(f"held {len(uris)}\n".encode())
            await anyio.sleep_forever()
        return await inner(ctx, params)

    low.add_request_handler("subscriptions/listen", types.SubscriptionsListenRequestParams, on_listen)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--era", choices=["modern", "legacy"], default="modern")
    parser.add_argument("--state", required=True)
    parser.add_argument("--items", type=int, default=0)
    parser.add_argument("--hold-listen", type=int, default=0, metavar="PORT")
    args = parser.parse_args()
    for knob in ("exit_during_init", "no_subscribe", "grandchild"):
        setattr(args, knob, False)
    args.garbage_at_start = 0
    mcp = build(args)
    ext = extend(mcp, args)
    if args.hold_listen:
        hold_listen(mcp, args)
    anyio.run(serve, mcp, args, ext)


if __name__ == "__main__":
    main()

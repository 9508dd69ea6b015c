"""The fault catalog, subscriptions at scale (cases SC1-SC5, rfcs/0260).

Each case runs the real ``agentd`` command against real MCP servers written
with the SDK: the fault server over stdio (``tests/mcpservers/fault_server.py``: many
``item://`` resources, storms on SIGUSR1, a new item on SIGUSR2, listen
requests held on demand) and the notes server over Streamable HTTP. A server
carries every subscribed URI of agentd on one listen stream; before, each URI
held a stream of its own, and the server refused every one past 1,023 on a
connection (stdio), or a hundred of them filled the HTTP client's pool and
agentd took the pool's timeout for a lost server (a reconnect every ~12 s).
Nothing sleeps: every wait is on a telemetry event, a receipt or an exit.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client

from tests.support.agentd_proc import PY, REPO, Agentd, drain, of, run_agentd, script, server_pid
from tests.support.leftovers import tagged_env
from tests.support.processes import listening, start_notes_server, stop
from tests.support.routing import reader_script, routes_config

pytestmark = pytest.mark.fault

FAULT_SERVER = REPO / "tests/mcpservers/fault_server.py"

MANY = 1200
"""More URIs behind one glob than the SDK server's 1,024 listen streams per connection."""

STARTUP = 60.0
"""Seconds for agentd, its server and 1,200 subscriptions to come up on a loaded 2-core machine."""

STEP = 30.0
"""Seconds for one change to reach an agent and its turn to end."""


def spawn_route(name: str, match: str, **extra: Any) -> dict[str, Any]:
    """A spawn route whose agent is told the changed URI; no start-up re-read (these cases count changes)."""
    return {
        "name": name,
        "match": match,
        "disposition": "spawn",
        "template": "{uri}",
        "debounce": "50ms",
        "reread_on_start": False,
        **extra,
    }


def fault_server(tmp: Path, name: str, *extra: str) -> str:
    return (
        f"{name}={PY} {FAULT_SERVER} --era modern --state {tmp / (name + '.json')} {' '.join(extra)}".strip()
    )


def env(tmp: Path) -> dict[str, str]:
    return tagged_env(tmp, AGENTD_RECONNECT_BACKOFF="0.05,0.05,0.05,0.05,0.05")


def storm(a: Agentd, tmp: Path, name: str, spec: dict[str, Any]) -> None:
    """Start a storm in fault server ``name`` (SIGUSR1 + ``<state>.storm``; ends with a ``note://beta`` update)."""
    (tmp / f"{name}.json.storm").write_text(json.dumps(spec))
    os.kill(server_pid(a, tmp, name), signal.SIGUSR1)


def notes_file(path: Path, n: int) -> None:
    """The notes server's state: ``alpha``, ``beta`` and ``n`` more notes ``k0000``…"""
    path.write_text(
        json.dumps({"alpha": "first note", "beta": "second note"} | {f"k{i:04d}": f"v{i}" for i in range(n)})
    )


async def all_subscribed(a: Agentd, server: str, n: int) -> dict[str, Any]:
    """The ``subscription.synced`` line that says ``server`` carries ``n`` URIs."""
    return await a.wait_event(
        "subscription.synced", lambda e: e["server"] == server and e["uris"] == n, timeout=STARTUP
    )


def routed(a: Agentd) -> list[dict[str, Any]]:
    return a.find("resource.updated", lambda e: e.get("route") is not None)


# ----------------------------------------------------------------------------- SC1. stdio


async def test_sc1_1200_uris_behind_one_glob_over_stdio_are_all_carried_and_one_change_is_one_event(
    tmp_path: Path, allow_files: Any
) -> None:
    allow_files("*.storm")
    cfg = routes_config(tmp_path, [spawn_route("items", "item://*")])
    args = [
        "--mode", "reactive", "--verbose", "--config", cfg, "--model", reader_script(tmp_path),
        "--mcp-stdio", fault_server(tmp_path, "many", "--items", str(MANY)),
        "--subscribe", "many:item://*", "react",
    ]  # fmt: skip
    async with run_agentd(args, env=env(tmp_path)) as a:
        synced = await all_subscribed(a, "many", MANY)
        storm(a, tmp_path, "many", {"uri": "item://1100", "count": 1, "rate": 0})
        spawn = await a.wait_event("subagent.spawn", timeout=STEP)
        await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], timeout=STEP)
        exit_event = await drain(a)
    assert synced["added"] == MANY
    assert of(a, "subscription.failed") == []
    assert of(a, "subscription.lost") == []
    assert len(of(a, "subscription.established", server="many")) == MANY
    [change] = routed(a)
    assert (change["uri"], change["kind"], change["route"]) == ("item://1100", "updated", "items")
    assert len(of(a, "subagent.spawn")) == 1
    assert a.out.strip() == "saw item://1100: 1100:0"
    assert exit_event["counters"]["unrouted"] == 0
    # The start-up re-read was off for the route: one line and a count, not 1,200 lines.
    assert len(of(a, "resource.reread_skipped")) <= 10


# ----------------------------------------------------------------------------- SC2. Streamable HTTP


async def test_sc2_1200_uris_over_streamable_http_need_no_reconnect_and_one_change_is_one_event(
    tmp_path: Path,
) -> None:
    state = tmp_path / "web.json"
    notes_file(state, MANY)
    listener, port = listening()
    url = f"http://127.0.0.1:{port}/mcp"
    cfg = routes_config(tmp_path, [spawn_route("notes", "note://*")])
    args = [
        "--mode", "reactive", "--verbose", "--config", cfg, "--model", reader_script(tmp_path),
        "--mcp-http", f"web={url}", "--subscribe", "web:note://*", "react",
    ]  # fmt: skip
    server = await start_notes_server(listener, state, quiet=True)
    try:
        async with run_agentd(args, env=env(tmp_path)) as a:
            await all_subscribed(a, "web", MANY + 2)
            async with Client(url) as client:
                await client.call_tool("set_note", {"name": "k1100", "text": "changed"})
            spawn = await a.wait_event("subagent.spawn", timeout=STEP)
            await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], timeout=STEP)
            await drain(a)
    finally:
        await stop(server)
        listener.close()
    assert of(a, "subscription.failed") == []
    assert of(a, "upstream.lost") == []
    assert of(a, "server.state", state="restarting") == []
    [change] = routed(a)
    assert (change["uri"], change["kind"]) == ("note://k1100", "updated")
    assert a.out.strip() == "saw note://k1100: changed"


# ----------------------------------------------------------------------------- SC3. model-driven


async def test_sc3_a_model_subscribing_120_uris_in_one_reply_keeps_declared_routes_working(
    tmp_path: Path,
) -> None:
    state = tmp_path / "web.json"
    notes_file(state, 130)
    listener, port = listening()
    url = f"http://127.0.0.1:{port}/mcp"
    subscriber = script(
        tmp_path,
        [
            {
                "tool_calls": [
                    {"name": "subscribe", "arguments": {"uri": f"note://k{i:04d}"}} for i in range(120)
                ]
            },
            {"text": "watching 120 notes"},
        ],
        name="subscriber.json",
    )
    routes = [
        # The start-up re-read of note://beta wakes the subscriber; note://alpha is the declared route.
        {
            "name": "sub",
            "match": "note://beta",
            "disposition": "spawn",
            "template": "{uri}",
            "model": subscriber,
        },
        spawn_route("alpha", "note://alpha"),
    ]
    args = [
        "--mode", "reactive", "--verbose", "--config", routes_config(tmp_path, routes), "--model", reader_script(tmp_path),
        "--mcp-http", f"web={url}", "--subscribe", "web:note://beta", "--subscribe", "web:note://alpha", "react",
    ]  # fmt: skip
    server = await start_notes_server(listener, state, quiet=True)
    try:
        # The per-session cap (64 by default, rfcs/0265) is raised: this case is the stream at scale.
        caps = {"AGENTD_MAX_SELF_SUBSCRIPTIONS_PER_SESSION": "200"}
        async with run_agentd(args, env=env(tmp_path) | caps) as a:
            await a.wait_event("turn.end", lambda e: "watching 120 notes" in a.out, timeout=STARTUP)
            assert len(of(a, "self.subscribe")) == 120
            await all_subscribed(a, "web", 122)
            async with Client(url) as client:
                await client.call_tool("set_note", {"name": "alpha", "text": "declared still works"})
                await a.wait_event("turn.end", lambda e: "declared still works" in a.out, timeout=STEP)
                # And a self-subscribed URI wakes the subscriber's session.
                await client.call_tool("set_note", {"name": "k0042", "text": "x"})
                await a.wait_event("resource.updated", lambda e: e["uri"] == "note://k0042", timeout=STEP)
            await drain(a)
    finally:
        await stop(server)
        listener.close()
    assert of(a, "upstream.lost") == []
    assert of(a, "server.state", state="restarting") == []
    # The calls run one after the other: each added its URI to the one stream (a
    # replacement each, none lost, none refused). The drain may release the
    # session's 120 afterwards (a last sync of the 2 declared URIs), or end first.
    synced = of(a, "subscription.synced", server="web")
    assert max(e["uris"] for e in synced) == 122
    assert synced[-1]["uris"] in (122, 2)
    assert sum(e["added"] for e in synced) == 122
    assert of(a, "subscription.failed") == []
    assert "saw note://alpha: declared still works" in a.out.splitlines()
    [k42] = of(a, "resource.updated", uri="note://k0042")
    assert k42["route"] is not None


# ----------------------------------------------------------------------------- SC4. SIGKILL mid-switch


async def test_sc4_a_set_change_during_a_burst_then_sigkill_mid_switch_loses_nothing(
    tmp_path: Path, allow_files: Any
) -> None:
    allow_files("*.storm", "*.hold")
    items = 300
    receipts = (await trio.open_tcp_listeners(0, host="127.0.0.1"))[0]
    port = receipts.socket.getsockname()[1]
    route = {"name": "items", "match": "item://*", "disposition": "continue", "session": "ops",
             "debounce": "50ms", "reread_on_start": False}  # fmt: skip
    model = script(tmp_path, [{"text": "NO_REPLY"}], name="quiet.json")
    args = [
        "--mode", "reactive", "--verbose", "--config", routes_config(tmp_path, [route]), "--model", model,
        "--mcp-stdio", fault_server(tmp_path, "many", "--items", str(items), "--hold-listen", str(port)),
        "--subscribe", "many:item://*", "react",
    ]  # fmt: skip
    hold = tmp_path / "many.json.hold"
    try:
        async with run_agentd(args, env=env(tmp_path)) as a:
            await all_subscribed(a, "many", items)
            first = server_pid(a, tmp_path, "many")
            # The set changes: a new item appears, agentd opens a stream with 301 URIs, and the
            # server holds it unacknowledged: the old stream (300 URIs) is still the live one.
            hold.write_text("")
            os.kill(first, signal.SIGUSR2)
            with trio.fail_after(STEP):
                async with await receipts.accept() as receipt:
                    assert (await receipt.receive_some(64)).startswith(f"held {items + 1}".encode())
            # A burst over every item while the switch is under way, and the server dies in it.
            t_storm = len(a.events)
            storm(a, tmp_path, "many", {"items": items, "rounds": 1})
            os.kill(first, signal.SIGKILL)
            hold.unlink()
            await a.wait_event("server.state", lambda e: e["state"] == "connected", count=2, timeout=STARTUP)
            # The restarted server lists its 300 items again (the one it added died with it).
            await a.wait_event("subscription.synced", lambda e: e["uris"] == items, count=2, timeout=STARTUP)
            await a.wait_event(
                "resource.updated",
                lambda e: e["kind"] == "synthetic" and e["uri"].startswith("item://"),
                count=items,
                timeout=STEP,
            )
            await drain(a)
    finally:
        await receipts.aclose()
    after = [e for e in a.events[t_storm:] if e.get("event") == "resource.updated"]
    seen = {e["uri"] for e in after}
    # Whatever the burst changed before the kill arrived as pushes, or not at all: every item
    # is re-read after the restart, so no change is lost.
    assert {f"item://{i}" for i in range(items)} <= seen
    assert all(e["route"] == "items" for e in after)
    synthetic = [e["uri"] for e in after if e["kind"] == "synthetic"]
    assert sorted(synthetic) == sorted(f"item://{i}" for i in range(items))  # once per URI carried


# ----------------------------------------------------------------------------- SC5. full pool


async def test_sc5_a_full_connection_pool_is_not_a_lost_server() -> None:
    """*component*: the HTTP transport's watch on every exchange, with a pool that is full."""
    import httpx2

    from agentd.upstream.http import HttpTransport, _Watch

    class Full(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            raise httpx2.PoolTimeout("no connection available in the pool")

    class Refused(httpx2.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
            raise httpx2.ConnectError("connection refused")

    owner = HttpTransport("web", "http://127.0.0.1:9/mcp")
    async with httpx2.AsyncClient(transport=_Watch(owner, Full(), Refused())) as client:
        with pytest.raises(httpx2.PoolTimeout):
            await client.post("http://127.0.0.1:9/mcp", json={})
        assert not owner.lost.is_set()  # agentd's own limit: the server is fine
        with pytest.raises(httpx2.ConnectError):
            await client.post(
                "http://127.0.0.1:9/mcp", json={}, headers={"Mcp-Method": "subscriptions/listen"}
            )
        # A listen request went to the streams' pool (here: a refusing server): that is a lost server.
        assert owner.lost.is_set()
        assert "unreachable" in (owner.lost_reason or "")


# ----------------------------------------------------------------------------- SC6. a cap refuses part of the set


async def test_sc6_a_server_cap_refuses_part_of_the_set_and_the_rest_stays_subscribed(
    tmp_path: Path, allow_files: Any
) -> None:
    """The bundled files server with ``--max-watchers 2`` and five declared files.

    The server refuses a listen request that asks for more watchers than its
    cap as a whole; agentd narrows it: the first two files are carried, the
    other three are refused once, told with the server's fix, and never asked
    again (before: the whole set was asked again after each backoff, then
    every URI given up, the two that fit included).
    """
    allow_files("root/*.txt")
    root = tmp_path / "root"
    root.mkdir()
    names = ["a", "b", "c", "d", "e"]
    for name in names:
        (root / f"{name}.txt").write_text(f"{name} 0\n")
    cfg = routes_config(tmp_path, [spawn_route("files", "file:///*")])
    server = f"files={PY} -m agentd serve files --root {root} --max-watchers 2"
    subscribes = [arg for name in names for arg in ("--subscribe", f"files:file:///{name}.txt")]
    args = [
        "--mode", "reactive", "--verbose", "--config", cfg, "--model", reader_script(tmp_path),
        "--mcp-stdio", server, *subscribes, "react",
    ]  # fmt: skip
    async with run_agentd(args, env=env(tmp_path)) as a:
        failed = await a.wait_event("subscription.failed", timeout=STARTUP)
        await a.wait_event("subscription.synced", lambda e: e["uris"] == 2, timeout=STARTUP)
        # A change to a carried file reaches an agent; one to a refused file has no watcher.
        (root / "e.txt").write_text("e 1\n")
        (root / "b.txt").write_text("b 1\n")
        spawn = await a.wait_event("subagent.spawn", timeout=STEP)
        await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], timeout=STEP)
        await drain(a)
    assert (failed["server"], failed["uris"]) == ("files", 3)
    assert sorted(failed["sample"]) == ["file:///c.txt", "file:///d.txt", "file:///e.txt"]
    assert "its limit (--max-watchers 2 of `agentd serve files`)" in failed["error"]
    assert failed["error"].endswith("or start the server with a higher --max-watchers")
    # Told once, never asked again: one refusal line, the carried pair never lost or re-opened.
    assert len(of(a, "subscription.failed")) == 1
    assert of(a, "subscription.lost") == []
    assert of(a, "upstream.lost") == []
    carried = {e["uri"] for e in of(a, "subscription.established", server="files")}
    assert carried == {"file:///a.txt", "file:///b.txt"}
    assert [e["uris"] for e in of(a, "subscription.synced", server="files")][-1] == 2
    [change] = routed(a)
    assert (change["uri"], change["kind"]) == ("file:///b.txt", "updated")

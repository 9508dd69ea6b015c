"""The tool policy (pure) and the hub's catalogs under it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import mcp_types as types
import trio

from agentd.config import load_settings
from agentd.observe.telemetry import NullTelemetry
from agentd.supervisor.hub import SupervisorHub
from agentd.supervisor.toolpolicy import ToolPolicy, ToolRules


def test_levels_and_globs() -> None:
    policy = ToolPolicy(
        everywhere=ToolRules.of(["files__*", "memo__memo_get"], ["files__delete*"]),
        servers={"files": ToolRules.of(None, ["write_secret"])},
        routes={"audit": ToolRules.of(None, (), read_only=True), "quiet": ToolRules.of(None, ["watch_*"])},
    )

    def allows(route: str | None, server: str, tool: str, ro: bool | None = None) -> bool:
        return policy.allows(route, f"{server}__{tool}", server=server, tool=tool, read_only_hint=ro)

    assert allows(None, "files", "read")
    assert not allows(None, "files", "delete_all")  # global deny wins over the allow
    assert not allows(None, "files", "write_secret")  # the server's own deny, over its own names
    assert allows(None, "memo", "memo_get")
    assert not allows(None, "memo", "memo_set")  # not in the allow list
    assert not allows("audit", "files", "read")  # read-only route: no annotation, not offered
    assert not allows("audit", "files", "read", False)
    assert allows("audit", "files", "read", True)
    assert allows("elsewhere", "files", "read")  # a route without rules: the global policy
    # Self-tools: an allow list does not remove them; an explicit deny does.
    assert policy.allows(None, "subscribe")
    assert policy.allows("quiet", "subscribe")
    assert not policy.allows("quiet", "watch_start")
    assert policy.allows(None, "watch_start")


def test_empty_allow_list_offers_no_upstream_tool() -> None:
    policy = ToolPolicy(everywhere=ToolRules.of([]))
    assert not policy.allows(None, "a__b", server="a", tool="b")
    assert policy.allows(None, "list_resources")


def test_from_settings_numbers_routes_like_the_router(tmp_path: Path) -> None:
    model = tmp_path / "m.json"
    model.write_text('{"turns": [{"text": "x"}]}')
    settings = load_settings(
        {
            "model": f"script:{model}",
            "instruction": "x",
            "mode": "reactive",
            "routes": [
                "a://*=spawn",
                "b://*=spawn,tools=read-only",
                "c://*=spawn,name=named,allowed_tools=x__*",
            ],
            "mcp_stdio": ["x=cmd"],
            "disallowed_tools": "x__bad",
        },
        env={},
    )
    policy = ToolPolicy.from_settings(settings)
    assert set(policy.routes) == {"r1", "named"}
    assert policy.routes["r1"].read_only
    assert policy.everywhere.disallowed == ("x__bad",)
    assert policy.scoped("r0") is None
    assert policy.scoped("named") == "named"


class _Up:
    def __init__(self, tools: list[types.Tool]) -> None:
        self.tools = tools
        self.tools_version = 1
        self.calls: list[str] = []

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
        self.calls.append(name)
        return types.CallToolResult(content=[types.TextContent(type="text", text="done")])


def _tool(name: str, *, ro: bool | None = None) -> types.Tool:
    annotations = None if ro is None else types.ToolAnnotations(read_only_hint=ro)
    return types.Tool(name=name, input_schema={"type": "object"}, annotations=annotations)


async def test_hub_offers_per_route_and_refuses_as_unknown() -> None:
    up = _Up([_tool("get", ro=True), _tool("set", ro=False), _tool("drop")])
    send, _recv = trio.open_memory_channel[Any](10)
    policy = ToolPolicy(
        everywhere=ToolRules.of(None, ["memo__drop"]), routes={"ro": ToolRules.of(None, (), read_only=True)}
    )
    hub = SupervisorHub(events=send, upstreams={"memo": up}, telemetry=NullTelemetry(), policy=policy)
    hub.bind("a1", "ro")
    hub.bind("a2", "other")
    root = {t.name for t in hub.tools_for("root")}
    assert {"memo__get", "memo__set"} <= root
    assert "memo__drop" not in root
    assert {s["name"] for s in hub.tool_specs("a1")} & {"memo__get", "memo__set"} == {"memo__get"}
    assert {t.name for t in hub.tools_for("a2")} == root
    result = await hub.call("a1", "memo__set", {})
    assert result.is_error
    assert "unknown tool" in result.content[0].text.lower()  # type: ignore[union-attr]
    assert up.calls == []
    assert not (await hub.call("root", "memo__set", {})).is_error
    assert up.calls == ["set"]
    hub.release("a1")
    assert "memo__set" in {t.name for t in hub.tools_for("a1")}  # forgotten: no route any more


async def test_watch_filters_follow_the_policy() -> None:
    from agentd.watches.manager import WatchManager

    up = _Up([_tool("get", ro=True), _tool("peek", ro=True), _tool("set", ro=False)])
    send, _recv = trio.open_memory_channel[Any](10)
    policy = ToolPolicy(everywhere=ToolRules.of(None, ["memo__peek"]))
    hub = SupervisorHub(events=send, upstreams={"memo": up}, telemetry=NullTelemetry(), policy=policy)
    manager = WatchManager(
        upstreams={"memo": up},
        events=send,
        telemetry=NullTelemetry(),
        server_for=hub.server_for,
        tool_allowed=hub.policy_allows,
    )
    catalog, denied = manager.filter_catalog()
    assert "memo__get" in catalog
    assert "memo__peek" not in catalog  # read-only, but no agent may call it
    assert denied == {"memo__peek", "memo__set"}

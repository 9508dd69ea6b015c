"""The tool policy's guard tests (docs/testing.md): each kills a mutant the other tests let live.

Every rule written in the settings reaches the agent's catalog: a server's own
allow and deny lists, the global allow list, a route's deny list.
"""

from __future__ import annotations

from pathlib import Path

from agentd.config import Settings, load_settings
from agentd.supervisor.toolpolicy import ToolPolicy, ToolRules

SERVERS = """
allowed_tools = ["files__*", "gh__*", "memo__*", "plain__*"]

[servers.files]
command = "files-server"
disallowed_tools = ["delete"]

[servers.gh]
command = "gh-server"
allowed_tools = ["search"]

[servers.plain]
command = "plain-server"

[servers.memo]
command = "memo-server"
allowed_tools = ["memo_get", "memo_set"]
disallowed_tools = ["memo_set"]
"""


def _settings(tmp_path: Path, routes: list[str]) -> Settings:
    model = tmp_path / "m.json"
    model.write_text('{"turns": [{"text": "x"}]}')
    config = tmp_path / "agentd.toml"
    config.write_text(SERVERS)
    flags = {"model": f"script:{model}", "instruction": "x", "mode": "reactive", "routes": routes}
    return load_settings(flags, config_file=config, env={})


def _allows(policy: ToolPolicy, route: str | None, server: str, tool: str) -> bool:
    return policy.allows(route, f"{server}__{tool}", server=server, tool=tool)


def test_each_servers_own_allow_and_deny_lists_reach_the_policy(tmp_path: Path) -> None:
    policy = ToolPolicy.from_settings(_settings(tmp_path, []))
    # Only servers with rules of their own get a level (an open one would cost a lookup for nothing).
    assert set(policy.servers) == {"files", "gh", "memo"}
    assert policy.servers["files"] == ToolRules.of(None, ["delete"])
    assert policy.servers["gh"] == ToolRules.of(["search"])
    assert policy.servers["memo"] == ToolRules.of(["memo_get", "memo_set"], ["memo_set"])
    assert _allows(policy, None, "files", "read")
    assert not _allows(policy, None, "files", "delete")  # the server's deny, over its own names
    assert _allows(policy, None, "gh", "search")
    assert not _allows(policy, None, "gh", "push")  # not in the server's allow list
    assert _allows(policy, None, "memo", "memo_get")
    assert not _allows(policy, None, "memo", "memo_set")  # allowed, and denied: the deny wins
    assert _allows(policy, None, "plain", "anything")


def test_the_global_allow_list_reaches_the_policy(tmp_path: Path) -> None:
    policy = ToolPolicy.from_settings(_settings(tmp_path, []))
    assert policy.everywhere.allowed == ("files__*", "gh__*", "memo__*", "plain__*")
    assert not policy.allows(None, "other__read", server="other", tool="read")


def test_a_routes_deny_list_removes_upstream_tools_from_its_agents_only(tmp_path: Path) -> None:
    policy = ToolPolicy.from_settings(_settings(tmp_path, ["a://*=spawn,disallowed_tools=files__read*"]))
    assert policy.routes["r0"] == ToolRules.of(None, ["files__read*"])
    assert not _allows(policy, "r0", "files", "read_file")
    assert _allows(policy, "r0", "files", "write_file")
    assert _allows(policy, None, "files", "read_file")


def test_a_routes_allow_list_is_matched_against_the_namespaced_name() -> None:
    policy = ToolPolicy(routes={"r": ToolRules.of(["files__read*"])})
    assert _allows(policy, "r", "files", "read_file")
    assert not _allows(policy, "r", "files", "write_file")
    assert not _allows(policy, "r", "memo", "read")

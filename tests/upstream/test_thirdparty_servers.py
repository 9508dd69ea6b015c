"""Third-party MCP servers as people run them, through the real ``agentd`` command.

Versions tested (pinned in tests/thirdparty/, installed by tests/support/thirdparty.py):
npm ``@modelcontextprotocol/server-everything`` 2026.8.31 (stdio, Streamable HTTP
and SSE), ``@modelcontextprotocol/server-filesystem`` 2026.8.31,
``@modelcontextprotocol/server-memory`` 2026.8.31 and PyPI ``mcp-server-time``
2026.10.19 (in its own venv). Why these: rfcs/0295. Servers that answer
``resources/templates/list`` with "Method not found" (rfcs/0378): PyPI
``mcp-server-sqlite`` 2025.4.25 and ``fastmcp`` 1.0 (each in its own venv), and
a low-level server (``tests/mcpservers/ts_lowlevel_server.mjs``) on the npm
``@modelcontextprotocol/sdk``, the TypeScript SDK 1.0.4 and SDK 1.32.2.

The model is the loopback provider fake speaking Chat Completions
(tests/fakes/provider_server.py): it records each request body, so a test reads
off the wire which tools agentd offered (the ``server__tool`` names and their
schemas) and what each tool call and resource read sent back to the model.
One agentd run per server and transport.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agentd.core.exitcodes import ExitCode
from tests.fakes.provider_server import RecordedRequest, Reply, openai_reply, provider_server
from tests.support import thirdparty
from tests.support.agentd_proc import Agentd, drain
from tests.support.routing import server_process
from tests.support.supervised import RUN_TIMEOUT, supervised
from tests.support.thirdparty import (
    FILESYSTEM,
    MEMORY,
    everything_over_http,
    stdio_entry,
    write_mcp_config,
)

pytestmark = [
    pytest.mark.slow,
    # The first test of a fresh work tree installs the servers (npm ci, a venv): minutes on a slow mirror.
    pytest.mark.timeout(thirdparty.NPM_TIMEOUT + thirdparty.PIP_TIMEOUT),
]

#: A change travelling server -> agentd -> a forked agent -> its model, on a loaded 2-core box.
STEP_TIMEOUT = 30.0

#: What the providers accept as a tool name (OpenAI and Anthropic).
PROVIDER_TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


@pytest.fixture(scope="session")
def npm_servers() -> None:
    thirdparty.ensure_npm()


@pytest.fixture(scope="session")
def time_python() -> Path:
    return thirdparty.ensure_time()


@pytest.fixture(scope="session")
def sqlite_server() -> None:
    thirdparty.ensure_pypi(thirdparty.SQLITE)


@pytest.fixture(scope="session")
def fastmcp_server() -> None:
    thirdparty.ensure_pypi(thirdparty.FASTMCP)


def _env(url: str) -> dict[str, str]:
    return {"OPENAI_BASE_URL": url, "OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": ""}


def _offered(request: RecordedRequest) -> dict[str, dict[str, Any]]:
    """The tools one model request offered: name -> JSON schema of the arguments."""
    return {t["function"]["name"]: t["function"]["parameters"] for t in request.json.get("tools", [])}


def _server_tools(offered: dict[str, dict[str, Any]], server: str) -> set[str]:
    return {name for name in offered if name.startswith(f"{server}__")}


def _arrays_without_items(node: Any, path: str) -> Iterator[str]:
    if isinstance(node, dict):
        kind = node.get("type")
        if (kind == "array" or (isinstance(kind, list) and "array" in kind)) and "items" not in node:
            yield path
        for key, value in node.items():
            yield from _arrays_without_items(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _arrays_without_items(value, f"{path}[{i}]")


def _assert_providers_accept(offered: dict[str, dict[str, Any]]) -> None:
    """What the providers check of a tool: its name, an object schema, and (OpenAI) items on every array."""
    for name, schema in offered.items():
        assert PROVIDER_TOOL_NAME.match(name), name
        assert schema.get("type") == "object", (name, schema)
        assert not list(_arrays_without_items(schema, name))


def _tool_results(requests: list[RecordedRequest]) -> Iterator[tuple[str, str]]:
    """(tool_call_id, content) of every tool message any request carried back to the model."""
    for request in requests:
        for message in request.json["messages"]:
            if message["role"] == "tool":
                yield message["tool_call_id"], message["content"]


def _result(requests: list[RecordedRequest], call_id: str) -> str:
    found = {content for cid, content in _tool_results(requests) if cid == call_id}
    assert len(found) == 1, f"tool call {call_id!r} reached the model {len(found)} times: {found}"
    return found.pop()


def _call(call_id: str, name: str, arguments: dict[str, Any]) -> tuple[str, str, str]:
    return (call_id, name, json.dumps(arguments))


# --- server-everything: every transport, woken by its own resource updates ---------------------

#: The tools server-everything 2026.8.31 lists to a client like agentd's (no sampling,
#: elicitation or roots capability: the tools that need those are not registered),
#: less the task-only one agentd cannot call (rfcs/0296).
EVERYTHING_TOOLS = {
    "echo",
    "get-annotated-message",
    "get-env",
    "get-resource-links",
    "get-resource-reference",
    "get-structured-content",
    "get-sum",
    "get-tiny-image",
    "gzip-file-as-resource",
    "toggle-simulated-logging",
    "toggle-subscriber-updates",
    "trigger-long-running-operation",
}
EVERYTHING_TASK_ONLY = ["simulate-research-query"]
DOC = "demo://resource/static/document/features.md"

EVERYTHING_TOML = f"""
mode = "reactive"
subscribe = ["everything:{DOC}"]

[[routes]]
name = "doc"
match = "{DOC}"
disposition = "spawn"
debounce = "0s"
# Nothing wakes before the server's restart: the first agent is the reconnect's re-read's.
reread_on_start = false
"""


def _everything_model() -> Any:
    """The first agent (woken by the re-read after the restart) adds, reads the document, reads
    the server's environment and starts the server's updates; every later agent (woken by a real update) stops them again."""
    first_turns = 0

    def respond(request: RecordedRequest) -> Reply:
        nonlocal first_turns
        if request.json["messages"][-1]["role"] == "tool":
            return openai_reply("done")
        first_turns += 1
        if first_turns == 1:
            return openai_reply(
                tool_calls=[
                    _call("sum", "everything__get-sum", {"a": 2, "b": 3}),
                    _call("read", "read_resource", {"uri": DOC}),
                    _call("env", "everything__get-env", {}),
                    _call("on", "everything__toggle-subscriber-updates", {}),
                ]
            )
        return openai_reply(
            tool_calls=[_call(f"off{first_turns}", "everything__toggle-subscriber-updates", {})]
        )

    return respond


@pytest.mark.parametrize("transport", ["stdio", "streamableHttp", "sse"])
async def test_server_everything_survives_a_restart_and_its_updates_wake_a_reactive_run(
    transport: str, tmp_path: Path, npm_servers: None
) -> None:
    """server-everything 2026.8.31 on each transport: the tools offered; the server SIGKILLed while
    agentd is subscribed and idle; after the reconnect, a call, a read, and a reactive run woken
    by the server's own ``notifications/resources/updated`` on the new session."""
    config = tmp_path / "agentd.toml"
    config.write_text(EVERYTHING_TOML)
    entry = thirdparty.everything_entry()
    async with provider_server(handler=_everything_model()) as model:
        if transport == "stdio":

            async def kill_stdio(a: Agentd) -> None:
                server_process(a, entry).kill()  # agentd starts it again itself

            server = stdio_entry(thirdparty.node(), entry, "stdio")
            a = await _everything_run(tmp_path, config, server, model.url("/v1"), kill_stdio, None)
        else:
            async with everything_over_http(transport) as http:  # type: ignore[arg-type]

                async def kill_http(_a: Agentd) -> None:
                    await http.kill()

                kind = "http" if transport == "streamableHttp" else "sse"
                entry_json = {"type": kind, "url": http.url}
                a = await _everything_run(
                    tmp_path, config, entry_json, model.url("/v1"), kill_http, http.start
                )
        requests = list(model.requests)

    offered = _offered(requests[0])
    assert _server_tools(offered, "everything") == {f"everything__{t}" for t in EVERYTHING_TOOLS}
    # Its task-only tool is not offered (every call of it would fail), and the user is told why,
    # once: the reconnect's identical list says nothing new.
    (skipped,) = a.find("upstream.tools_skipped")
    assert skipped["server"] == "everything"
    assert skipped["tools"] == EVERYTHING_TASK_ONLY
    assert "MCP tasks" in skipped["reason"]
    assert {"read_resource", "list_resources", "subscribe"} <= offered.keys()
    _assert_providers_accept(offered)
    # A call on a hyphenated name, a resource read and the update switch reached the model.
    assert _result(requests, "sum") == "The sum of 2 and 3 is 5."
    assert "# Everything Server - Features" in _result(requests, "read")
    assert _result(requests, "on").startswith("Started simulated resource updated notifications")
    if transport == "stdio":
        # agentd started this server: it got a minimal environment, without the model's key.
        server_env = json.loads(_result(requests, "env"))
        assert "PATH" in server_env
        assert "OPENAI_API_KEY" not in server_env
        assert "sk-test" not in json.dumps(server_env)
    # The agent the update woke stopped them on the same upstream session (one shared connection).
    assert _result(requests, "off2").startswith("Stopped simulated resource updates")


async def _everything_run(
    tmp_path: Path,
    config: Path,
    server: dict[str, Any],
    model_url: str,
    kill: Callable[[Agentd], Awaitable[None]],
    restart: Callable[[], Awaitable[None]] | None,
) -> Agentd:
    mcp = write_mcp_config(tmp_path / "mcp.json", {"everything": server})
    args = ["--config", str(config), "--mcp-config", mcp, "--require", "everything", "--verbose"]
    args += ["--model", "openai:gpt-4o-mini", "report the document"]
    async with supervised(args, tmp_path, env=_env(model_url)) as a:
        await a.wait_event("subscription.established", timeout=RUN_TIMEOUT)
        await kill(a)
        await a.wait_event("server.state", lambda e: e["state"] == "restarting", timeout=STEP_TIMEOUT)
        if restart is not None:
            await restart()  # a new process on the same port: the old session is gone
        await a.wait_event("upstream.connected", count=2, timeout=RUN_TIMEOUT)
        await a.wait_event("subscription.established", count=2, timeout=STEP_TIMEOUT)
        # The re-read after the reconnect wakes the first agent; its toggle starts the server's updates.
        reread = await a.wait_event(
            "resource.updated", lambda e: e["kind"] == "synthetic", timeout=STEP_TIMEOUT
        )
        assert (reread["uri"], reread["route"], reread.get("startup")) == (DOC, "doc", None), reread
        real = await a.wait_event("resource.updated", lambda e: e["kind"] == "updated", timeout=STEP_TIMEOUT)
        assert (real["uri"], real["route"]) == (DOC, "doc"), real
        # A second agent, spawned on the doc route after the real update, ends its turn.
        await a.wait_event("turn.end", lambda e: e["route"] == "doc", count=2, timeout=STEP_TIMEOUT)
        assert [e["route"] for e in a.find("subagent.spawn")][:2] == ["doc", "doc"]
        await drain(a, RUN_TIMEOUT)
    assert len(a.find("resource.updated", lambda e: e["kind"] == "synthetic")) == 1
    second_spawn = a.find("subagent.spawn")[1]
    assert a.events.index(second_spawn) > a.events.index(real), "the second agent was not woken by the update"
    return a


# --- server-filesystem, server-memory, mcp-server-time: once runs ---------------------------------

FILESYSTEM_TOOLS = {
    "create_directory",
    "directory_tree",
    "edit_file",
    "get_file_info",
    "list_allowed_directories",
    "list_directory",
    "list_directory_with_sizes",
    "move_file",
    "read_file",
    "read_media_file",
    "read_multiple_files",
    "read_text_file",
    "search_files",
    "write_file",
}
MEMORY_TOOLS = {
    "add_observations",
    "create_entities",
    "create_relations",
    "delete_entities",
    "delete_observations",
    "delete_relations",
    "open_nodes",
    "read_graph",
    "search_nodes",
}
TIME_TOOLS = {"convert_time", "get_current_time"}


async def _once(
    tmp_path: Path,
    name: str,
    server: dict[str, Any],
    replies: list[Reply],
    *,
    protocol: str,
    no_templates: bool = False,
) -> list[RecordedRequest]:
    """One ``--mode once`` run with ``server`` as ``name`` (connected in ``protocol``'s era)
    and the model answering ``replies``; ``no_templates``: the server answers
    ``resources/templates/list`` with "Method not found", said once at debug level."""
    mcp = write_mcp_config(tmp_path / "mcp.json", {name: server})
    async with provider_server(replies) as model:
        args = ["--mcp-config", mcp, "--require", name, "--model", "openai:gpt-4o-mini", "use the tools"]
        if no_templates:
            args.append("--verbose")
        async with supervised(args, tmp_path, env=_env(model.url("/v1"))) as a:
            assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK, a.tail()
        assert a.out.strip() == "done"
        (connected,) = a.find("upstream.connected")
        assert connected["protocol_version"] == protocol
        assert a.find("upstream.connect_failed") == []
        if no_templates:
            _assert_templates_skipped(a, name)
        requests = list(model.requests)
    assert len(requests) == len(replies)
    _assert_providers_accept(_offered(requests[0]))
    return requests


def _assert_templates_skipped(a: Agentd, name: str) -> None:
    (skipped,) = a.find("upstream.list_skipped")
    assert (skipped["server"], skipped["method"], skipped["level"]) == (
        name,
        "resources/templates/list",
        "debug",
    )
    assert "-32601 Method not found" in skipped["reason"]


async def test_server_filesystem_reads_a_file_in_its_allowed_directory(
    tmp_path: Path, npm_servers: None
) -> None:
    """server-filesystem 2026.8.31: its tools, and a file's text back to the model."""
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "greeting.txt").write_text("hello from a third-party server\n")
    server = stdio_entry(thirdparty.node(), thirdparty.npm_entry(FILESYSTEM), str(shared))
    replies = [
        openai_reply(
            tool_calls=[_call("read", "fs__read_text_file", {"path": str(shared / "greeting.txt")})]
        ),
        openai_reply("done"),
    ]
    requests = await _once(tmp_path, "fs", server, replies, protocol="2025-11-25")
    assert _server_tools(_offered(requests[0]), "fs") == {f"fs__{t}" for t in FILESYSTEM_TOOLS}
    assert _result(requests, "read") == "hello from a third-party server\n"


async def test_server_memory_stores_an_entity_and_serves_its_graph_resource(
    tmp_path: Path, npm_servers: None
) -> None:
    """server-memory 2026.8.31: a tool call that writes, then its resource read back."""
    store = tmp_path / "memory.jsonl"
    server = stdio_entry(
        thirdparty.node(), thirdparty.npm_entry(MEMORY), env={"MEMORY_FILE_PATH": str(store)}
    )
    entity = {"name": "agentd", "entityType": "project", "observations": ["tested against server-memory"]}
    replies = [
        openai_reply(tool_calls=[_call("create", "memory__create_entities", {"entities": [entity]})]),
        openai_reply(tool_calls=[_call("read", "read_resource", {"uri": "memory://knowledge-graph"})]),
        openai_reply("done"),
    ]
    requests = await _once(tmp_path, "memory", server, replies, protocol="2025-11-25")
    assert _server_tools(_offered(requests[0]), "memory") == {f"memory__{t}" for t in MEMORY_TOOLS}
    assert json.loads(_result(requests, "create")) == [entity]
    graph = json.loads(_result(requests, "read"))
    assert graph == {"entities": [entity], "relations": []}
    assert "tested against server-memory" in store.read_text()


async def test_mcp_server_time_converts_a_time(tmp_path: Path, time_python: Path) -> None:
    """mcp-server-time 2026.10.19 from PyPI, in its own venv (it brings its own mcp, 2.x: the
    2026-07-28 protocol, where the npm servers speak 2025-11-25)."""
    server = stdio_entry(str(time_python), "-m", "mcp_server_time", "--local-timezone", "UTC")
    arguments = {"source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}
    replies = [
        openai_reply(tool_calls=[_call("convert", "time__convert_time", arguments)]),
        openai_reply("done"),
    ]
    requests = await _once(tmp_path, "time", server, replies, protocol="2026-07-28")
    assert _server_tools(_offered(requests[0]), "time") == {f"time__{t}" for t in TIME_TOOLS}
    converted = json.loads(_result(requests, "convert"))
    assert converted["source"]["timezone"] == "UTC"
    assert converted["target"]["timezone"] == "Asia/Tokyo"
    assert converted["target"]["datetime"].split("T")[1].startswith("21:00")  # Tokyo: UTC+9, no DST
    assert converted["time_difference"] == "+9.0h"


# --- servers without resources/templates/list (rfcs/0378) -------------------------------------

SQLITE_TOOLS = {
    "append_insight",
    "create_table",
    "describe_table",
    "list_tables",
    "read_query",
    "write_query",
}


async def test_mcp_server_sqlite_without_templates_connects_and_its_tools_work(
    tmp_path: Path, sqlite_server: None
) -> None:
    """mcp-server-sqlite 2025.4.25 (on mcp 1.30.0): no templates handler, so ``resources/templates/list``
    is "Method not found"; it connects, its tools are offered and answer (was: it never connected)."""
    server = stdio_entry(*thirdparty.sqlite_argv(tmp_path / "test.db"))
    replies = [
        openai_reply(
            tool_calls=[_call("create", "sqlite__create_table", {"query": "CREATE TABLE t (x INTEGER)"})]
        ),
        openai_reply(
            tool_calls=[_call("write", "sqlite__write_query", {"query": "INSERT INTO t VALUES (42)"})]
        ),
        openai_reply(tool_calls=[_call("read", "sqlite__read_query", {"query": "SELECT x FROM t"})]),
        openai_reply(tool_calls=[_call("memo", "read_resource", {"uri": "memo://insights"})]),
        openai_reply("done"),
    ]
    requests = await _once(tmp_path, "sqlite", server, replies, protocol="2025-11-25", no_templates=True)
    assert _server_tools(_offered(requests[0]), "sqlite") == {f"sqlite__{t}" for t in SQLITE_TOOLS}
    assert "42" in _result(requests, "read")
    assert "No business insights have been discovered yet" in _result(requests, "memo")


async def test_fastmcp_1_0_server_without_templates_connects_and_its_tools_work(
    tmp_path: Path, fastmcp_server: None
) -> None:
    """A server on fastmcp 1.0 (on mcp 1.30.0) that declares no template (was: it never connected)."""
    server = stdio_entry(*thirdparty.fastmcp1_argv())
    replies = [
        openai_reply(
            tool_calls=[
                _call("add", "fastmcp1__add", {"a": 2, "b": 3}),
                _call("shout", "fastmcp1__shout", {"text": "hi"}),
            ]
        ),
        openai_reply("done"),
    ]
    requests = await _once(tmp_path, "fastmcp1", server, replies, protocol="2025-11-25", no_templates=True)
    assert _server_tools(_offered(requests[0]), "fastmcp1") == {"fastmcp1__add", "fastmcp1__shout"}
    assert _result(requests, "add") == "5"
    assert _result(requests, "shout") == "HI"


NOTE = "note://alpha"

TS_TOML = f"""
mode = "reactive"
subscribe = ["ts:{NOTE}"]

[[routes]]
name = "note"
match = "{NOTE}"
disposition = "spawn"
debounce = "0s"
reread_on_start = false
"""


def _ts_model(request: RecordedRequest) -> Reply:
    """The agent the server's own update woke reads the note and calls a tool."""
    if request.json["messages"][-1]["role"] == "tool":
        return openai_reply("done")
    return openai_reply(
        tool_calls=[_call("read", "read_resource", {"uri": NOTE}), _call("add", "ts__add", {"a": 2, "b": 3})]
    )


@pytest.mark.parametrize("sdk", list(thirdparty.TS_SDKS))
async def test_typescript_sdk_low_level_server_without_templates_wakes_a_reactive_run(
    sdk: str, tmp_path: Path, npm_servers: None
) -> None:
    """A low-level server on the TypeScript SDK (the first and the latest release that answer
    ``resources/templates/list`` with "Method not found"): it connects, its tools are offered,
    and its own ``notifications/resources/updated`` wakes a reactive run (was: it never connected,
    and the run never woke)."""
    config = tmp_path / "agentd.toml"
    config.write_text(TS_TOML)
    server = stdio_entry(*thirdparty.ts_lowlevel_argv(sdk, "--change-after-subscribe", "200"))
    mcp = write_mcp_config(tmp_path / "mcp.json", {"ts": server})
    args = ["--config", str(config), "--mcp-config", mcp, "--require", "ts", "--verbose"]
    args += ["--model", "openai:gpt-4o-mini", "report the note"]
    async with provider_server(handler=_ts_model) as model:
        async with supervised(args, tmp_path, env=_env(model.url("/v1"))) as a:
            connected = await a.wait_event("upstream.connected", timeout=RUN_TIMEOUT)
            update = await a.wait_event(
                "resource.updated", lambda e: e["kind"] == "updated", timeout=STEP_TIMEOUT
            )
            assert (update["uri"], update["route"]) == (NOTE, "note")
            await a.wait_event("turn.end", lambda e: e["route"] == "note", timeout=STEP_TIMEOUT)
            await drain(a, RUN_TIMEOUT)
        requests = list(model.requests)
    assert (connected["era"], connected["probe"]) == ("handshake", "refused")
    assert a.find("upstream.connect_failed") == []
    _assert_templates_skipped(a, "ts")
    assert _server_tools(_offered(requests[0]), "ts") == {"ts__add", "ts__set_note"}
    _assert_providers_accept(_offered(requests[0]))
    assert _result(requests, "read") == "changed by the server"
    assert _result(requests, "add") == "5"

"""Fault catalog OL1–OL4: servers that skip optional methods (rfcs/0378).

Each test runs the real ``agentd`` command against ``tests/mcpservers/partial_server.py``,
a handshake-era stdio server with no ``resources/templates/list`` (answered -32601
"Method not found", never answered, or answered with another error), or one whose
``tools/list`` fails. The published servers that do the same (``mcp-server-sqlite``,
``fastmcp`` 1.0, the TypeScript SDK's low-level server) run in
``tests/upstream/test_thirdparty_servers.py``. Every wait is on telemetry or the
exit; the fault conftest fails a test that leaves a process behind.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agentd.core.exitcodes import ExitCode
from agentd.upstream.catalog import OPTIONAL_LIST_TIMEOUT
from tests.support.agentd_proc import PY, REPO, Agentd, run_agentd, script
from tests.support.leftovers import tagged_env

pytestmark = pytest.mark.fault

PARTIAL_SERVER = REPO / "tests/mcpservers/partial_server.py"

STARTUP = 30.0
"""Bound on agentd's run on a loaded 2-core machine (a hang guard)."""


def _server(*knobs: str) -> str:
    return f"partial={PY} {PARTIAL_SERVER} {' '.join(knobs)}".strip()


def _once(tmp_path: Path) -> str:
    """A model that calls the server's tool and reads its resource, then answers with both."""
    return script(
        tmp_path,
        [
            {"tool_calls": [{"name": "partial__echo", "arguments": {"text": "tool ok"}}]},
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "note://alpha"}}]},
            {"text": "read: {last_tool_result}"},
        ],
    )


def _of(a: Agentd, name: str, **where: Any) -> list[dict[str, Any]]:
    return a.find(name, lambda e: all(e.get(k) == v for k, v in where.items()))


async def _run_once(tmp_path: Path, *knobs: str) -> Agentd:
    args = [
        "--mode", "once", "--verbose", "--model", _once(tmp_path),
        "--mcp-stdio", _server(*knobs), "--require", "partial", "use the server",
    ]  # fmt: skip
    async with run_agentd(args, env=tagged_env(tmp_path, AGENTD_RECONNECT_BACKOFF="0.05")) as a:
        assert await a.wait_exit(timeout=STARTUP) == ExitCode.OK, a.tail()
    assert a.out.strip() == "read: first"
    assert [c["error"] for c in _of(a, "tool.call")] == [None, None]
    assert _of(a, "upstream.connect_failed") == []
    return a


async def test_ol1_templates_answered_method_not_found_is_an_empty_list(tmp_path: Path) -> None:
    a = await _run_once(tmp_path)
    [skipped] = _of(a, "upstream.list_skipped")
    assert (skipped["server"], skipped["method"]) == ("partial", "resources/templates/list")
    assert skipped["reason"] == "the server does not implement it (-32601 Method not found)"
    assert skipped["level"] == "debug"


async def test_ol2_templates_never_answered_are_given_up_after_their_bound(tmp_path: Path) -> None:
    # Was: the connect waited for it until the 30 s start-up bound ran out, five times over.
    a = await _run_once(tmp_path, "--drop", "resources/templates/list")
    [skipped] = _of(a, "upstream.list_skipped")
    assert (skipped["method"], skipped["level"]) == ("resources/templates/list", "debug")
    assert skipped["reason"] == (
        f"no answer within {OPTIONAL_LIST_TIMEOUT:g}s; not asked again on this connection"
    )
    [connected] = _of(a, "upstream.connected")
    assert OPTIONAL_LIST_TIMEOUT * 1000 <= connected["ms"] < STARTUP * 1000


async def test_ol3_templates_answered_with_another_error_are_a_warning_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    a = await _run_once(tmp_path, "--fail", "resources/templates/list")
    [failed] = _of(a, "upstream.list_failed")
    assert (failed["server"], failed["method"], failed["error"], failed["level"]) == (
        "partial",
        "resources/templates/list",
        "Internal error",
        "warning",
    )
    assert _of(a, "upstream.list_skipped") == []


async def test_ol4_a_failed_tools_list_is_named_in_the_error(tmp_path: Path) -> None:
    model = script(tmp_path, [{"text": "never runs"}])
    args = [
        "--mode", "once", "--model", model,
        "--mcp-stdio", _server("--fail", "tools/list"), "--require", "partial", "use the server",
    ]  # fmt: skip
    async with run_agentd(args, env=tagged_env(tmp_path, AGENTD_RECONNECT_BACKOFF="0.05")) as a:
        assert await a.wait_exit(timeout=STARTUP) == ExitCode.REQUIRED_SERVER
    error = _of(a, "upstream.failed")[0]["error"]
    # Was: "server 'partial' Internal error", naming no call.
    assert error.startswith("server 'partial' failed tools/list: Internal error"), error

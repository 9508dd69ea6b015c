"""Mistakes that used to succeed silently, through the real ``agentd`` command (issue 27, rfcs/0315, 0316).

Each run has a setting that does nothing: a server command typo, a route glob
or an ``--allowed-tools`` glob that matches nothing, an exact ``--subscribe``
URI the server does not have, a reactive run nothing can wake. Each now gets
one ``config.warning`` naming the setting, the value and the fix, said once
when the servers' first attempts have settled; a server that never started is
named again in ``supervisor.exit``. ``agentd check --connect`` starts the
servers and calls the model once, and exits 0, 6 or 4.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from agentd.core.exitcodes import ExitCode
from tests.fakes.provider_server import Reply, openai_reply, provider_server
from tests.support.agentd_proc import PY, Agentd, drain, notes_server, run_agentd, script
from tests.support.supervised import RUN_TIMEOUT, supervised

#: A typo of the memo server's command: nothing called ``agentdd`` exists.
TYPO = "memo=agentdd serve memo"


def memo(tmp_path: Path) -> str:
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    return f"memo={PY} -m agentd serve memo --file {notes}"


def hello(tmp_path: Path) -> str:
    return script(tmp_path, [{"text": "hello"}])


def warnings(a: Agentd, kind: str) -> list[dict[str, Any]]:
    return a.find("config.warning", lambda e: e["kind"] == kind)


def says(event: dict[str, Any], pattern: str) -> None:
    """The warning as one line (setting, value, problem, fix) matches ``pattern``."""
    line = f"{event['setting']}: {event['value']!r} {event['problem']} — fix: {event['fix']}"
    assert re.search(pattern, line), line


# -- warnings at start -------------------------------------------------------------------


async def test_a_server_command_typo_is_warned_and_named_again_when_the_run_ends(tmp_path: Path) -> None:
    args = ["--mcp-stdio", TYPO, "--model", hello(tmp_path), "say hello"]
    async with supervised(args, tmp_path) as a:
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK
    assert a.out == "hello\n"
    [server] = warnings(a, "server")
    says(
        server,
        r"^server memo \(--mcp-stdio memo\): 'agentdd serve memo' did not start: .*cannot start 'agentdd': "
        r"No such file or directory.* — fix: fix the server's command or URL",
    )
    [exit_] = a.find("supervisor.exit")
    assert exit_["exit_code"] == 0
    assert re.match(r"^(restarting|failed): .*cannot start 'agentdd'", exit_["servers_unavailable"]["memo"])


async def test_a_clean_run_names_no_server_when_it_ends(tmp_path: Path) -> None:
    args = ["--mcp-stdio", memo(tmp_path), "--model", hello(tmp_path), "say hello"]
    async with supervised(args, tmp_path) as a:
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK
    assert a.find("config.warning") == []
    assert a.find("supervisor.exit")[0].get("servers_unavailable") is None


async def test_an_allowed_tools_glob_that_matches_no_tool_is_warned(tmp_path: Path) -> None:
    args = [
        "--mcp-stdio", memo(tmp_path), "--allowed-tools", "memo__nosuch*",
        "--model", hello(tmp_path), "say hello",
    ]  # fmt: skip
    async with supervised(args, tmp_path) as a:
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK
    [rule] = warnings(a, "tool_rule")
    says(
        rule,
        r"^--allowed-tools: 'memo__nosuch\*' matches no tool the servers offer now \(tools: memo__memo_\w+, "
        r".*\) — fix: write globs of the tools as listed \(agentd check --connect lists them\); as written, "
        r"the allow list lets no server tool through: agents get none$",
    )


async def test_an_exact_subscribe_uri_the_server_does_not_have_is_warned(tmp_path: Path) -> None:
    args = [
        "--mode", "reactive", "--mcp-stdio", memo(tmp_path), "--subscribe", "memo:memo://nosuch",
        "--model", hello(tmp_path), "react",
    ]  # fmt: skip
    async with supervised(args, tmp_path) as a:
        [sub] = [await a.wait_event("config.warning", lambda e: e["kind"] == "subscription")]
        await drain(a)
    says(
        sub,
        r"^--subscribe \(subscribe\[0\]\): 'memo:memo://nosuch' is listed by no server and matches none of "
        r"their resource templates now \('memo' offers memo://notes\) — fix: subscribe to a URI a server "
        r"lists or one of its templates matches",
    )


async def test_a_reactive_run_with_nothing_to_react_to_is_warned(tmp_path: Path) -> None:
    args = ["--mode", "reactive", "--mcp-stdio", memo(tmp_path), "--model", hello(tmp_path), "react"]
    async with supervised(args, tmp_path) as a:
        reactive = await a.wait_event("config.warning", lambda e: e["kind"] == "reactive")
        await drain(a)
    says(
        reactive,
        r"^--mode: 'reactive' has no subscription and no timer: nothing will ever wake an agent — fix: "
        r"subscribe to what should wake it \(--subscribe \[SERVER:\]URI, with a --route for it\), or add a "
        r"timer",
    )


async def test_a_route_no_subscription_feeds_is_warned(tmp_path: Path) -> None:
    args = [
        "--mode", "reactive", "--mcp-stdio", memo(tmp_path), "--subscribe", "memo:memo://notes",
        "--route", "memo://todo/*=spawn", "--model", hello(tmp_path), "react",
    ]  # fmt: skip
    async with supervised(args, tmp_path) as a:
        route = await a.wait_event("config.warning", lambda e: e["kind"] == "route")
        await drain(a)
    says(route, r"^--route \(routes\[0\]\.match\): 'memo://todo/\*' matches no declared subscription")
    assert len(warnings(a, "route")) == 1


async def test_a_route_glob_that_matches_nothing_offered_is_warned_once_not_on_every_catalog_change(
    tmp_path: Path,
) -> None:
    # The route can be fed (the subscription's glob covers it), but nothing the
    # server offers, resources or its template note://{name}, has a second
    # segment. The root adds a note: the catalog changes, nothing is said again.
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "notes__add_note", "arguments": {"name": "gamma", "text": "hi"}}]},
            {"text": "added"},
        ],
    )
    args = [
        "--mode", "loop", "--interval", "1h", "--session", "fresh",
        "--mcp-stdio", notes_server(tmp_path), "--subscribe", "notes:note://**",
        "--route", "note://*/x=spawn", "--model", model, "add a note",
    ]  # fmt: skip
    async with supervised(args, tmp_path) as a:
        route = await a.wait_event("config.warning", lambda e: e["kind"] == "route")
        await a.wait_event("catalog.changed", timeout=RUN_TIMEOUT)
        await a.wait_event("turn.end", timeout=RUN_TIMEOUT)
        await drain(a)
    says(
        route,
        r"^--route \(routes\[0\]\.match\): 'note://\*/x' matches nothing the servers offer now \('notes' "
        r"offers config://server, .*note://\{name\}\) — fix: write the match as a URI or glob of what the "
        r"servers list",
    )
    # The route covers only part of the subscription, and agentd adds no route for the rest
    # (ARCHITECTURE decision 22): said once, at start, with the route.
    (sub,) = a.find("config.warning", lambda e: e["kind"] == "subscription")
    assert "cover only part of it ('r0')" in sub["problem"], sub
    assert len(a.find("config.warning")) == 2


# -- agentd check ------------------------------------------------------------------------


async def check(args: list[str], tmp_path: Path, env: dict[str, str] | None = None) -> tuple[int, str, str]:
    async with run_agentd(["check", *args], env=env, cwd=tmp_path) as a:
        code = await a.wait_exit(RUN_TIMEOUT)
    return code, a.out, "\n".join(a.raw_stderr)


async def test_check_warns_of_a_reactive_run_with_nothing_to_react_to(tmp_path: Path) -> None:
    code, out, err = await check(["--mode", "reactive", "--model", hello(tmp_path), "react"], tmp_path)
    assert code == ExitCode.OK
    assert json.loads(out)["mode"] == "reactive"
    assert re.search(
        r"^agentd: warning: --mode: 'reactive' has no subscription and no timer: nothing will ever wake an "
        r"agent — fix: ",
        err,
        re.MULTILINE,
    ), err


async def test_check_connect_reports_the_servers_and_the_script_model(tmp_path: Path) -> None:
    model = hello(tmp_path)
    args = ["--connect", "--mcp-stdio", memo(tmp_path), "--model", model, "say hello"]
    code, out, err = await check(args, tmp_path)
    assert code == ExitCode.OK, out
    assert "agentd: error:" not in err  # only a failed check ends with the error line
    lines = out.splitlines()
    assert re.match(
        r"^server memo: ok — stdio, MCP 2026-07-28 \(modern era, probe answered\), [\d.]+ ms$", lines[0]
    ), out
    assert re.match(r"^  tools \(3\): memo_\w+, memo_\w+, memo_\w+$", lines[1]), out
    assert lines[2:4] == ["  resources (1): memo://notes", "  templates (0)"]
    assert lines[4] == f"model {model}: ok — script loaded: 1 turn, not run"
    assert lines[-1] == "check --connect: ok — exit 0"

    code, out, _err = await check([*args, "--output", "json"], tmp_path)
    assert code == ExitCode.OK
    report = json.loads(out)
    [server] = report["servers"]
    assert (report["ok"], report["exit_code"], report["failed"]) == (True, 0, [])
    assert {k: server[k] for k in ("name", "status", "transport", "era", "resources", "tools_count")} == {
        "name": "memo",
        "status": "ok",
        "transport": "stdio",
        "era": "modern",
        "resources": ["memo://notes"],
        "tools_count": 3,
    }
    assert report["models"] == [
        {"model": model, "status": "ok", "detail": "script loaded: 1 turn, not run", "ms": None}
    ]


async def test_check_connect_exits_6_when_a_server_does_not_start(tmp_path: Path) -> None:
    args = ["--connect", "--mcp-stdio", TYPO, "--model", hello(tmp_path), "--allowed-tools", "x__*", "hi"]
    code, out, err = await check(args, tmp_path)
    assert code == ExitCode.REQUIRED_SERVER == 6
    lines = out.splitlines()
    assert re.match(
        r"^server memo: FAILED — .*cannot start 'agentdd': No such file or directory", lines[0]
    ), out
    assert re.search(
        r"^warning: --allowed-tools: 'x__\*' matches no tool the servers offer now \(tools: none\) \('memo' "
        r"did not connect: what it offers is not known\)",
        out,
        re.MULTILINE,
    ), out
    assert lines[-1] == "check --connect: FAILED (server memo), 1 warning — exit 6"
    # stderr ends with the final line every non-zero exit has (rfcs/0321), the server's error whole.
    assert re.fullmatch(
        r"agentd: error: check --connect: server memo failed: .*cannot start 'agentdd': No such file or "
        r"directory.* — fix: check the server's command or URL and its environment, then run agentd check "
        r"--connect again",
        err.splitlines()[-1],
    ), err


async def test_check_connect_exits_4_when_the_provider_refuses_the_key(tmp_path: Path) -> None:
    refused = Reply(status=401, json={"error": {"message": "Incorrect API key provided", "type": "auth"}})
    async with provider_server([refused]) as provider:
        env = {"OPENAI_BASE_URL": provider.url("/v1"), "OPENAI_API_KEY": "sk-wrong"}
        args = ["--connect", "--mcp-stdio", memo(tmp_path), "--model", "openai:gpt-4o-mini", "hi"]
        code, out, err = await check(args, tmp_path, env)
    assert code == ExitCode.FATAL_INFRA == 4
    assert re.search(
        r"^model openai:gpt-4o-mini: FAILED — openai rejected the credentials \(HTTP 401 .*\): Incorrect API "
        r"key provided\. Fix: .*OPENAI_API_KEY",
        out,
        re.MULTILINE,
    ), out
    assert out.splitlines()[-1] == "check --connect: FAILED (model openai:gpt-4o-mini) — exit 4"
    # The final line gives the provider's own fix (which variable), not a general one.
    assert re.fullmatch(
        r"agentd: error: check --connect: model openai:gpt-4o-mini failed: openai rejected the credentials "
        r"\(HTTP 401 .*\): Incorrect API key provided — fix: .*OPENAI_API_KEY.*",
        err.splitlines()[-1],
    ), err
    assert "sk-wrong" not in out + err
    # One minimal request: one token asked for, no tools.
    [request] = provider.requests
    assert request.json["max_completion_tokens"] == 1
    assert "tools" not in request.json


async def test_check_connect_reports_a_provider_that_answers(tmp_path: Path) -> None:
    async with provider_server([openai_reply("OK", usage=(9, 1))]) as provider:
        env = {"OPENAI_BASE_URL": provider.url("/v1"), "OPENAI_API_KEY": "sk-test"}
        args = ["--connect", "--model", "openai:gpt-4o-mini", "--output", "json", "hi"]
        code, out, _err = await check(args, tmp_path, env)
    assert code == ExitCode.OK
    [model] = json.loads(out)["models"]
    assert (model["status"], model["detail"]) == ("ok", "answered one request (9 tokens in, 1 out)")

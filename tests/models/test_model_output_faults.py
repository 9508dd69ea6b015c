"""Fault catalog: any string a model emits is survivable, and none reaches a terminal as a control.

* End to end through the real ``agentd --mode reactive`` command, the model
  a loopback fake speaking the Chat Completions wire format: six replies
  hold lone surrogates (JSON ``"\\ud800"`` escapes) in their text, their
  tool names, their call ids and their arguments (escaped inside the
  argument text and outside it), NULs and ESC, and arguments nested past
  the limit. The daemon stays up, the restart breaker stays closed, each
  call either happens (the memo holds the key, U+FFFD where the surrogate
  was) or goes back to the model as a tool error, and the next change still
  reaches an agent.
* The text log format (``--log-format text``) with a model that names a
  tool and subscribes a URI built to set the clipboard (OSC 52), erase the
  line and print a fake green ``INFO`` line: stderr's bytes hold no ESC, no
  C1 control, no BEL, no carriage return, only their escapes. ``agentd
  check`` shows a hostile configuration key escaped too.
* In process (*component*): hypothesis-made model output, through the real
  provider parsers (each wire format, over loopback HTTP), the real agent
  loop, the real self-MCP link and control link, and the real hub and
  control-channel reader of the supervisor, in front of the bundled memo
  server: no exception, every frame the child sends validates, and every
  tool call is either made (the memo server saw it) or answered with a tool
  error.
"""

from __future__ import annotations

import functools
import json
import math
import os
import re
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from mcp import Client

from agentd.agent.child import ControlLink, SelfMcpLink
from agentd.agent.loop import run_agent
from agentd.core.exitcodes import ExitCode
from agentd.events import TurnEnded, UsageReported
from agentd.models import ToolSpec, make_model
from agentd.observe.telemetry import NullTelemetry
from agentd.selfmcp.control import FrameStream
from agentd.selfmcp.protocol import (
    MAX_CHILD_FRAME_BYTES,
    MAX_SUPERVISOR_FRAME_BYTES,
    MessageFrame,
    NextTurn,
    TurnEnd,
    UsageVerdict,
)
from agentd.selfmcp.server import serve_child
from agentd.selfmcp.transport import stream_transport
from agentd.supervisor.children.channel import serve_control
from agentd.supervisor.hub import SupervisorHub
from agentd.upstream import Upstream
from tests.fakes.provider_server import ProviderServer, RecordedRequest, Reply, provider_server
from tests.support.agentd_proc import PY, run_agentd, script
from tests.support.files import edit
from tests.support.leftovers import tagged_env
from tests.support.memo import memo_toml
from tests.support.supervised import RUN_TIMEOUT
from tests.support.telemetry import RecordingTelemetry
from tests.support.watch import Spec

pytestmark = pytest.mark.fault

#: One agent's run on this shared machine (a change -> a fork -> two model calls -> its exit).
STEP_TIMEOUT = 30.0

#: Replies with hostile strings the reactive run answers (the report's six).
HOSTILE_REPLIES = 6

#: Nesting of the too-deep arguments (the limit is agentd.models.base.MAX_TOOL_ARGUMENT_DEPTH, 64).
DEEP = 100


def _raw(body: dict[str, Any]) -> Reply:
    """A 200 whose body is written by the standard library: a lone surrogate becomes a ``\\ud800`` escape.

    (The fake's own orjson refuses to write one, as every strict encoder does.)
    """
    return Reply(200, body=json.dumps(body).encode())


def _completion(message: dict[str, Any], finish: str) -> Reply:
    return _raw(
        {
            "id": "chatcmpl-hostile",
            "object": "chat.completion",
            "model": "fake-model",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }
    )


def hostile_reply(n: int) -> Reply:
    """Lone surrogates in the text, a call id, tool names and arguments; NUL and ESC; too deep arguments."""
    # Inside the argument text: an escape that only the argument parser turns into a surrogate.
    escaped = json.dumps({"key": f"k{n}-\ud800", "value": "v\x00\x1b]52;c;aGk=\x07\u009b"})
    assert "\\ud800" in escaped
    calls = [
        (f"c1-\ud800{n}", "store__memo_set", escaped),
        # Outside it: the whole response body carries the escape (orjson refuses that body).
        ("c2", "store__memo_set", '{"key": "j' + str(n) + '-\udfff", "value": 1}'),
        ("c3", "store\ud800__memo_set", "{}"),
        ("c4", "store__memo_get", '{"key": ' + "[" * DEEP + "]" * DEEP + "}"),
    ]
    return _completion(
        {
            "role": "assistant",
            "content": f"working \ud800 on it\x00 {n}",
            "tool_calls": [
                {"id": i, "type": "function", "function": {"name": name, "arguments": args}}
                for i, name, args in calls
            ],
        },
        "tool_calls",
    )


class HostileProvider:
    """Answers each agent's first call with :func:`hostile_reply` (the first six agents), its next with text."""

    def __init__(self) -> None:
        self.hostile = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        # orjson (strict) reads every request: one lone surrogate sent back would fail the fake.
        messages = request.json["messages"]
        if messages[-1]["role"] == "tool":
            n = self.hostile
            return _completion({"role": "assistant", "content": f"done {n} \udc00\ud800"}, "stop")
        if self.hostile < HOSTILE_REPLIES:
            self.hostile += 1
            return hostile_reply(self.hostile)
        return _completion({"role": "assistant", "content": "calm"}, "stop")


def _tool_results(body: dict[str, Any]) -> dict[str, str]:
    return {m["tool_call_id"]: m["content"] for m in body["messages"] if m["role"] == "tool"}


async def test_six_replies_of_lone_surrogates_leave_the_daemon_up_and_the_breaker_closed(
    tmp_path: Path,
) -> None:
    store = tmp_path / "store.json"
    store.write_text("{}")
    servers = (
        f"[servers.store]\ncommand = {json.dumps(PY)}\n"
        f'args = ["-m", "agentd", "serve", "memo", "--file", {json.dumps(str(store))}]\n'
    )
    config, notes = memo_toml(tmp_path, "openai:gpt-fake", servers=servers)
    provider = HostileProvider()
    async with provider_server(handler=provider) as srv:
        env = tagged_env(tmp_path, OPENAI_BASE_URL=srv.url("/v1"), OPENAI_API_KEY="sk-test")
        async with run_agentd(["--config", str(config)], env=env) as a:
            await a.wait_event("ready.changed", lambda e: e["ready"], timeout=RUN_TIMEOUT)
            for n in range(1, HOSTILE_REPLIES + 2):
                edit(notes, {"n": n})
                done = await a.wait_event("subagent.exit", count=n, timeout=STEP_TIMEOUT)
                assert done["status"] == "completed", a.tail()
            a.signal(signal.SIGTERM)
            assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK, a.tail()
    assert provider.hostile == HOSTILE_REPLIES
    # The daemon never lost an agent: no crash, no restart, the breaker closed.
    assert not a.find("governor.breaker_open")
    assert not a.find("supervisor.internal_error")
    assert not a.find("model.fatal")
    assert [e["status"] for e in a.find("subagent.exit")] == ["completed"] * (HOSTILE_REPLIES + 1)
    assert a.find("supervisor.exit")[0]["counters"]["restarts"] == 0
    # Each result was published, the surrogates as U+FFFD; the seventh change reached an agent.
    assert a.out.splitlines() == [f"done {n} \ufffd\ufffd" for n in range(1, HOSTILE_REPLIES + 1)] + ["calm"]
    # The calls that could be made were made, with U+FFFD where the model put a lone surrogate.
    kept = json.loads(store.read_text())
    for n in range(1, HOSTILE_REPLIES + 1):
        assert kept[f"k{n}-\ufffd"] == "v\x00\x1b]52;c;aGk=\x07\u009b"  # NUL, ESC, C1: carried as they were
        assert kept[f"j{n}-\ufffd"] == 1
    # The others went back to the model as tool errors, in the next request of the same agent.
    answered = [r.json for r in srv.requests if r.json["messages"][-1]["role"] == "tool"]
    assert len(answered) == HOSTILE_REPLIES
    for n, body in enumerate(answered, start=1):
        results = _tool_results(body)
        assert set(results) == {f"c1-\ufffd{n}", "c2", "c3", "c4"}
        assert results["c3"].startswith("ERROR: unknown tool 'store\ufffd__memo_set'")
        assert "nested too deeply" in results["c4"]
        assistant = next(m for m in body["messages"] if m["role"] == "assistant")
        assert assistant["content"] == f"working \ufffd on it\x00 {n}"
    refused = a.find("tool.refused")
    assert [e["tool"] for e in refused] == ["store\ufffd__memo_set"] * HOSTILE_REPLIES


# ----------------------------------------------------------------------------- terminal escapes

ESC = "\x1b"
#: Sets the clipboard (OSC 52), erases the line, returns the cursor and prints a fake green INFO line.
HOSTILE_NAME = f"{ESC}]52;c;aGFja2Vk\x07{ESC}[2K\r{ESC}[32mINFO{ESC}[0m\u009b31m"
HOSTILE_URI = f"memo://notes{ESC}[2K\r{ESC}[32m12:00:00.000_INFO_supervisor.exit{ESC}]52;c;aGk=\x07\u009b"

#: What a terminal acts on: C0 controls but the newline (ESC, BEL, CR among them), DEL, and C1 in UTF-8.
TERMINAL_CONTROLS = re.compile(rb"[\x00-\x09\x0b-\x1f\x7f]|\xc2[\x80-\x9f]")


async def test_text_log_lines_show_a_hostile_tool_name_and_uri_escaped(tmp_path: Path) -> None:
    turns = [
        {
            "tool_calls": [
                {"name": HOSTILE_NAME, "arguments": {}},
                {"name": "subscribe", "arguments": {"uri": HOSTILE_URI}},
                {"name": "read_resource", "arguments": {"uri": HOSTILE_URI}},
            ]
        },
        {"text": "done"},
    ]
    config, notes = memo_toml(tmp_path, script(tmp_path, turns))
    args = ["--config", str(config), "--log-format", "text", "--verbose"]
    async with run_agentd(args, env=tagged_env(tmp_path)) as a:
        with_ready = await _wait_line(a, b"ready.changed ready=true")
        assert with_ready
        edit(notes, {"n": 1})
        await _wait_line(a, b"turn.end")  # the agent stays, waiting on what it subscribed
        a.signal(signal.SIGTERM)
        assert await a.wait_exit(RUN_TIMEOUT) == ExitCode.OK, a.tail()
    raw = b"\n".join(line.encode() for line in a.raw_stderr)
    assert TERMINAL_CONTROLS.search(raw) is None, TERMINAL_CONTROLS.search(raw)
    text = raw.decode()
    # The model's name and URI are there, as escapes a person can read: a bare value
    # escaped, a value with spaces or "=" quoted as JSON (which escapes C0 its own way).
    assert " tool=\\x1b]52;c;aGFja2Vk\\x07\\x1b[2K\\r\\x1b[32mINFO\\x1b[0m\\u009b31m " in text
    quoted = '"memo://notes\\u001b[2K\\r\\u001b[32m12:00:00.000_INFO_supervisor.exit\\u001b]52;c;aGk=\\u0007\\u009b"'
    assert f"self.subscribe agent=a1 uri={quoted} server=memo" in text
    # Every line is one of agentd's: its clock, then its level (or a traceback's indented line).
    for line in text.splitlines():
        assert re.match(r"\d\d:\d\d:\d\d\.\d{3} (DEBUG|INFO|WARNING|ERROR) |    ", line), line


async def _wait_line(a: Any, needle: bytes, timeout: float = RUN_TIMEOUT) -> str:
    """Wait for a text log line holding ``needle`` (the text format is not JSON: wait on raw lines)."""
    import trio

    with trio.move_on_after(timeout):
        while True:
            for line in a.raw_stderr:
                if needle.decode() in line:
                    return str(line)
            if a.stderr_closed:
                raise AssertionError(f"agentd exited before {needle!r}:\n{a.tail()}")
            await a._changed.wait()
    raise AssertionError(f"no line with {needle!r} within {timeout:g}s:\n{a.tail()}")


def test_check_shows_a_hostile_configuration_key_escaped(tmp_path: Path) -> None:
    import subprocess

    config = tmp_path / "agentd.toml"
    key = f"{ESC}]52;c;aGk=\x07{ESC}[2K\rINFO"
    config.write_text(f'model = "script:x.json"\n"{json.dumps(key)[1:-1]}" = 1\n')
    result = subprocess.run(
        [PY, "-m", "agentd", "check", "--config", str(config)],
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ, **tagged_env(tmp_path)},
    )
    assert TERMINAL_CONTROLS.search(result.stderr) is None, result.stderr
    assert b"\\x1b]52;c;aGk=\\x07\\x1b[2K\\rINFO" in result.stderr, result.stderr


# ----------------------------------------------------------------------------- any model output, in process

#: Characters a model can emit: any code point, lone surrogates and controls often.
_chars = (
    st.characters(exclude_categories=())
    | st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF, exclude_categories=())
    | st.sampled_from(["\x00", ESC, "\x07", "\r", "\n", "\u009b", "\u202e", "\u2028", "\ufffd", "😀"])
)
hostile_text = st.lists(_chars, max_size=30).map("".join)
#: Arguments nested ``n`` deep (the limit is 64).
nested = st.integers(0, 130).map(
    lambda n: {"key": "k", "value": functools.reduce(lambda v, _: [v], range(n), 0)}
)
json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | hostile_text
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(hostile_text, inner, max_size=3),
    max_leaves=10,
)
memo_args = st.fixed_dictionaries({"key": hostile_text, "value": json_values})
arguments = memo_args | nested | st.dictionaries(hostile_text, json_values, max_size=3) | json_values
OFFERED = ["memo__memo_set", "memo__memo_get", "read_resource", "list_resources"]
tool_names = (
    st.sampled_from(OFFERED) | hostile_text | st.integers(250, 3000).map(lambda n: "memo__memo_set" + "x" * n)
)


@st.composite
def tool_calls(draw: st.DrawFn) -> dict[str, Any]:
    """One call: an id, a name and arguments (an object, any value, or raw text that may not be JSON)."""
    args = draw(arguments)
    raw = draw(st.sampled_from(["json", "json", "object", "text"]))
    return {
        "id": draw(st.sampled_from(["c"]) | hostile_text.filter(bool)),
        "name": draw(tool_names),
        "args": args if raw != "text" else draw(hostile_text),
        "as": raw,
    }


model_turns = st.lists(
    st.fixed_dictionaries({"text": hostile_text, "calls": st.lists(tool_calls(), max_size=3)}),
    min_size=1,
    max_size=3,
)


#: Stands for a value nested 2,000 deep in an explicit example (hypothesis cannot print one).
DEEP_2000 = "<nested 2000 deep>"


def _args_text(call: dict[str, Any]) -> Any:
    if call["as"] == "object":
        return call["args"]
    return call["args"] if call["as"] == "text" else json.dumps(call["args"])


def wire_body(api: str, turn: dict[str, Any], index: int) -> dict[str, Any]:
    """``turn`` as the ``index``-th answer in ``api``'s wire format (call ids made unique in the run)."""
    calls = [{**c, "id": f"{c['id']}-{index}-{i}"} for i, c in enumerate(turn["calls"])]
    if api == "openai":
        message: dict[str, Any] = {"role": "assistant", "content": turn["text"]}
        if calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": "function",
                    "function": {"name": c["name"], "arguments": _args_text(c)},
                }
                for c in calls
            ]
        return {
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}]
        }
    if api == "anthropic":
        content: list[dict[str, Any]] = [{"type": "text", "text": turn["text"]}]
        content += [{"type": "tool_use", "id": c["id"], "name": c["name"], "input": c["args"]} for c in calls]
        return {
            "type": "message",
            "role": "assistant",
            "content": content,
            "stop_reason": "tool_use" if calls else "end_turn",
        }
    output: list[dict[str, Any]] = [
        {
            "type": "message",
            "id": f"m{index}",
            "role": "assistant",
            "content": [{"type": "output_text", "text": turn["text"]}],
        }
    ]
    output += [
        {
            "type": "function_call",
            "id": f"fc{i}",
            "call_id": c["id"],
            "name": c["name"],
            "arguments": _args_text(c),
        }
        for i, c in enumerate(calls)
    ]
    return {"status": "completed", "output": output}


def script_turn(turn: dict[str, Any], index: int) -> dict[str, Any] | None:
    """``turn`` as a ``script:`` turn, or None where a script file has no room for it (an empty name, or
    nesting no JSON reader of an operator's file takes)."""
    calls = []
    for i, c in enumerate(turn["calls"]):
        if not c["name"] or DEEP_2000 in json.dumps(c["args"]):
            return None
        call: dict[str, Any] = {"name": c["name"], "id": f"{c['id']}-{index}-{i}"}
        if isinstance(c["args"], dict) and c["as"] != "text":
            call["arguments"] = c["args"]
        else:
            call["invalid_arguments"] = c["args"] if isinstance(c["args"], str) else json.dumps(c["args"])
        calls.append(call)
    return {"text": turn["text"], "tool_calls": calls}


@dataclass
class Rig:
    """The supervisor's side in this process: the real hub (memo upstream) and a stand-in for the reactor."""

    hub: SupervisorHub
    events: trio.MemorySendChannel[Any]
    telemetry: RecordingTelemetry
    provider: ProviderServer
    answers: list[Reply] = field(default_factory=list)
    ends: list[TurnEnd] = field(default_factory=list)
    n: int = 0


async def _reactor_standin(recv: trio.MemoryReceiveChannel[Any], rig: Rig) -> None:
    """Answers what the reactor would: every usage report "go on", every turn end "exit"."""
    async for event in recv:
        if isinstance(event, UsageReported):
            event.reply.answer(UsageVerdict(id=event.report.id, proceed=True))
        elif isinstance(event, TurnEnded):
            rig.ends.append(event.end)
            event.reply.answer(NextTurn(id=event.end.id, action="exit"))


@asynccontextmanager
async def rig(tmp_path: Path) -> AsyncIterator[Rig]:
    memo = tmp_path / "memo.json"
    memo.write_text("{}")
    spec = Spec(name="memo", command=PY, args=["-m", "agentd", "serve", "memo", "--file", str(memo)])
    up_send, up_recv = trio.open_memory_channel[Any](math.inf)
    up = Upstream(spec, up_send, NullTelemetry())
    send, recv = trio.open_memory_channel[Any](100)
    telemetry = RecordingTelemetry(timeout=60)
    hub = SupervisorHub(events=send, upstreams={"memo": up}, telemetry=telemetry, offer_wakeups=False)

    def answer(request: RecordedRequest) -> Reply:
        request.json  # noqa: B018 - orjson reads it strictly: a lone surrogate sent back fails the test here
        return the.answers.pop(0) if the.answers else Reply(200, _final[request.path])

    async with provider_server(handler=answer) as srv:
        the = Rig(hub=hub, events=send, telemetry=telemetry, provider=srv)
        async with trio.open_nursery() as nursery:
            await nursery.start(up.run)
            nursery.start_soon(_reactor_standin, recv, the)
            yield the
            nursery.cancel_scope.cancel()
    up_recv.close()


#: The answer once a model's turns are used up: a plain final text, per path.
_final = {
    "/v1/chat/completions": {"choices": [{"message": {"content": "end"}, "finish_reason": "stop"}]},
    "/v1/messages": {"content": [{"type": "text", "text": "end"}], "stop_reason": "end_turn"},
    "/v1/responses": {"output": [{"type": "message", "content": [{"type": "output_text", "text": "end"}]}]},
}


async def run_child(the: Rig, model: Any) -> tuple[TurnEnd, list[MessageFrame]]:
    """One agent through the real loop, links and channels (as ``agentd.agent.child.amain`` wires them)."""
    the.n += 1
    agent = f"a{the.n}"
    mcp_child, mcp_sup = trio.socket.socketpair()
    ctl_child, ctl_sup = trio.socket.socketpair()
    journal: list[MessageFrame] = []

    async def record(frames: Any) -> None:
        journal.extend(frames)

    ends = len(the.ends)
    streams = [trio.SocketStream(s) for s in (mcp_child, mcp_sup, ctl_child, ctl_sup)]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve_child, the.hub, agent, streams[1])
        control_frames = FrameStream(streams[3], max_line=MAX_CHILD_FRAME_BYTES)
        nursery.start_soon(
            functools.partial(
                serve_control,
                agent,
                control_frames,
                events=the.events,
                telemetry=the.telemetry,
                journal=record,
            )
        )
        control = ControlLink(FrameStream(streams[2], max_line=MAX_SUPERVISOR_FRAME_BYTES))
        nursery.start_soon(control.run, nursery.cancel_scope)
        specs = [
            ToolSpec(name=s["name"], description=s["description"], input_schema=s["input_schema"])
            for s in the.hub.tool_specs()
        ]
        async with Client(stream_transport(streams[0]), mode="2026-07-28", cache=None) as client:
            await run_agent(
                model, SelfMcpLink(client, control), system=None, instruction="go", tools=specs, journal=True
            )
        await model.aclose()
        nursery.cancel_scope.cancel()
    for stream in streams:
        await stream.aclose()
    (end,) = the.ends[ends:]
    return end, journal


def assert_each_call_made_or_refused(the: Rig, agent: str, end: TurnEnd, journal: list[MessageFrame]) -> None:
    """Every call the model asked for has one result; a result that is no tool error was made by the hub."""
    calls = [c for m in journal if m.role == "assistant" for c in m.tool_calls]
    results = [m for m in journal if m.role == "tool"]
    answered = {m.tool_call_id for m in results}
    assert len(answered) == len(results), "a call answered twice"
    # A turn that stalls stops before the rest of that reply's calls.
    if end.status != "stalled":
        assert {c.id for c in calls} == answered
    offered = {s["name"] for s in the.hub.tool_specs()}
    forwarded = [c for c in calls if c.id in answered and c.error is None and c.name in offered]
    made = the.telemetry.find("tool.call", agent=agent)
    assert len(made) == len(forwarded), (made, forwarded)
    for c in calls:
        if c.id in answered and c not in forwarded:
            (result,) = (m for m in results if m.tool_call_id == c.id)
            assert result.is_error, result


#: The model spec of each wire format (the real factory builds the real client).
APIS = {"openai": "openai:m", "anthropic": "anthropic:m", "responses": "openai-responses:m"}


async def test_any_model_output_through_the_real_loop_and_hub_makes_each_call_or_a_tool_error(
    tmp_path: Path,
) -> None:
    async with rig(tmp_path) as the:
        token = trio.lowlevel.current_trio_token()

        async def one(api: str, turns: list[dict[str, Any]]) -> None:
            if api == "script":
                played = [script_turn(t, i) for i, t in enumerate(turns)]
                if any(t is None for t in played):
                    return
                spec = script(tmp_path, played, then="stop")  # type: ignore[arg-type]
            else:
                the.answers[:] = [_raw_reply(wire_body(api, t, i)) for i, t in enumerate(turns)]
                spec = APIS[api]
            srv = the.provider
            env = {
                "OPENAI_BASE_URL": srv.url("/v1"),
                "OPENAI_API_KEY": "k",
                "ANTHROPIC_BASE_URL": srv.base_url,
                "ANTHROPIC_API_KEY": "k",
            }
            model = make_model(spec, env=env, max_attempts=1)
            end, journal = await run_child(the, model)
            assert end.status in ("completed", "stalled"), end
            assert_each_call_made_or_refused(the, f"a{the.n}", end, journal)

        @settings(
            max_examples=int(os.environ.get("AGENTD_FUZZ_EXAMPLES", "60")),
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
            deadline=None,
        )
        @given(api=st.sampled_from(["openai", "anthropic", "responses", "script"]), turns=model_turns)
        @example(
            api="openai",
            turns=[
                {
                    "text": "\ud800",
                    "calls": [
                        {
                            "id": "\udfff",
                            "name": "memo__memo_set\ud800",
                            "args": {"key": "\ud800"},
                            "as": "json",
                        }
                    ],
                }
            ],
        )
        @example(
            api="anthropic",
            turns=[
                {
                    "text": "",
                    "calls": [
                        {
                            "id": "c",
                            "name": "memo__memo_set",
                            "args": {"key": "k", "value": DEEP_2000},
                            "as": "object",
                        }
                    ],
                }
            ],
        )
        @example(
            api="openai",
            turns=[
                {
                    "text": "x",
                    "calls": [
                        {"id": "c", "name": "memo__memo_set", "args": "x" * (5 * 1024 * 1024), "as": "text"}
                    ],
                }
            ],
        )
        @example(
            api="openai", turns=[{"text": "", "calls": [{"id": "c", "name": "", "args": {}, "as": "json"}]}]
        )
        @example(
            api="responses",
            turns=[
                {
                    "text": "\x00\x1b",
                    "calls": [
                        {
                            "id": "c",
                            "name": "memo__memo_get",
                            "args": {"key": 2**70, "value": float("nan")},
                            "as": "json",
                        }
                    ],
                }
            ],
        )
        def check(api: str, turns: list[dict[str, Any]]) -> None:
            trio.from_thread.run(one, api, turns, trio_token=token)

        await trio.to_thread.run_sync(check)
    assert not the.telemetry.find("supervisor.internal_error")


def _raw_reply(body: dict[str, Any]) -> Reply:
    """A 200 written by the standard library (lone surrogates as escapes, NaN as the ``NaN`` token).

    :data:`DEEP_2000` becomes an array nested 2,000 deep (no encoder writes one).
    """
    text = json.dumps(body).replace(json.dumps(DEEP_2000), "[" * 2000 + "0" + "]" * 2000)
    return Reply(200, body=text.encode())

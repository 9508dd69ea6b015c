"""Fuzz targets for the parsers agentd owns that are not fuzzed elsewhere.

Already fuzzed (not repeated here): TOML documents, environment values, route
specs and subscriptions (``tests/config/test_config_fuzz.py``), durations
(``tests/core/test_durations.py``), event-log bodies
(``tests/watches/test_watch_fuzz.py``), well-formed JSON streams under any
chunking (``tests/servers/test_jsonstream.py``), glob matching against a
reference (``tests/routing/test_glob.py``).

Here, each target gets arbitrary input and must either return a value or raise
its documented error type — never anything else:

=========================  ==============================================  ==============
parser                     entry point                                     documented error
=========================  ==============================================  ==============
sizes                      ``agentd.core.durations.parse_size``                 ``ValueError``
script files               ``agentd.models.script.parse_script``           ``ConfigError``
inbox lines                ``agentd.servers._inboxlog.InboxLog.feed``      none (ERROR events in band)
kubectl stream chunks      ``agentd.servers._jsonstream.JsonStreamParser``  none (``Malformed`` items)
glob patterns              ``agentd.triggers.glob.compile_glob``           ``ValueError``
cron                       ``agentd.triggers.timer.validate_cron``         none (returns a message)
MCP lines from a server    ``agentd.upstream.stdio.StdioTransport``        none (garbage counted)
=========================  ==============================================  ==============

The example budget is the one in ``tests/conftest.py`` (100 per target in CI).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import mcp_types as types
import orjson
import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.core.durations import parse_size
from agentd.core.errors import ConfigError
from agentd.models.script import Script, parse_script
from agentd.observe.telemetry import NullTelemetry
from agentd.servers._inboxlog import InboxLog, cursor_from_json
from agentd.servers._jsonstream import JsonStreamParser, Malformed
from agentd.triggers.glob import Glob, compile_glob
from agentd.triggers.timer import validate_cron
from agentd.upstream.stdio import StdioTransport

pytestmark = pytest.mark.fault

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


def outcome(error: type[Exception], fn: Any, *args: Any, **kwargs: Any) -> tuple[Any, str | None]:
    """``(fn(...), None)``, or ``(None, message)`` when it raised ``error`` (anything else propagates)."""
    try:
        return fn(*args, **kwargs), None
    except error as exc:
        return None, str(exc)


# ----------------------------------------------------------------------------- sizes

size_words = st.sampled_from(
    ["", "B", "KB", "MB", "GB", "TB", "K", "M", "KiB", "MiB", "GiB", "k", "b", " ", "-", "."]
)


@given(
    st.text(max_size=30)
    | st.tuples(st.integers(-(10**20), 10**20) | st.floats(), size_words).map(lambda p: f"{p[0]}{p[1]}")
    | st.integers()
    | st.floats()
    | st.booleans()
    | st.none()
)
def test_parse_size_returns_bytes_or_raises_value_error(value: Any) -> None:
    size, error = outcome(ValueError, parse_size, value)
    if error is not None:
        assert error  # a message that says what to write
        return
    assert isinstance(size, int)
    assert not isinstance(size, bool)
    assert size >= 0


# ----------------------------------------------------------------------------- script files

turn_keys = st.sampled_from(["text", "tool_calls", "refusal", "usage", "latency_ms", "stop", "bogus"])
call_keys = st.sampled_from(["name", "arguments", "id", "invalid_arguments", "bogus"])
calls = st.lists(st.dictionaries(call_keys, json_values, max_size=4), max_size=3)
turns = st.dictionaries(turn_keys, json_values | calls, max_size=4)
scripts = (
    st.fixed_dictionaries(
        {},
        optional={
            "turns": st.lists(turns, max_size=3) | json_values,
            "then": st.sampled_from(["no_reply", "repeat", "stop", "never"]) | json_values,
            "description": json_values,
        },
    )
    | json_values
)


@given(scripts)
def test_parse_script_returns_a_script_or_raises_config_error(data: Any) -> None:
    parsed, error = outcome(ConfigError, parse_script, data, source="fuzz.json", spec="script:fuzz.json")
    if error is not None:
        assert "fuzz.json" in error  # the message names the file
        return
    assert isinstance(parsed, Script)


# ----------------------------------------------------------------------------- inbox lines

inbox_lines = (
    st.binary(max_size=60)
    | json_values.map(lambda v: orjson.dumps(v))
    | st.fixed_dictionaries(
        {"id": st.text(max_size=8) | st.integers(0, 10**6), "text": st.text(max_size=20)},
        optional={"urgent": json_values, "from": json_values, "ts": json_values},
    ).map(lambda v: orjson.dumps(v))
)


@given(
    st.lists(inbox_lines, max_size=8),
    st.sampled_from([b"\n", b"\r\n", b""]),
    st.integers(0, 400),
)
def test_inbox_feed_never_raises(lines: list[bytes], end: bytes, cut: int) -> None:
    data = b"\n".join(lines) + end
    log = InboxLog("ops", "inbox://ops")
    fed = log.feed(data[:cut], at_eof=cut >= len(data))
    fed2 = log.feed(data[log.head :], at_eof=True)
    log.finish_drain()
    assert 0 <= log.head <= len(data)
    assert all(
        isinstance(e.event, dict) and isinstance(e.event["seq"], int) for e in fed.entries + fed2.entries
    )
    # Acknowledge everything shown; a restart from the cursor offers none of it again.
    log.ack_seqs([e.seq for e in log.window()])
    cursor, ledger = cursor_from_json(log.snapshot())
    again = InboxLog("ops", "inbox://ops", cursor, ledger)
    again.feed(data[again.head :], at_eof=True)
    again.finish_drain()
    assert [e for e in again.window() if e.kind == "MESSAGE"] == []


# ----------------------------------------------------------------------------- kubectl stream chunks


@given(st.lists(st.binary(max_size=40) | json_values.map(lambda v: orjson.dumps(v)), max_size=8))
def test_json_stream_parser_yields_values_or_malformed_items(chunks: list[bytes]) -> None:
    parser = JsonStreamParser(max_value_bytes=256)
    out: list[Any] = []
    for chunk in chunks:
        out += parser.feed(chunk)
    out += parser.close()
    for item in out:
        assert isinstance(item, Malformed | dict | list)
        if isinstance(item, Malformed):
            assert item.reason
            assert item.size >= 0
    assert parser.pending == 0


# ----------------------------------------------------------------------------- globs and cron


@given(st.text(max_size=40), st.booleans(), st.text(max_size=40))
def test_compile_glob_returns_a_glob_or_raises_value_error(pattern: str, exact: bool, uri: str) -> None:
    glob, error = outcome(ValueError, compile_glob, pattern, exact=exact)
    if error is not None:
        assert repr(pattern) in error or "empty" in error
        return
    assert isinstance(glob, Glob)
    assert isinstance(glob.match(uri), bool)


cron_fields = st.sampled_from(
    ["*", "*/5", "0", "59", "60", "1-5", "MON", "jan", "?", "L", "5-1", ",", "", "-1"]
)


@given(
    st.text(max_size=30)
    | st.lists(cron_fields, min_size=1, max_size=7).map(" ".join)
    | st.sampled_from(["@hourly", "@reboot", "@daily", "@", "@every 5m"])
)
def test_validate_cron_returns_none_or_a_message(expr: str) -> None:
    verdict = validate_cron(expr)
    assert verdict is None or (isinstance(verdict, str) and repr(expr) in verdict)


# ----------------------------------------------------------------------------- MCP lines from a server

SENTINEL = {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "end"}}

mcp_shaped = st.fixed_dictionaries(
    {},
    optional={
        "jsonrpc": st.sampled_from(["2.0", "1.0"]) | json_values,
        "id": st.integers(-(2**63), 2**63 - 1) | st.text(max_size=5) | json_values,
        "method": st.sampled_from(["ping", "notifications/progress", "tools/call"]) | json_values,
        "params": json_values,
        "result": json_values,
        "error": st.fixed_dictionaries(
            {"code": st.integers(-(2**31), 2**31), "message": st.text(max_size=10)}
        )
        | json_values,
    },
).map(lambda v: orjson.dumps(v))
server_lines = st.lists(
    (st.binary(max_size=80) | json_values.map(lambda v: orjson.dumps(v)) | mcp_shaped).map(
        lambda b: b.replace(b"\n", b" ")
    ),
    max_size=12,
)


def _parse(line: bytes) -> Any:
    """The message a line is, or None (the same validation agentd applies)."""
    try:
        return types.jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValueError:
        return None


async def _pipe_through_transport(path: Path) -> tuple[list[Any], int, str | None]:
    """Run ``cat path`` as an MCP server through agentd's stdio transport; collect what it delivers."""
    telemetry = NullTelemetry()
    transport = StdioTransport("fuzz", "cat", [str(path)], telemetry=telemetry, max_line_bytes=4096)
    delivered: list[Any] = []
    with trio.fail_after(10):
        async with transport as (read_stream, _write_stream):
            async for message in read_stream:  # type: ignore[attr-defined]
                delivered.append(message.message)
    return delivered, telemetry.counters.get("upstream.stdout_garbage", 0), transport.lost_reason


@pytest.mark.process  # the transport under test reads a child process
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(server_lines)
def test_stdio_transport_delivers_every_message_and_counts_every_other_line(
    tmp_path: Path, lines: list[bytes]
) -> None:
    sentinel = json.dumps(SENTINEL).encode()
    path = tmp_path / "stdout.jsonl"
    path.write_bytes(b"\n".join([*lines, sentinel]) + b"\n")
    try:
        delivered, garbage, lost = trio.run(_pipe_through_transport, path)
    finally:
        path.unlink()
    nonblank = [ln for ln in lines if ln.strip()]
    messages = [m for m in map(_parse, nonblank) if m is not None]
    # Responses to requests never sent are dropped and counted apart (upstream.unknown_response).
    others = [m for m in messages if not isinstance(m, types.JSONRPCResponse | types.JSONRPCError)]
    assert [m.model_dump() for m in delivered[:-1]] == [m.model_dump() for m in others]
    assert garbage == len(nonblank) - len(messages)
    assert delivered[-1].method == "notifications/message"  # the connection survived every line
    assert lost is not None  # ``cat`` exits at the end: that, and only that, ends the stream
    assert "exited with status 0" in lost or "closed its stdout" in lost

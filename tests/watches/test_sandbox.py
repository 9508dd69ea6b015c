"""The on_event filter sandbox: outcomes, persistence, catalog, denial, limits, validation.

These tests run real Monty workers. The regression suite at the bottom uses the
real clock (time limits are measured by the sandbox itself), with short limits.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
import trio.lowlevel

from agentd.core.errors import SandboxError
from agentd.watches.limits import WatchLimits
from agentd.watches.sandbox import (
    MAX_LINE_CHARS,
    MAX_LINES_PER_EVENT,
    WATCHDOG_GRACE_SECS,
    FilterPool,
    FilterRejected,
    WatchFilter,
    call_on_loop,
    check_source,
    run_deadline,
    sample_event,
)

#: Short per-event time limit so the limit tests stay fast.
FAST = WatchLimits(filter_time_secs=0.4, filter_memory_bytes=32 * 2**20)

EVENT = {
    "watch": "cm",
    "uri": "u://cm",
    "type": "ADDED",
    "seq": 3,
    "object": {"metadata": {"name": "a", "namespace": "default"}},
    "old": None,
    "changed": None,
}


@pytest.fixture(scope="module")
def pool():
    with FilterPool(max_sessions=8) as p:
        yield p


def make(pool, source, **kw):
    kw.setdefault("limits", FAST)
    return WatchFilter(source, pool=pool, **kw)


# ------------------------------------------------------------------ outcomes


async def test_none_without_print_drops(pool):
    f = make(pool, 'None if event["type"] == "ADDED" else "x"')
    out = await f.run(EVENT)
    assert out.kind == "dropped"
    assert out.lines == ()
    f.close()


async def test_str_is_one_line_and_other_values_compact_json(pool):
    f = make(
        pool, "m = event[\"object\"][\"metadata\"]\nf\"{event['type'].lower()} {m['namespace']}/{m['name']}\""
    )
    assert (await f.run(EVENT)).lines == ("added default/a",)
    g = make(pool, '{"t": event["type"], "n": [1, 2]}')
    assert (await g.run(EVENT)).lines == ('{"n":[1,2],"t":"ADDED"}',)
    h = make(pool, "False")
    assert (await h.run(EVENT)).lines == ("false",)
    for x in (f, g, h):
        x.close()


async def test_printed_output_becomes_lines_before_the_value(pool):
    f = make(pool, 'print("first")\nprint()\nprint("second\\nthird")\n"value"')
    out = await f.run(EVENT)
    assert out.kind == "lines"
    assert out.lines == ("first", "second", "third", "value")
    f.close()


async def test_huge_values_are_capped(pool):
    f = make(pool, '"x" * 100_000')
    (line,) = (await f.run(EVENT)).lines
    assert len(line) == MAX_LINE_CHARS
    assert line.endswith("…")
    g = make(pool, "for i in range(50):\n    print(i)")
    out = await g.run(EVENT)
    assert len(out.lines) == MAX_LINES_PER_EVENT
    assert out.lines[-1] == f"+{50 - MAX_LINES_PER_EVENT + 1} more lines"
    f.close()
    g.close()


async def test_variables_persist_across_events(pool):
    f = make(pool, "try:\n    n += 1\nexcept NameError:\n    n = 1\nf'event {n}' if n % 2 else None")
    kinds = [(await f.run(EVENT)) for _ in range(3)]
    assert [(o.kind, o.lines) for o in kinds] == [
        ("lines", ("event 1",)),
        ("dropped", ()),
        ("lines", ("event 3",)),
    ]
    f.close()


async def test_run_time_error_is_reported_with_position_and_next_event_works(pool):
    f = make(pool, 'x = 1\nevent["nope"] if event["type"] == "BAD" else "ok"')
    bad = await f.run({**EVENT, "type": "BAD"})
    assert bad.kind == "error"
    assert bad.error is not None
    assert "at line 2, column 1: KeyError" in bad.error
    assert not bad.session_reset
    assert (await f.run(EVENT)).lines == ("ok",)
    f.close()


# ------------------------------------------------------------------- catalog


async def test_catalog_call_reenters_trio(pool):
    reads: list[str] = []

    async def read_resource_async(uri: str) -> dict:
        await trio.lowlevel.checkpoint()
        reads.append(uri)
        return {"uri": uri, "items": [1, 2, 3]}

    def read_resource(uri: str) -> dict:
        return trio.from_thread.run(read_resource_async, uri)

    f = make(pool, 'len(read_resource(uri=event["uri"])["items"])', catalog={"read_resource": read_resource})
    out = await f.run(EVENT)
    assert out.lines == ("3",)
    assert out.tool_calls == 1
    assert reads == ["u://cm"]
    f.close()


async def test_catalog_errors_reach_the_filter_as_exceptions(pool):
    def read_resource(uri: str) -> dict:
        raise KeyError(uri)

    def list_resources() -> list:
        raise OSError("server down")

    f = make(
        pool,
        "try:\n    read_resource('x')\nexcept KeyError as e:\n    a = 'key'\n"
        "try:\n    list_resources()\nexcept RuntimeError as e:\n    b = str(e)\nf'{a} {b}'",
        catalog={"read_resource": read_resource, "list_resources": list_resources},
    )
    assert (await f.run(EVENT)).lines == ("key list_resources failed: server down",)
    f.close()


async def test_filter_is_denied_a_mutating_tool_without_host_side_effect(pool):
    calls: list[tuple] = []

    def memo_set(key: str, value: str) -> str:  # would mutate the server
        calls.append((key, value))
        return "ok"

    f = make(
        pool,
        'memo_set(key="k", value="v")',
        catalog={"memo_set": memo_set, "read_resource": lambda uri: uri},
        denied={"memo_set"},
    )
    out = await f.run(EVENT)
    assert out.kind == "error"
    assert out.error is not None
    assert "called 'memo_set', which a watch filter may not use: filters are read-only" in out.error
    assert "(available: read_resource)" in out.error
    assert calls == []
    f.close()


async def test_watch_start_is_always_denied_even_when_caught(pool):
    f = make(
        pool, "try:\n    watch_start(name='x', uri='u://y')\nexcept PermissionError:\n    pass\n'sneaky'"
    )
    out = await f.run(EVENT)
    assert out.kind == "error"
    assert "called 'watch_start'" in (out.error or "")
    f.close()


async def test_tool_call_limit_per_event(pool):
    calls: list[str] = []

    def read_resource(uri: str) -> str:
        calls.append(uri)
        return uri

    f = make(
        pool,
        'if event["type"] == "MANY":\n    [read_resource(str(i)) for i in range(11)]\n"done"',
        catalog={"read_resource": read_resource},
    )
    out = await f.run({**EVENT, "type": "MANY"})
    assert out.kind == "error"
    assert "more than 10 catalog calls for one event" in (out.error or "")
    assert len(calls) == 10
    assert out.tool_calls == 10
    # The budget is per event: the next event may call again.
    assert (await f.run(EVENT)).lines == ("done",)
    f.close()


async def test_run_does_not_block_the_reactor(pool):
    f = make(pool, "while True:\n    pass")
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.sleep(0.02)
            ticks += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ticker)
        out = await f.run(EVENT)
        nursery.cancel_scope.cancel()
    assert out.kind == "error"
    assert ticks >= 5
    f.close()


async def test_closed_filter_reports_error(pool):
    f = make(pool, '"x"')
    await f.aclose()
    out = await f.run(EVENT)
    assert out.kind == "error"
    assert out.error == "the watch filter is closed"


# ---------------------------------------------------------------- validation


def fmt(event):  # what a model passes when it hands over a function object
    return event


@pytest.mark.parametrize(
    ("source", "match"),
    [
        (fmt, r"must be Python source text, not a function .*pass the body as a string"),
        ("<function 'fmt' at 0x7f3a>", r"not a function"),
        (42, r"must be Python source text \(a str\), got int 42"),
        ({"code": "x"}, r"got dict"),
        ("   \n", r"on_event is empty"),
    ],
)
def test_check_source_refuses_non_text(source, match):
    with pytest.raises(FilterRejected, match=match):
        check_source(source)


def test_validate_accepts_missing_keys_and_returns_text(pool):
    src = 'event["object"]["spec"]["nope"]'
    assert pool.validate(src, limits=FAST) == src


def test_validate_syntax_error_has_line_and_column(pool):
    with pytest.raises(FilterRejected, match=r"syntax error at line 2, column 7") as info:
        pool.validate("x = 1\ndef f(:\n  pass", limits=FAST)
    assert (info.value.line, info.value.column) == (2, 7)
    assert isinstance(info.value, SandboxError)


def test_validate_name_error_has_line_and_column_and_hint(pool):
    with pytest.raises(
        FilterRejected, match=r"at line 1, column 1: NameError: name 'fmt' is not defined"
    ) as info:
        pool.validate("fmt", limits=FAST, catalog_names=["read_resource"])
    assert "`event`, `read_resource`" in str(info.value)
    assert "looks like a function name" in str(info.value)
    assert (info.value.line, info.value.column) == (1, 1)


def test_validate_dry_run_does_not_reach_the_catalog_and_refuses_denied_calls(pool):
    assert pool.validate('read_resource("u://x")', limits=FAST, catalog_names=["read_resource"])
    with pytest.raises(
        FilterRejected, match=r"calls 'memo_set' at line 1, column 1, which a watch filter may not use"
    ):
        pool.validate('memo_set("k", "v")', limits=FAST, denied=["memo_set"])
    with pytest.raises(FilterRejected, match=r"calls 'watch_start'"):
        pool.validate('watch_start(name="a", uri="b")', limits=FAST)


@pytest.mark.parametrize(
    ("source", "name"),
    [
        ('try:\n    ctl__ctl_set(v="x")\nexcept Exception:\n    pass\n"ok"', "ctl__ctl_set"),
        ('try:\n    ctl__ctl_set(v="x")\nexcept PermissionError as e:\n    str(e)', "ctl__ctl_set"),
        ("try:\n    watch_start(name='a', uri='b')\nexcept BaseException:\n    None", "watch_start"),
        (
            "def quiet(f):\n    try:\n        return f(key='k', value=1)\n    except Exception:\n"
            "        return None\nquiet(ctl__ctl_set)\n'fine'",
            "ctl__ctl_set",
        ),
    ],
)
def test_validate_refuses_a_denied_call_even_when_the_filter_catches_the_refusal(pool, source, name):
    with pytest.raises(
        FilterRejected,
        match=rf"calls '{name}', which a watch filter may not use \(the call was refused even though "
        r"the filter caught the error\)",
    ):
        pool.validate(source, limits=FAST, catalog_names=["read_resource"], denied=["ctl__ctl_set"])


async def test_avalidate_runs_in_a_thread(pool):
    with pytest.raises(FilterRejected, match=r"NameError"):
        await pool.avalidate("undefined_thing + 1", limits=FAST)


def test_sample_event_shapes():
    assert sample_event(shape="state")["key"] == "sample"
    assert sample_event()["seq"] == 1


def test_closed_pool_is_a_clear_error():
    p = FilterPool()
    with pytest.raises(SandboxError, match=r"the filter pool is closed"):
        p.validate("1")


# ------------------------------------------------ sandbox regression suite


@pytest.mark.realclock
async def test_open_cannot_touch_host_files(pool, tmp_path: Path):
    target = tmp_path / "escape.txt"
    f = make(pool, f"open({str(target)!r}, 'w').write('pwned')\n'wrote'")
    out = await f.run(EVENT)
    assert out.kind == "error"
    assert "PermissionError" in (out.error or "")
    assert not target.exists()
    f2 = make(pool, "open('/etc/hostname').read()")
    assert (await f2.run(EVENT)).kind == "error"
    f.close()
    f2.close()


@pytest.mark.realclock
@pytest.mark.parametrize(
    ("source", "error"),
    [
        ("import socket\nsocket.socket()", "ModuleNotFoundError: No module named 'socket'"),
        ("import subprocess", "ModuleNotFoundError"),
        ("().__class__.__base__.__subclasses__()", "AttributeError"),
        ("import os\nos.environ['HOME']", "'os.environ' is not supported"),
        ("__import__('os').system('touch /tmp/agentd-escape')", "NameError"),
    ],
)
async def test_escapes_are_refused_and_the_watch_keeps_working(pool, source, error):
    f = make(pool, f"if event['type'] == 'EVIL':\n    {source.replace(chr(10), chr(10) + '    ')}\n'fine'")
    out = await f.run({**EVENT, "type": "EVIL"})
    assert out.kind == "error"
    assert error in (out.error or "")
    assert (await f.run(EVENT)).lines == ("fine",)
    assert not await trio.Path("/tmp/agentd-escape").exists()
    f.close()


@pytest.mark.realclock
async def test_sleep_returns_at_once(pool):
    f = make(pool, "import time\ntime.sleep(3600)\n'awake'")
    started = time.monotonic()
    out = await f.run(EVENT)
    assert out.lines == ("awake",)
    assert time.monotonic() - started < 1.0
    f.close()


@pytest.mark.realclock
async def test_infinite_loop_stops_at_the_limit_and_next_event_works(pool):
    f = make(
        pool,
        "try:\n    n += 1\nexcept NameError:\n    n = 1\n"
        "if event['type'] == 'LOOP':\n    while True:\n        pass\nf'n={n}'",
    )
    assert (await f.run(EVENT)).lines == ("n=1",)
    started = time.monotonic()
    out = await f.run({**EVENT, "type": "LOOP"})
    elapsed = time.monotonic() - started
    assert out.kind == "error"
    assert "stopped after the 0.4 s limit per event" in (out.error or "")
    assert "variables were reset" in (out.error or "")
    assert out.session_reset
    assert 0.35 <= elapsed < 2.0
    # Fresh session: the counter starts again.
    assert (await f.run(EVENT)).lines == ("n=1",)
    assert f.resets == 1
    f.close()


@pytest.mark.realclock
async def test_huge_allocation_is_stopped_and_next_event_gets_a_fresh_session(pool):
    f = make(
        pool,
        "try:\n    n += 1\nexcept NameError:\n    n = 1\n"
        "if event['type'] == 'BIG':\n    blob = 'x' * (1024 ** 3)\nf'n={n}'",
    )
    assert (await f.run(EVENT)).lines == ("n=1",)
    started = time.monotonic()
    out = await f.run({**EVENT, "type": "BIG"})
    assert time.monotonic() - started < 2.0
    assert out.kind == "error"
    assert "stopped at the 32 MiB memory limit" in (out.error or "")
    assert out.session_reset
    assert (await f.run(EVENT)).lines == ("n=1",)
    f.close()


@pytest.mark.realclock
async def test_runaway_recursion_is_stopped(pool):
    f = make(pool, "def r(n):\n    return r(n + 1)\nr(0) if event['type'] == 'REC' else 'ok'")
    out = await f.run({**EVENT, "type": "REC"})
    assert out.kind == "error"
    assert "RecursionError" in (out.error or "")
    assert (await f.run(EVENT)).lines == ("ok",)
    f.close()


async def test_run_batch_matches_run_per_event(pool):
    f = make(
        pool, "try:\n    n += 1\nexcept NameError:\n    n = 1\nf'{n} {event[\"type\"]}' if n != 2 else None"
    )
    outs = await f.run_batch([EVENT, EVENT, {**EVENT, "type": "DELETED"}])
    assert [(o.kind, o.lines) for o in outs] == [
        ("lines", ("1 ADDED",)),
        ("dropped", ()),
        ("lines", ("3 DELETED",)),
    ]
    assert await f.run_batch([]) == []
    await f.aclose()
    (closed,) = await f.run_batch([EVENT])
    assert closed.kind == "error"


# ------------------------------------- time in catalog calls counts toward the limit

#: Slack on wall-time upper bounds for a shared, loaded 2-core machine.
SLACK_S = 1.5


def slow_catalog(seconds: float = 30.0) -> dict:
    """A read-only tool that answers after ``seconds``, waited for on the trio loop as agentd does."""

    async def answer_late() -> str:
        await trio.sleep(seconds)
        return "late"

    def slow(**_kwargs: object) -> str:
        return call_on_loop(answer_late, cap=60.0)

    return {"slow": slow}


COUNTER = "try:\n    n += 1\nexcept NameError:\n    n = 1\n"


@pytest.mark.realclock
async def test_time_waiting_for_tool_calls_counts_toward_the_limit(pool):
    """Four calls to a tool that takes 30 s: the event ends at the 0.4 s limit, not after 2 minutes."""
    f = make(
        pool,
        COUNTER + "if event['type'] == 'SLOW':\n    for i in range(4):\n        slow()\nf'n={n}'",
        catalog=slow_catalog(),
    )
    started = time.monotonic()
    out = await f.run({**EVENT, "type": "SLOW"})
    elapsed = time.monotonic() - started
    assert out.kind == "error"
    assert out.error == (
        "on_event stopped after the 0.4 s limit per event (time spent in tool calls counts); "
        "it ran out while waiting for 'slow'"
    )
    assert 0.35 <= elapsed < 0.4 + SLACK_S
    assert out.tool_calls == 1
    assert not out.session_reset  # stopped at a call boundary: the variables are intact
    assert (await f.run(EVENT)).lines == ("n=2",)
    f.close()


@pytest.mark.realclock
async def test_many_short_tool_calls_add_up_to_the_limit(pool):
    f = make(pool, "for i in range(50):\n    slow()\n'done'", catalog=slow_catalog(0.05))
    started = time.monotonic()
    out = await f.run(EVENT)
    elapsed = time.monotonic() - started
    assert out.kind == "error"
    assert "stopped after the 0.4 s limit per event (time spent in tool calls counts)" in (out.error or "")
    assert 0.35 <= elapsed < 0.4 + SLACK_S
    assert 4 <= out.tool_calls <= 10
    f.close()


@pytest.mark.realclock
async def test_catching_the_timeout_does_not_escape_the_limit(pool):
    f = make(pool, "try:\n    slow()\nexcept TimeoutError:\n    pass\n'made it'", catalog=slow_catalog())
    started = time.monotonic()
    out = await f.run(EVENT)
    assert time.monotonic() - started < 0.4 + SLACK_S
    assert out.kind == "error"
    assert "stopped after the 0.4 s limit per event" in (out.error or "")
    assert out.lines == ()
    f.close()


@pytest.mark.realclock
async def test_computing_on_after_a_caught_timeout_is_stopped_by_the_watchdog(pool):
    limit = 1.0
    f = make(
        pool,
        COUNTER + "if event['type'] == 'EVIL':\n    try:\n        slow()\n    except TimeoutError:\n"
        "        pass\n    while True:\n        pass\nf'n={n}'",
        catalog=slow_catalog(),
        limits=WatchLimits(filter_time_secs=limit),
    )
    assert (await f.run(EVENT)).lines == ("n=1",)
    started = time.monotonic()
    out = await f.run({**EVENT, "type": "EVIL"})
    elapsed = time.monotonic() - started
    assert out.kind == "error"
    # Stopped by the watchdog at the deadline plus the grace (Monty's own clock, which
    # does not count the wait, would have let it compute for another second).
    assert out.error == (
        "on_event stopped after the 1 s limit per event (time spent in tool calls counts); it ran out "
        f"while waiting for 'slow' and went on running, so its sandbox was stopped {WATCHDOG_GRACE_SECS:g} s "
        "later; the filter's variables were reset"
    )
    assert out.session_reset
    assert limit + WATCHDOG_GRACE_SECS * 0.9 <= elapsed < limit + WATCHDOG_GRACE_SECS + SLACK_S
    assert (await f.run(EVENT)).lines == ("n=1",)  # a fresh session
    f.close()


async def test_catalog_functions_see_the_run_deadline(pool):
    seen: list[float | None] = []

    def probe() -> str:
        seen.append(run_deadline())
        return "ok"

    f = make(pool, "probe()", catalog={"probe": probe})
    before = time.monotonic()
    assert (await f.run(EVENT)).lines == ("ok",)
    [deadline] = seen
    assert deadline is not None
    assert before + 0.4 <= deadline <= time.monotonic() + 0.4
    assert run_deadline() is None  # outside a run
    f.close()


async def test_a_filter_waiting_on_a_tool_does_not_hold_up_other_filters(pool):
    """Four filters blocked in a tool call; a fifth (another watch, any session) runs at once."""
    patient = WatchLimits(filter_time_secs=60.0)
    gate = trio.Event()
    inside = 0
    all_inside = trio.Event()

    async def wait_gate() -> str:
        nonlocal inside
        inside += 1
        if inside == 4:
            all_inside.set()
        await gate.wait()
        return "open"

    def gate_wait() -> str:
        return call_on_loop(wait_gate, cap=60.0)

    blocked = [make(pool, "gate_wait()", limits=patient, catalog={"gate_wait": gate_wait}) for _ in range(4)]
    other = make(pool, "'other ' + event['type']", limits=patient)
    outcomes: list[tuple[str, ...]] = []

    async def run_blocked(f: WatchFilter) -> None:
        outcomes.append((await f.run(EVENT)).lines)

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            for f in blocked:
                nursery.start_soon(run_blocked, f)
            await all_inside.wait()
            assert (await other.run(EVENT)).lines == ("other ADDED",)
            assert outcomes == []  # the four are still waiting
            gate.set()
    assert outcomes == [("open",)] * 4
    for f in [*blocked, other]:
        f.close()

"""Upstream fault handling against real server processes: crashes, hangs, bad output."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import psutil
import pytest
import trio

from agentd.core.errors import ServerUnavailable, UpstreamError
from agentd.events import (
    ResourceChanged,
    ServerState,
    ServerStateChanged,
    SubscriptionStateChanged,
)
from agentd.observe.telemetry import NullTelemetry
from agentd.upstream import Upstream
from agentd.upstream.backoff import RECONNECT_BACKOFF, delay_before_attempt
from tests.mcpservers.helpers import Events, Spec, notes_spec

FAST = (0.05, 0.05, 0.05, 0.05, 0.05)
"""Backoff for tests: the attempts are real processes; only the waits are shortened."""

PROMPT = 3.0
"""Seconds within which a crash must be noticed (it is detected from the process exit, not a timer)."""


async def _gone(pid: int, within: float = 3.0) -> bool:
    """Whether process ``pid`` is dead (or a zombie) within ``within`` s; waits on a pidfd, no polling."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        with trio.move_on_after(within):
            await trio.lowlevel.wait_readable(fd)
            return True
        try:
            return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return True
    finally:
        os.close(fd)


def test_backoff_schedule_is_1_2_4_8_16() -> None:
    assert [delay_before_attempt(n, RECONNECT_BACKOFF) for n in range(1, 7)] == [1, 2, 4, 8, 16, 16]
    with pytest.raises(ValueError, match=r"^attempt must be 1 or more, got 0$"):
        delay_before_attempt(0, RECONNECT_BACKOFF)


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_sigkill_restarts_resubscribes_and_rereads(tmp_path: Path, era: str) -> None:
    state = tmp_path / "s.json"
    send, recv = trio.open_memory_channel[object](100)
    events = Events(recv)
    up = Upstream(notes_spec("notes", state, era=era), send, NullTelemetry(), backoff=(0.3,))
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        await up.subscribe("note://alpha")
        await events.next(SubscriptionStateChanged, state="established")
        pid = up.server_pid
        assert pid is not None

        pending: list[BaseException] = []
        (receipts,) = await trio.open_tcp_listeners(0, host="127.0.0.1")
        port = receipts.socket.getsockname()[1]

        async def slow_call() -> None:
            try:
                await up.call_tool("sleep", {"seconds": 60, "receipt_port": port})
            except ServerUnavailable as exc:
                pending.append(exc)

        nursery.start_soon(slow_call)
        with trio.fail_after(10):  # the server has the call in hand when it writes its receipt
            async with await receipts.accept() as receipt:
                assert await receipt.receive_some() == b"sleep\n"
        await receipts.aclose()
        t0 = trio.current_time()
        os.kill(pid, signal.SIGKILL)
        restarting = await events.next(ServerStateChanged, within=PROMPT, state=ServerState.RESTARTING)
        assert trio.current_time() - t0 < PROMPT
        assert restarting.attempt == 1
        assert restarting.error == "server 'notes' was killed by SIGKILL"
        # The in-flight call failed fast instead of hanging (python-sdk #332/#396).
        assert len(pending) == 1
        assert "lost its connection during tools/call 'sleep'" in str(pending[0])

        # A change made while the server is down lands in its backing file.
        notes = json.loads(state.read_text())
        notes["alpha"] = "changed while down"
        state.write_text(json.dumps(notes))

        await events.next(ServerStateChanged, state=ServerState.CONNECTED)
        await events.next(SubscriptionStateChanged, uris=frozenset({"note://alpha"}), state="established")
        synthetic = await events.next(ResourceChanged)
        assert synthetic == ResourceChanged("notes", "note://alpha", "synthetic")
        read = await up.read_resource("note://alpha")
        assert read.contents[0].text == "changed while down"  # type: ignore[union-attr]
        assert up.server_pid != pid

        await up.call_tool("set_note", {"name": "alpha", "text": "after restart"})
        assert await events.next(ResourceChanged) == ResourceChanged("notes", "note://alpha", "updated")
        nursery.cancel_scope.cancel()
    assert [e.state for e in events.of(SubscriptionStateChanged)] == ["established", "lost", "established"]


async def test_five_failures_give_up_with_required_propagated(tmp_path: Path) -> None:
    send, recv = trio.open_memory_channel[object](100)
    events = Events(recv)
    spec = Spec(
        name="broken",
        command=sys.executable,
        args=["-S", "-c", "import sys; sys.stderr.write('cannot open database\\n'); sys.exit(3)"],
        required=True,
    )
    up = Upstream(spec, send, NullTelemetry(), backoff=FAST)
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        assert up.state in (ServerState.RESTARTING, ServerState.FAILED)
        failed = await events.next(ServerStateChanged, state=ServerState.FAILED)
    assert failed.required is True
    assert failed.attempt == 5
    assert failed.error is not None
    assert "its stderr ends with:\ncannot open database" in failed.error
    assert [e.attempt for e in events.of(ServerStateChanged) if e.state is ServerState.RESTARTING] == [
        1,
        2,
        3,
        4,
    ]
    assert up.state is ServerState.FAILED


async def test_exit_during_init_reports_stderr_tail_within_init_timeout(tmp_path: Path) -> None:
    send, recv = trio.open_memory_channel[object](100)
    events = Events(recv)
    up = Upstream(
        notes_spec("notes", tmp_path / "s.json", "--exit-during-init"),
        send,
        NullTelemetry(),
        init_timeout=15.0,
        backoff=(30.0,),
    )
    t0 = trio.current_time()
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        # Two tries, each ended by the exit, far inside init_timeout: the server/discover
        # probe, then initialize (an exit on the probe is what SDK 1.8 servers do; rfcs/0285).
        assert trio.current_time() - t0 < 2 * 15.0
        restarting = await events.next(ServerStateChanged, state=ServerState.RESTARTING)
        nursery.cancel_scope.cancel()
    assert restarting.error is not None
    assert restarting.error.startswith("server 'notes' ")
    assert restarting.error.endswith(
        "its stderr ends with:\nnotes server: fatal: refusing to start (exit-during-init knob)"
    )
    assert "exited with status 7" in restarting.error


async def test_silent_server_hits_init_timeout(tmp_path: Path) -> None:
    send, recv = trio.open_memory_channel[object](100)
    events = Events(recv)
    spec = Spec(name="mute", command=sys.executable, args=["-S", "-c", "import time; time.sleep(60)"])
    up = Upstream(spec, send, NullTelemetry(), init_timeout=0.5, backoff=(30.0,))
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        restarting = await events.next(ServerStateChanged, state=ServerState.RESTARTING)
        nursery.cancel_scope.cancel()
    assert restarting.error == (
        "server 'mute' did not finish connecting within 0.5s (init_timeout); it wrote nothing to stderr"
    )


async def test_stopped_server_times_out_and_others_keep_answering(tmp_path: Path) -> None:
    send, _recv = trio.open_memory_channel[object](100)
    frozen = Upstream(notes_spec("frozen", tmp_path / "f.json"), send, NullTelemetry(), request_timeout=1.0)
    healthy = Upstream(notes_spec("healthy", tmp_path / "h.json"), send, NullTelemetry(), request_timeout=1.0)
    async with trio.open_nursery() as nursery:
        await nursery.start(frozen.run)
        await nursery.start(healthy.run)
        pid = frozen.server_pid
        assert pid is not None
        os.kill(pid, signal.SIGSTOP)
        try:
            t0 = trio.current_time()
            with pytest.raises(
                UpstreamError,
                match=r"^server 'frozen' did not answer tools/call 'get_note' within 1s "
                r"\(tool_timeout, or the server's timeout\); "
                r"it may be hung or overloaded$",
            ):
                await frozen.call_tool("get_note", {"name": "alpha"})
            assert trio.current_time() - t0 < 2.0
            result = await healthy.call_tool("get_note", {"name": "alpha"})
            assert not result.is_error
            assert frozen.state is ServerState.CONNECTED
        finally:
            os.kill(pid, signal.SIGCONT)
        nursery.cancel_scope.cancel()


async def test_garbage_on_stdout_is_skipped(tmp_path: Path) -> None:
    send, _recv = trio.open_memory_channel[object](100)
    telemetry = NullTelemetry()
    up = Upstream(notes_spec("noisy", tmp_path / "s.json", "--garbage-at-start", "3"), send, telemetry)
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        await up.call_tool("emit_garbage", {"lines": 2})
        result = await up.call_tool("get_note", {"name": "alpha"})
        assert not result.is_error
        assert up.state is ServerState.CONNECTED
        nursery.cancel_scope.cancel()
    assert telemetry.counters["upstream.stdout_garbage"] == 5


async def test_a_huge_line_is_discarded_and_the_connection_stays(tmp_path: Path) -> None:
    send, recv = trio.open_memory_channel[object](100)
    telemetry = NullTelemetry()
    up = Upstream(
        notes_spec("huge", tmp_path / "s.json"),
        send,
        telemetry,
        max_read_bytes=1024,
        max_line_bytes=64 * 1024,
        backoff=FAST,
    )
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        # The server writes a 1 MB line that is no message, then answers: the
        # line is skipped as it streams in (memory bounded), the answer arrives.
        result = await up.call_tool("emit_huge_line", {"size": 1_000_000})
        assert not result.is_error
        assert telemetry.counters["upstream.oversized"] == 1
        assert up.state is ServerState.CONNECTED
        assert not (await up.call_tool("get_note", {"name": "alpha"})).is_error
        nursery.cancel_scope.cancel()
    while True:
        try:
            ev = recv.receive_nowait()
        except trio.WouldBlock:
            break
        assert not (isinstance(ev, ServerStateChanged) and ev.state is ServerState.RESTARTING)


async def test_no_orphans_after_crash_or_shutdown(tmp_path: Path) -> None:
    send, recv = trio.open_memory_channel[object](100)
    events = Events(recv)
    state = tmp_path / "s.json"
    up = Upstream(notes_spec("family", state, "--grandchild"), send, NullTelemetry(), backoff=(0.05,))
    async with trio.open_nursery() as nursery:
        await nursery.start(up.run)
        first = int(await trio.Path(f"{state}.grandchild").read_text())
        leader = up.server_pid
        assert leader is not None
        os.kill(leader, signal.SIGKILL)
        await events.next(ServerStateChanged, state=ServerState.RESTARTING)
        # The exit watcher killed the group when the leader died (python-sdk #850).
        assert await _gone(first)
        await events.next(ServerStateChanged, state=ServerState.CONNECTED)
        second = int(await trio.Path(f"{state}.grandchild").read_text())
        assert second != first
        nursery.cancel_scope.cancel()
    # Cancelled: the shielded teardown stopped the whole group.
    assert await _gone(second)
    assert up.state is ServerState.STOPPED

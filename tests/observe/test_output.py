"""The output layer: the rate limit (pure, time passed in) and the threaded line writer."""

from __future__ import annotations

import fcntl
import os
import threading

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.observe.output import LineWriter, RateLimiter, Suppressed


def test_a_window_passes_the_burst_and_folds_the_rest_into_one_count() -> None:
    rl = RateLimiter(burst=3, window=10.0)
    assert [rl.admit("a", 0.0 + i) for i in range(5)] == [True, True, True, False, False]
    assert rl.admit("b", 4.0)  # another source has its own window
    assert rl.next_due() == 10.0
    assert rl.due(9.9) == []
    assert rl.due(10.0) == [Suppressed(key="a", count=2, window_s=10.0)]
    assert rl.next_due() is None
    assert rl.admit("a", 10.5)  # a new window
    assert rl.due(100.0, all_=True) == []


@given(times=st.lists(st.floats(min_value=0, max_value=1000, allow_nan=False), max_size=200))
def test_every_line_is_written_or_counted_exactly_once(times: list[float]) -> None:
    rl = RateLimiter(burst=2, window=5.0)
    passed = 0
    folded = 0
    for now in sorted(times):
        folded += sum(s.count for s in rl.due(now))
        passed += rl.admit("k", now)
    folded += sum(s.count for s in rl.due(10_000.0, all_=True))
    assert passed + folded == len(times)


@given(
    lines=st.lists(
        st.tuples(st.sampled_from("abcdefgh"), st.floats(min_value=0, max_value=5, allow_nan=False)),
        max_size=200,
    )
)
def test_summaries_come_in_closing_order_and_only_open_windows_are_held(
    lines: list[tuple[str, float]],
) -> None:
    rl = RateLimiter(burst=1, window=10.0)
    now = 0.0
    for key, step in lines:
        now += step
        for s in rl.due(now):
            assert isinstance(s.key, str)
        rl.admit(key, now)
        assert len(rl) <= len({k for k, _ in lines})
        due = rl.next_due()
        assert due is None or due > now
    rl.due(now + 10.0)
    assert len(rl) == 0


def test_sources_that_come_and_go_do_not_accumulate() -> None:
    # An agent id per source (model.retry, child.stderr): windows of sources gone quiet are released.
    rl = RateLimiter(burst=10, window=10.0)
    for n in range(100_000):
        now = n * 0.01  # 100 sources a second, each seen once
        rl.due(now)
        rl.admit(f"a{n}", now)
    assert len(rl) == 1000  # the last 10 s of sources, no more
    assert rl.next_due() is None


def test_a_pipe_nobody_reads_fills_the_buffer_and_put_never_blocks() -> None:
    r, w = os.pipe()
    fcntl.fcntl(w, fcntl.F_SETPIPE_SZ, 4096)
    try:
        writer = LineWriter(w, max_bytes=100_000)
        line = b"x" * 99 + b"\n"
        results = [writer.put(line) for _ in range(2000)]  # 200 KB: more than the pipe and the buffer
        assert not all(results)
        assert writer.dropped == results.count(False) > 0
        assert not writer.flush(0.05)  # stuck on the pipe: flush gives up, it does not hang
        os.close(r)  # the reader leaves: the blocked write fails, the rest is dropped
        r = -1
        assert writer.flush(10)
        assert writer.written + writer.dropped == 2000
        assert writer.last_error == "Broken pipe"
        writer.close(1)
    finally:
        if r >= 0:
            os.close(r)
        os.close(w)


def test_write_errors_are_counted_and_reported_once_per_errno() -> None:
    errors: list[str] = []
    fd = os.open("/dev/full", os.O_WRONLY)
    try:
        writer = LineWriter(fd, max_bytes=1 << 20, on_error=errors.append)
        for _ in range(10):
            writer.put(b"line\n")
        assert writer.flush(10)
        assert writer.dropped == 10
        assert errors == ["No space left on device"]
    finally:
        os.close(fd)


def test_a_stream_closed_at_start_drops_everything() -> None:
    writer = LineWriter(1, max_bytes=1000, closed=True)
    assert not writer.put(b"result\n")
    assert writer.dropped == 1
    assert writer.flush(1)


@pytest.mark.realclock
def test_the_writer_thread_calls_back_when_asked_even_with_nothing_to_write() -> None:
    r, w = os.pipe()
    ticked = threading.Event()
    try:
        writer = LineWriter(w, max_bytes=1000, on_tick=ticked.set)
        writer.wake_at(0.0)  # already due
        assert ticked.wait(10)
        writer.close(1)
    finally:
        os.close(r)
        os.close(w)

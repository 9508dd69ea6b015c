"""Fault catalog: output is best-effort, never fatal, never blocking.

Every case runs the real ``agentd`` command with its stdout or stderr broken
the way an operator's environment breaks them: stderr on a full device
(``2>/dev/full``), a stderr pipe nobody reads, stdout closed (``>&-``), a
stdout pipe whose reader left, stdout on a full device. Telemetry and
published results go through bounded buffers written by threads: what
cannot be written is dropped and counted (``agentd_telemetry_dropped_total``,
``agentd_outputs_lost_total``, and in ``supervisor.exit``), and the daemon keeps
answering ``/healthz``, handling work and draining on SIGTERM. A once run
whose one result cannot be written exits 8 and says why. A flood of
identical warnings (an MCP server printing garbage) becomes a few lines and
one summary with the count.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import signal
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio

from agentd.core.exitcodes import ExitCode
from agentd.observe.telemetry import RATE_BURST
from agentd.supervisor.app import EXIT_FLUSH_TIMEOUT
from tests.support.agentd_proc import PY, REPO, agentd_cmd, run_agentd, script
from tests.support.leftovers import tagged_env

pytestmark = pytest.mark.fault

#: Bound on any one wait in these tests (a loaded 2-core machine).
WAIT_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def env(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {**os.environ, **tagged_env(tmp_path), **extra}


@contextlib.contextmanager
def fd(path: Path | str) -> Iterator[int]:
    """A descriptor open for writing on ``path`` (a file, or a device such as /dev/full)."""
    n = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        yield n
    finally:
        os.close(n)


def events(raw: bytes) -> list[dict[str, Any]]:
    out = []
    for line in raw.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


async def run_once(argv: Sequence[str], *, stdout: Any, stderr: Any, tmp_path: Path) -> int:
    """Run a command to its end with the given stdio (no reading needed); its exit status."""
    with trio.fail_after(WAIT_S):
        proc = await trio.run_process(
            list(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, check=False,
            env=env(tmp_path), cwd=str(REPO),
        )  # fmt: skip
    return proc.returncode


async def http(port: int, path: str) -> httpx2.Response:
    with trio.fail_after(10):
        async with httpx2.AsyncClient() as client:
            return await client.get(f"http://127.0.0.1:{port}{path}")


def metric(text: str, name: str) -> float:
    (value,) = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + " ")]
    return value


# ----------------------------------------------------------------------------- stderr


@pytest.mark.parametrize("stderr", ["full-device", "closed"])
async def test_once_with_stderr_unwritable_still_prints_its_result_and_exits_0(
    tmp_path: Path, allow_files: Any, stderr: str
) -> None:
    """stderr on ``/dev/full``, or closed (``2>&-``)."""
    allow_files("out.txt")
    model = script(tmp_path, [{"text": "the result"}])
    out = tmp_path / "out.txt"
    argv = agentd_cmd("--model", model, "do it")
    with contextlib.ExitStack() as stack:
        stdout = stack.enter_context(fd(out))
        if stderr == "full-device":
            err = stack.enter_context(fd("/dev/full"))
        else:
            argv, err = ["sh", "-c", 'exec "$@" 2>&-', "sh", *argv], subprocess.DEVNULL
        code = await run_once(argv, stdout=stdout, stderr=err, tmp_path=tmp_path)
    assert code == ExitCode.OK
    assert out.read_text() == "the result\n"


@asynccontextmanager
async def ticking_daemon(tmp_path: Path, *flags: str, buffer: str) -> AsyncIterator[trio.Process]:
    """A schedule daemon publishing ``tick`` every 200 ms, verbose, with a telemetry buffer of ``buffer``;
    its stdout and stderr are pipes, stderr's only one page (4 KiB) deep."""
    model = script(tmp_path, [{"text": "tick"}], then="repeat")
    argv = agentd_cmd(
        "--mode", "schedule", "--interval", "200ms", "--verbose", "--model", model, *flags, "--grace", "20s", "tick"
    )  # fmt: skip
    proc = await trio.lowlevel.open_process(
        argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env(tmp_path, AGENTD_TELEMETRY_BUFFER=buffer), cwd=str(REPO),
    )  # fmt: skip
    assert proc.stderr is not None
    fcntl.fcntl(proc.stderr.fileno(), fcntl.F_SETPIPE_SZ, 4096)
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.kill()
            with trio.CancelScope(shield=True):
                await proc.wait()


async def test_sigterm_drains_while_stderr_is_still_blocked(tmp_path: Path) -> None:
    """Nobody ever reads stderr: the drain still ends, with exit 0, within the grace plus the flush bound."""
    async with ticking_daemon(tmp_path, buffer="1KiB") as proc:
        assert proc.stdout is not None
        published = b""
        with trio.fail_after(WAIT_S):
            while published.count(b"tick\n") < 5:  # the pipe is long full by now
                chunk = await proc.stdout.receive_some(4096)
                assert chunk, f"agentd exited early ({await proc.wait()})"
                published += chunk
        proc.send_signal(signal.SIGTERM)
        with trio.fail_after(20 + EXIT_FLUSH_TIMEOUT + 10):
            assert await proc.wait() == ExitCode.OK


async def test_a_stderr_pipe_nobody_reads_never_blocks_the_daemon(tmp_path: Path) -> None:
    """Telemetry fills the pipe and the buffer; the daemon publishes, answers probes and drains."""
    port, metrics_port = free_port(), free_port()
    async with ticking_daemon(
        tmp_path,
        "--health-addr",
        f"127.0.0.1:{port}",
        "--metrics-addr",
        f"127.0.0.1:{metrics_port}",
        buffer="4KiB",
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        stdout, stderr = proc.stdout, proc.stderr
        published = bytearray()
        logged = bytearray()
        changed = trio.Event()

        async def ticks(n: int) -> None:
            with trio.fail_after(WAIT_S):
                while published.count(b"tick\n") < n:
                    chunk = await stdout.receive_some(4096)
                    assert chunk, f"agentd exited early ({await proc.wait()})"
                    published.extend(chunk)

        async def read_stderr() -> None:
            nonlocal changed
            while chunk := await stderr.receive_some(65536):
                logged.extend(chunk)
                changed.set()
                changed = trio.Event()

        # Nobody reads stderr: 20 roots ran (each writes about 1 KB of telemetry, so the
        # 4 KiB pipe and the 4 KiB buffer overflowed), and results kept coming.
        await ticks(20)
        health = await http(port, "/healthz")
        assert health.status_code == 200
        metrics = await http(metrics_port, "/metrics")
        assert metric(metrics.text, "agentd_telemetry_dropped_total") > 0
        async with trio.open_nursery() as nursery:
            # Someone reads stderr again: it catches up, and the drain's lines
            # (supervisor.exit with the count) all get through.
            nursery.start_soon(read_stderr)
            with trio.fail_after(WAIT_S):
                await changed.wait()  # reading has resumed
                # Read stdout up to now (it was not read meanwhile either): the root two after
                # the last published one starts after reading resumed, so its turn end gets in.
                last = published.count(b"tick\n") + 1
                await ticks(last)
                last = published.count(b"tick\n")
                caught_up = f'"event":"turn.end","agent":"a{last + 2}"'.encode()
                while caught_up not in logged:
                    await changed.wait()
            proc.send_signal(signal.SIGTERM)
            with trio.fail_after(WAIT_S):
                assert await proc.wait() == ExitCode.OK
    exit_event = [e for e in events(bytes(logged)) if e.get("event") == "supervisor.exit"]
    assert exit_event, bytes(logged[-2000:])
    assert exit_event[0]["exit_code"] == 0
    assert exit_event[0]["telemetry_dropped"] > 0


# ----------------------------------------------------------------------------- stdout in once mode


async def test_once_with_stdout_closed_exits_8_and_says_why(tmp_path: Path, allow_files: Any) -> None:
    allow_files("err.log")
    model = script(tmp_path, [{"text": "the result"}])
    err = tmp_path / "err.log"
    argv = ["sh", "-c", 'exec "$@" >&-', "sh", *agentd_cmd("--model", model, "do it")]
    with fd(err) as stderr:
        code = await run_once(argv, stdout=subprocess.DEVNULL, stderr=stderr, tmp_path=tmp_path)
    assert code == ExitCode.OUTPUT_FAILED == 8
    log = events(err.read_bytes())
    (unwritten,) = [e for e in log if e["event"] == "result.unwritten"]
    assert unwritten["error"] == "stdout was closed when agentd started"
    assert unwritten["status"] == "completed"
    assert [e["exit_code"] for e in log if e["event"] == "supervisor.exit"] == [8]
    assert (log[-1]["event"], log[-1]["kind"], log[-1]["exit_code"]) == ("run.failed", "output", 8)


async def test_once_with_a_stdout_pipe_whose_reader_left_exits_8(tmp_path: Path, allow_files: Any) -> None:
    allow_files("err.log")
    model = script(tmp_path, [{"text": "the result"}])
    err = tmp_path / "err.log"
    read_end, write_end = os.pipe()
    os.close(read_end)  # `agentd ... | true` after true exited
    try:
        with fd(err) as stderr:
            code = await run_once(
                agentd_cmd("--model", model, "do it"), stdout=write_end, stderr=stderr, tmp_path=tmp_path
            )
    finally:
        os.close(write_end)
    assert code == ExitCode.OUTPUT_FAILED
    (unwritten,) = [e for e in events(err.read_bytes()) if e["event"] == "result.unwritten"]
    assert unwritten["error"] == "writing to stdout failed: Broken pipe"


async def test_once_with_stdout_on_a_full_device_exits_8(tmp_path: Path, allow_files: Any) -> None:
    allow_files("err.log")
    model = script(tmp_path, [{"text": "the result"}])
    err = tmp_path / "err.log"
    with fd("/dev/full") as full, fd(err) as stderr:
        code = await run_once(
            agentd_cmd("--model", model, "--output", "json", "do it"),
            stdout=full,
            stderr=stderr,
            tmp_path=tmp_path,
        )
    assert code == ExitCode.OUTPUT_FAILED
    log = events(err.read_bytes())
    (unwritten,) = [e for e in log if e["event"] == "result.unwritten"]
    assert unwritten["error"] == "writing to stdout failed: No space left on device"
    assert [e["stream"] for e in log if e["event"] == "output.failed"] == ["stdout"]


# ----------------------------------------------------------------------------- stdout in a daemon


async def test_a_daemon_with_stdout_closed_keeps_working_and_counts_the_lost_results(tmp_path: Path) -> None:
    port = free_port()
    model = script(tmp_path, [{"text": "tick"}], then="repeat")
    argv = agentd_cmd(
        "--mode", "schedule", "--interval", "200ms", "--model", model, "--metrics-addr", f"127.0.0.1:{port}", "tick"
    )  # fmt: skip
    async with run_agentd(
        [], env=tagged_env(tmp_path), prefix=["sh", "-c", 'exec "$@" >&-', "sh"], command=argv
    ) as a:
        await a.wait_event("output.unavailable")
        await a.wait_event("turn.end", count=3)  # three results published into the void, and on it goes
        metrics = await http(port, "/metrics")
        assert metric(metrics.text, "agentd_outputs_lost_total") >= 3
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == ExitCode.OK, a.tail()
    exit_event = a.find("supervisor.exit")[0]
    assert exit_event["counters"]["outputs_lost"] == len(a.find("turn.end"))
    assert not a.find("supervisor.internal_error")


async def test_a_daemon_whose_stdout_reader_left_keeps_working(tmp_path: Path) -> None:
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    model = script(tmp_path, [{"text": "published"}])
    args = [
        "--mode", "reactive", "--model", model, "--mcp-stdio", f"memo={PY} -m agentd serve memo --file {memo}",
        "--subscribe", "memo:memo://notes", "--route", "memo://notes=spawn:1", "react",
    ]  # fmt: skip
    read_end, write_end = os.pipe()
    try:
        async with run_agentd(args, env=tagged_env(tmp_path), stdout=write_end) as a:
            os.close(write_end)
            await a.wait_event("ready.changed", lambda e: e["ready"])
            os.close(read_end)  # the reader goes away: the next write gets EPIPE
            read_end = -1
            for n, value in enumerate(["eggs", "bread"], start=1):
                memo.write_text(json.dumps({"todo": value}))
                await a.wait_event("subagent.exit", count=n)
            failed = await a.wait_event("output.failed")
            assert failed["error"] == "Broken pipe"
            a.signal(signal.SIGTERM)
            assert await a.wait_exit() == ExitCode.OK, a.tail()
    finally:
        if read_end >= 0:
            os.close(read_end)
    assert a.find("supervisor.exit")[0]["counters"]["outputs_lost"] == 2


# ----------------------------------------------------------------------------- rate limit


async def test_a_server_printing_garbage_becomes_a_few_lines_and_a_count(tmp_path: Path) -> None:
    lines = 3000
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "noisy__spew", "arguments": {"count": lines, "seed": 7}}]},
            {"text": "{last_tool_result}"},
        ],
    )
    server = f"noisy={PY} {REPO / 'tests/mcpservers/fault_server.py'} --state {tmp_path / 'noisy.json'}"
    async with run_agentd(["--model", model, "--mcp-stdio", server, "work"], env=tagged_env(tmp_path)) as a:
        assert await a.wait_exit() == ExitCode.OK, a.tail()
    written = a.find("upstream.stdout_garbage")
    folded = a.find("telemetry.suppressed", lambda e: e["of"] == "upstream.stdout_garbage")
    assert 0 < len(written) <= 2 * RATE_BURST  # a new window may open during the run
    assert len(written) + sum(e["count"] for e in folded) == lines  # every line counted
    assert all(e["server"] == "noisy" for e in folded)
    garbage_bytes = sum(len(raw) for raw in a.raw_stderr if "stdout_garbage" in raw or "suppressed" in raw)
    assert garbage_bytes < 20_000  # not one line per garbage line

"""Faults on agentd's service-manager channel (sd_notify), through the real command.

The test plays the service manager: it binds the socket ``NOTIFY_SOCKET``
names, and then breaks it (restarts it, fills it, or kills agentd under it).
agentd must never block or fail because of its service manager, and must say
what happened once.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
from pathlib import Path

import httpx2
import pytest
import trio

from tests.support.agentd_proc import run_agentd, script
from tests.support.leftovers import tagged_env
from tests.support.sdnotify import STEP_TIMEOUT, lines, notify_socket

pytestmark = pytest.mark.fault


def _args(tmp_path: Path, *extra: str) -> list[str]:
    return ["--mode", "reactive", "--model", script(tmp_path, [{"text": "NO_REPLY"}]), *extra, "idle"]


async def test_s1_service_manager_restarts_mid_run_and_pings_reach_the_new_socket(tmp_path, allow_files):
    """systemd re-executing itself re-creates its socket at the same path: agentd's next messages get there."""
    allow_files("notify")
    address = str(tmp_path / "notify")
    env = tagged_env(tmp_path, NOTIFY_SOCKET=address, WATCHDOG_USEC="400000")  # a ping every 0.2 s
    async with run_agentd(_args(tmp_path), env=env) as a:
        async with notify_socket(address) as first:
            await first.until("READY=1", a.tail)
            await first.until("WATCHDOG=1", a.tail)
        # The manager is gone (its socket file stays): the next ping is refused, reported once.
        failed = await a.wait_event("sdnotify.failed", timeout=STEP_TIMEOUT)
        assert failed["error"].startswith("ECONNREFUSED")
        os.unlink(address)
        async with notify_socket(address) as second:
            assert await second.next() == "WATCHDOG=1"
            a.signal(signal.SIGTERM)
            await second.until("STOPPING=1", a.tail)
            assert await a.wait_exit() == 0
    assert len(a.find("sdnotify.failed")) == 1


async def test_s2_a_full_manager_queue_never_blocks_agentd(tmp_path, allow_files):
    """The manager stopped reading and its queue is full: sends fail at once, probes and the drain go on."""
    allow_files("notify")
    address = str(tmp_path / "notify")
    async with notify_socket(address) as manager:
        filler = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        filler.setblocking(False)
        queued = 0
        with contextlib.closing(filler), contextlib.suppress(BlockingIOError):
            while True:
                filler.sendto(b"STATUS=filler", address)
                queued += 1
        env = tagged_env(tmp_path, NOTIFY_SOCKET=address)
        async with run_agentd(_args(tmp_path, "--health-addr", "127.0.0.1:0"), env=env) as a:
            failed = await a.wait_event("sdnotify.failed")
            assert failed["error"].startswith("EAGAIN")
            assert failed["sent"] == "READY"  # the first message: agentd is ready at once
            port = (await a.wait_event("health.listening"))["port"]
            with trio.fail_after(STEP_TIMEOUT):
                async with httpx2.AsyncClient() as client:
                    assert (await client.get(f"http://127.0.0.1:{port}/healthz")).status_code == 200
            # The manager reads again: its backlog, then agentd's next message.
            for _ in range(queued):
                assert await manager.next() == "STATUS=filler"
            a.signal(signal.SIGTERM)
            assert (await manager.next()).startswith("STOPPING=1\n")
            assert await a.wait_exit() == 0
    assert "READY=1" not in lines(manager.messages)  # lost while the queue was full (rfcs/0162)
    assert len(a.find("sdnotify.failed")) == 1


async def test_s3_sigkilled_after_ready_the_next_agentd_says_ready_again(tmp_path, allow_files):
    """A SIGKILLed agentd leaves nothing behind; the one systemd starts next reports its own READY=1."""
    allow_files("notify")
    address = str(tmp_path / "notify")
    env = tagged_env(tmp_path, NOTIFY_SOCKET=address, WATCHDOG_USEC="2000000")
    async with notify_socket(address) as manager:
        async with run_agentd(_args(tmp_path), env=env) as a:
            await manager.until("READY=1", a.tail)
            await a.wait_event("reactor.start")
            a.signal(signal.SIGKILL)
            assert await a.wait_exit() == -signal.SIGKILL
        sent_by_first = len(manager.messages)
        async with run_agentd(_args(tmp_path), env=env) as b:
            await manager.until("READY=1", b.tail)
            a_lines = lines(manager.messages[:sent_by_first])
            assert a_lines.count("READY=1") == 1
            assert "STOPPING=1" not in a_lines  # a SIGKILL says nothing: systemd sees the exit
            b.signal(signal.SIGTERM)
            await manager.until("STOPPING=1", b.tail)
            assert await b.wait_exit() == 0

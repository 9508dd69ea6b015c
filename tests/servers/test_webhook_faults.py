"""Webhook server faults: SIGKILL at the worst moments, and hostile requests (fault catalog WH1-WH6).

The server is killed from inside at a chosen step (a wrapper process
substitutes subclasses whose ``step_hook`` SIGKILLs it once): after a
delivery's line is written but not synced, after it is synced but before
anyone was answered or told, and right after its 200 was sent. Each case
then shows, through the real ``agentd`` command, that the delivery reaches
exactly one agent: the sender's retry (which every webhook sender makes
when it hears no 2xx) is recognised and stored nothing new.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import trio

from tests.support.agentd_proc import REPO, Agentd, run_agentd
from tests.support.leftovers import AllowedFiles
from tests.support.rawmcp import server_env
from tests.support.webhooks import (
    SECRET_ENV,
    START_BOUND,
    alertmanager_headers,
    dumps,
    example_env,
    free_port,
    github_headers,
    github_issue_labeled,
    post,
    post_until_answered,
    read_reply,
    webhook_argv,
    webhook_server,
)

pytestmark = pytest.mark.fault

EXAMPLE = REPO / "examples" / "webhooks" / "github-issues.toml"


@pytest.fixture(autouse=True)
def _webhook_files(allow_files: AllowedFiles) -> None:
    """What these tests leave on purpose: the delivery logs, their state and locks, the agentd shim, the
    killer's marker and configuration. A half-written temporary (``.~*.tmp``) or a torn tail would fail."""
    allow_files("seg-*.jsonl", "state.json", "lock", "bin/agentd", "killed", "agentd.toml")


CONNECT_BOUND = 60.0

#: ``python -c`` wrapper: ``agentd serve webhook`` whose store and listener SIGKILL the process at STEP,
#: once (a marker file remembers it, so the server agentd restarts runs normally).
_KILLER = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from agentd.servers.webhook import listener, store
    marker, step = Path(sys.argv[1]), sys.argv[2]
    def hook(at):
        if at == step and not marker.exists():
            marker.write_text(at)
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no flush, no answer
    class Store(store.DeliveryStore):
        def __init__(self, *a, **k):
            super().__init__(*a, step_hook=hook, **k)
    class Listener(listener.Listener):
        def __init__(self, *a, **k):
            super().__init__(*a, step_hook=hook, **k)
    store.DeliveryStore, listener.Listener = Store, Listener
    from agentd.servers import main
    raise SystemExit(main(sys.argv[3:]))
    """
)


def killer_config(tmp_path: Path, port: int, step: str) -> Path:
    """examples/webhooks/github-issues.toml with the server replaced by the killing wrapper."""
    text = EXAMPLE.read_text()
    head, _, _server = text.partition("[servers.webhook]")
    argv = [
        "-c", _KILLER, str(tmp_path / "killed"), step,
        "webhook", "--listen", f"127.0.0.1:{port}", "--dir", str(tmp_path / "deliveries"),
        "--source", "github=github,secret_env=GITHUB_WEBHOOK_SECRET",
    ]  # fmt: skip
    config = tmp_path / "agentd.toml"
    args = ", ".join(json.dumps(a) for a in argv)  # JSON strings are TOML basic strings
    config.write_text(
        head.replace("script:../scripts/", f"script:{REPO / 'examples' / 'scripts'}/")
        + "[servers.webhook]\n"
        + f"command = {sys.executable!r}\n"
        + f"args = [{args}]\n"
        + f"env = {{ GITHUB_WEBHOOK_SECRET = '${{GITHUB_WEBHOOK_SECRET}}', PYTHONPATH = '{REPO}' }}\n"
    )
    return config


async def one_agent_for(a: Agentd, uri: str, *, count: int) -> None:
    deliver = await a.wait_event("route.deliver", count=count, timeout=CONNECT_BOUND)
    assert deliver["uris"] == [uri]
    spawn = await a.wait_event("subagent.spawn", count=count, timeout=CONNECT_BOUND)
    await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], timeout=CONNECT_BOUND)


@pytest.mark.parametrize("step", ["written", "synced"])
async def test_w1_killed_before_answering_the_retry_is_delivered_once(tmp_path: Path, step: str) -> None:
    """W1: SIGKILL after the line is written (not synced) or synced (nobody answered or told): the sender
    hears nothing and retries; agentd restarts the server; the delivery reaches exactly one agent."""
    port = free_port()
    args = ["--config", str(killer_config(tmp_path, port, step)), "--verbose"]
    body = dumps(github_issue_labeled())
    headers = github_headers(body, "k-1")
    async with run_agentd(args, env=example_env(tmp_path, port)) as a:
        await a.wait_event("upstream.connected", lambda e: e["server"] == "webhook", timeout=CONNECT_BOUND)
        with pytest.raises((ConnectionError, OSError, trio.BrokenResourceError)):
            await post(port, "/hooks/github", body, headers)  # no answer: the server died mid-request
        assert (tmp_path / "killed").read_text() == step
        restarted = await a.wait_event(
            "server.state", lambda e: e["state"] == "restarting", timeout=CONNECT_BOUND
        )
        assert "SIGKILL" in restarted["error"]
        retry = await post_until_answered(port, "/hooks/github", body, headers)
        assert retry.json() == {"ok": True, "id": "k-1", "duplicate": True}  # it was on disk already
        await one_agent_for(a, "webhook://github/event/k-1", count=1)
        second = dumps(github_issue_labeled(number=2))
        assert (await post(port, "/hooks/github", second, github_headers(second, "k-2"))).status == 200
        await one_agent_for(a, "webhook://github/event/k-2", count=2)  # and nothing more for k-1
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0, a.tail()
    assert len(a.find("subagent.spawn")) == 2


async def test_w2_killed_right_after_answering_200_the_delivery_survives_the_restart(tmp_path: Path) -> None:
    """W2: the server answers 200 and is SIGKILLed at once, before any MCP client was told: a 200 means
    durable, so the next server (started by agentd) offers it and exactly one agent reads it."""
    marker = tmp_path / "killed"
    argv = [
        sys.executable,
        "-c",
        _KILLER,
        str(marker),
        "answered",
        *webhook_argv(str(tmp_path / "deliveries"))[4:],
    ]
    body = dumps(github_issue_labeled())
    async with webhook_server(argv) as server:
        reply = await post(server.hooks_port, "/hooks/github", body, github_headers(body, "after-200"))
        assert reply.json() == {"ok": True, "id": "after-200", "duplicate": False}
        with trio.fail_after(START_BOUND):
            assert await server.proc.wait() == -signal.SIGKILL
        port = server.hooks_port
    assert marker.read_text() == "answered"
    async with run_agentd(["--config", str(EXAMPLE), "--verbose"], env=example_env(tmp_path, port)) as a:
        await one_agent_for(a, "webhook://github/event/after-200", count=1)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0, a.tail()
    assert "Handled webhook://github/event/after-200" in a.out
    assert '"pending":false' in a.out  # the agent acknowledged it


SENDERS = 8
PER_SENDER = 12
KILL_AT_SYNC = 6
"""WH9: the server SIGKILLs itself right after its 6th group commit (synced, nobody in it answered)."""

#: ``python -c`` wrapper: ``agentd serve webhook`` that SIGKILLs itself right after its Nth fdatasync.
_KILL_AT_SYNC = textwrap.dedent(
    """
    import os, signal, sys
    from agentd.servers.webhook import store
    at, count = int(sys.argv[1]), [0]
    def hook(step):
        if step == "synced":
            count[0] += 1
            if count[0] == at:
                os.kill(os.getpid(), signal.SIGKILL)  # the batch is on disk; none of it is answered
    class Store(store.DeliveryStore):
        def __init__(self, *a, **k):
            super().__init__(*a, step_hook=hook, **k)
    store.DeliveryStore = Store
    from agentd.servers import main
    raise SystemExit(main(sys.argv[2:]))
    """
)


async def test_w9_killed_with_concurrent_senders_in_flight_every_200_is_kept_once(tmp_path: Path) -> None:
    """W9: eight senders POST back to back (concurrent deliveries share one fdatasync); the server is
    SIGKILLed right after a group commit, before anyone in it was answered, with the other senders'
    requests in flight. The senders retry what went unanswered against a restarted server: the synced
    ones are answered ``duplicate``, every delivery answered 200 by either server is in the log, and
    every delivery is in it exactly once."""
    port = free_port()
    argv = webhook_argv(str(tmp_path / "deliveries"), listen=f"127.0.0.1:{port}")
    killer = [sys.executable, "-c", _KILL_AT_SYNC, str(KILL_AT_SYNC), *argv[4:]]
    answered: dict[str, bool] = {}  # delivery id -> "duplicate" in its 200
    interrupted = 0  # attempts that got no answer (the kill, or no server yet): retried
    done = trio.Event()
    finished = 0

    async def sender(k: int) -> None:
        nonlocal interrupted, finished
        for j in range(PER_SENDER):
            body = dumps(github_issue_labeled(number=1000 * k + j))
            delivery = f"c{k}-{j}"
            with trio.fail_after(START_BOUND * 2):
                while True:
                    try:
                        reply = await post(port, "/hooks/github", body, github_headers(body, delivery))
                        break
                    except (OSError, ConnectionError, trio.BrokenResourceError):
                        interrupted += 1
                        await trio.sleep(0.1)  # a sender's retry interval
            assert reply.status == 200, reply
            answered[delivery] = reply.json()["duplicate"]
        finished += 1
        if finished == SENDERS:
            done.set()

    async with trio.open_nursery() as senders:
        async with webhook_server(killer) as first:
            for k in range(SENDERS):
                senders.start_soon(sender, k)
            with trio.fail_after(START_BOUND * 2):
                assert await first.proc.wait() == -signal.SIGKILL
        async with webhook_server(argv) as second:
            with trio.fail_after(START_BOUND * 4):
                await done.wait()
            assert "Traceback" not in second.text
    assert interrupted >= 1  # requests in flight at the kill got no answer and were retried
    # The killed batch was on disk, unanswered: its retries were recognised, not stored again.
    assert any(answered.values())
    stored = [
        json.loads(line)["id"]
        for seg in sorted((tmp_path / "deliveries" / "github").glob("seg-*.jsonl"))
        for line in seg.read_bytes().splitlines()
    ]
    everything = {f"c{k}-{j}" for k in range(SENDERS) for j in range(PER_SENDER)}
    assert set(answered) == everything
    assert sorted(stored) == sorted(everything)  # every 2xx kept, none stored twice (no "-2" twin)


# --------------------------------------------------------------------------- hostile requests


HOSTILE: list[tuple[str, bytes]] = [
    ("binary garbage instead of HTTP", b"\x00\xff\xfe" * 1000 + b"\r\n\r\n"),
    ("a request line of 100 KB", b"POST /" + b"a" * 100_000 + b" HTTP/1.1\r\n\r\n"),
    ("10,000 tiny headers", b"POST /hooks/github HTTP/1.1\r\nHost: x\r\n" + b"X: y\r\n" * 10_000 + b"\r\n"),
    ("a negative Content-Length", b"POST /hooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n"),
    ("two Content-Lengths", b"POST /hooks/github HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nabcde"),
    ("a bad chunk size", b"POST /hooks/github HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-Hub-Signature-256: sha256=00\r\n\r\nzz\r\n"),
    ("invalid UTF-8 in headers", b"POST /hooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: \xff\xfe\r\nContent-Length: 0\r\n\r\n"),
    ("HTTP/2 preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
    ("a body shorter than announced, then EOF", b"POST /hooks/alerts HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\nAuthorization: Bearer " + SECRET_ENV["ALERTMANAGER_TOKEN"].encode() + b"\r\n\r\n{"),
]  # fmt: skip


async def test_w5_hostile_requests_are_refused_and_never_crash_the_server(tmp_path: Path) -> None:
    """W5: malformed HTTP of every kind gets a 4xx (or a closed connection), nothing is stored, and the
    server keeps serving: a valid delivery right after is stored and /healthz answers."""
    async with webhook_server(webhook_argv(str(tmp_path))) as server:
        for what, raw in HOSTILE:
            with trio.fail_after(START_BOUND):
                stream = await trio.open_tcp_stream("127.0.0.1", server.hooks_port)
                async with stream:
                    try:
                        await stream.send_all(raw)
                        if what.endswith("then EOF"):
                            await stream.send_eof()
                        reply = await read_reply(stream)
                        assert reply.status >= 400, (what, reply)
                        assert reply.status != 500, (what, reply)
                    except (ConnectionError, trio.BrokenResourceError):
                        pass  # closed without an answer: also a refusal
            assert server.proc.returncode is None, what
        body = dumps(github_issue_labeled())
        assert (
            await post(server.hooks_port, "/hooks/github", body, github_headers(body, "still-1"))
        ).status == 200
        assert (await post(server.hooks_port, "/healthz", b"", {}, method="GET")).json() == {"ok": True}
        assert (await post(server.hooks_port, "/hooks/alerts", b"{", alertmanager_headers())).status == 400
    lines = b"".join(p.read_bytes() for p in tmp_path.rglob("seg-*.jsonl")).splitlines()  # noqa: ASYNC240
    assert len(lines) == 1
    assert b'"id":"still-1"' in lines[0]
    assert "Traceback" not in server.text


def test_w6_a_second_server_for_the_same_directory_exits_1_naming_the_first(tmp_path: Path) -> None:
    """W6: two servers never share a delivery log (flock): the second exits 1 and says what to do."""
    env = server_env(**SECRET_ENV)
    source = ["--source", "github=github,secret_env=GITHUB_WEBHOOK_SECRET"]
    cmd = [
        sys.executable,
        "-m",
        "agentd",
        "serve",
        "webhook",
        "--dir",
        str(tmp_path),
        "--listen",
        "127.0.0.1:0",
    ]
    with subprocess.Popen(
        [*cmd, *source], cwd=REPO, env=env, stdin=subprocess.PIPE, stderr=subprocess.PIPE
    ) as first:
        try:
            assert first.stderr is not None
            line = first.stderr.readline()  # printed once the log is open and the port bound
            assert b"receiving webhooks on" in line, line
            second = subprocess.run(
                [*cmd, *source], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
            )
            assert second.returncode == 1
            assert (
                "already served by another `agentd serve webhook`; stop it first, or give this one another --dir"
                in second.stderr
            )
        finally:
            first.kill()
            first.wait(timeout=30)

"""Webhook senders for tests: signed requests with real payload shapes, raw HTTP, and a server launcher.

Payload shapes follow what each sender documents (trimmed to the fields a
handler reads, and a few it does not): GitHub's ``issues`` event, Slack's
Events API ``event_callback`` and ``url_verification``, Alertmanager's webhook
(version 4), a generic JSON event.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

from tests.support.processes import stop
from tests.support.rawmcp import REPO, server_env

GITHUB_SECRET = "It's a Secret to Everybody"
"""GitHub's documented example secret; with body ``Hello, World!`` it signs to :data:`GITHUB_EXAMPLE_SIGNATURE`."""
GITHUB_EXAMPLE_BODY = b"Hello, World!"
GITHUB_EXAMPLE_SIGNATURE = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
"""Slack's documented example signing secret, timestamp, slash-command body and signature."""
SLACK_EXAMPLE_TIMESTAMP = "1531420618"
SLACK_EXAMPLE_BODY = (
    b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V"
    b"&channel_name=foobar&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text="
    b"&response_url=https%3A%2F%2Fhooks.slack.com%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN"
    b"&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c"
)
SLACK_EXAMPLE_SIGNATURE = "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"
ALERTMANAGER_TOKEN = "am-token-0123456789abcdef"
GENERIC_SECRET = "generic-secret-for-tests"

#: The env a server launched by these helpers reads its secrets from.
SECRET_ENV = {
    "GITHUB_WEBHOOK_SECRET": GITHUB_SECRET,
    "SLACK_SIGNING_SECRET": SLACK_SECRET,
    "ALERTMANAGER_TOKEN": ALERTMANAGER_TOKEN,
    "DEPLOY_HOOK_SECRET": GENERIC_SECRET,
}

#: ``--source`` flags for one source of each kind.
SOURCE_FLAGS = (
    "--source", "github=github,secret_env=GITHUB_WEBHOOK_SECRET",
    "--source", "slack=slack,secret_env=SLACK_SIGNING_SECRET",
    "--source", "alerts=alertmanager,token_env=ALERTMANAGER_TOKEN",
    "--source", "deploys=generic,secret_env=DEPLOY_HOOK_SECRET,signature_header=X-Signature-256,"
    "signature_prefix=sha256=,event_header=X-Event",
)  # fmt: skip

START_BOUND = 30.0
"""Seconds for ``agentd serve webhook`` to print its addresses (imports on a loaded 2-core box)."""
REPLY_BOUND = 30.0
"""Seconds for one webhook request to be answered (an fsync on a busy disk included)."""


def free_port() -> int:
    """A TCP port that was free a moment ago (for a server agentd starts itself, which must print nothing)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --------------------------------------------------------------------------- payloads


def github_issue_labeled(number: int = 1347, label: str = "agent") -> dict[str, Any]:
    return {
        "action": "labeled",
        "issue": {
            "url": f"https://api.github.com/repos/octo-org/hello-world/issues/{number}",
            "html_url": f"https://github.com/octo-org/hello-world/issues/{number}",
            "id": 1_000_000 + number,
            "number": number,
            "title": "Crash when the config file is empty",
            "user": {"login": "octocat", "id": 1, "type": "User"},
            "labels": [{"id": 208045946, "name": label, "color": "f29513", "default": False}],
            "state": "open",
            "comments": 0,
            "created_at": "2026-11-30T12:00:00Z",
            "body": "Steps: run `app --config empty.toml`.\nExpected: an error. Got: a traceback.",
        },
        "label": {"id": 208045946, "name": label, "color": "f29513", "default": False},
        "repository": {
            "id": 1296269,
            "name": "hello-world",
            "full_name": "octo-org/hello-world",
            "private": False,
            "owner": {"login": "octo-org", "id": 2, "type": "Organization"},
            "html_url": "https://github.com/octo-org/hello-world",
            "default_branch": "main",
        },
        "sender": {"login": "octocat", "id": 1, "type": "User"},
    }


def slack_message_event(event_id: str = "Ev0PV52K21") -> dict[str, Any]:
    return {
        "token": "XXYYZZ",
        "team_id": "T0001",
        "api_app_id": "A0001",
        "event": {
            "type": "message",
            "channel": "C2147483705",
            "user": "U2147483697",
            "text": "deploy is stuck, can someone look?",
            "ts": "1355517523.000005",
            "event_ts": "1355517523.000005",
            "channel_type": "channel",
        },
        "type": "event_callback",
        "event_id": event_id,
        "event_time": 1355517523,
        "authed_users": ["U2147483697"],
    }


def alertmanager_firing(alertname: str = "HighErrorRate") -> dict[str, Any]:
    return {
        "version": "4",
        "groupKey": '{}:{alertname="' + alertname + '"}',
        "truncatedAlerts": 0,
        "status": "firing",
        "receiver": "agentd",
        "groupLabels": {"alertname": alertname},
        "commonLabels": {"alertname": alertname, "service": "checkout", "severity": "page"},
        "commonAnnotations": {"summary": "5xx ratio above 5% for 10 minutes"},
        "externalURL": "http://alertmanager.monitoring:9093",
        "alerts": [
            {
                "status": "firing",
                "labels": {
                    "alertname": alertname,
                    "service": "checkout",
                    "severity": "page",
                    "pod": "checkout-7d9",
                },
                "annotations": {"summary": "5xx ratio above 5% for 10 minutes"},
                "startsAt": "2026-11-30T12:00:00.000Z",
                "endsAt": "0001-01-01T00:00:00Z",
                "generatorURL": "http://prometheus.monitoring:9090/graph?g0.expr=...",
                "fingerprint": "c6a1e3f2b9d04e7a",
            }
        ],
    }


def generic_deploy(service: str = "checkout") -> dict[str, Any]:
    return {
        "service": service,
        "version": "2026.11.30-1",
        "status": "failed",
        "url": "https://ci.example/run/42",
    }


# --------------------------------------------------------------------------- signing


def dumps(payload: Any) -> bytes:
    return json.dumps(payload, separators=(",", ":")).encode()


def github_headers(
    body: bytes, delivery: str, event: str = "issues", secret: str = GITHUB_SECRET
) -> dict[str, str]:
    sig = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "User-Agent": "GitHub-Hookshot/044aadd",
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery,
        "X-GitHub-Hook-ID": "292430182",
        "X-Hub-Signature-256": sig,
    }


def slack_headers(body: bytes, *, timestamp: int | None = None, secret: str = SLACK_SECRET) -> dict[str, str]:
    ts = str(int(time.time()) if timestamp is None else timestamp)
    sig = "v0=" + hmac.new(secret.encode(), b"v0:" + ts.encode() + b":" + body, hashlib.sha256).hexdigest()
    return {
        "Content-Type": "application/json",
        "User-Agent": "Slackbot 1.0 (+https://api.slack.com/robots)",
        "X-Slack-Request-Timestamp": ts,
        "X-Slack-Signature": sig,
    }


def alertmanager_headers(token: str = ALERTMANAGER_TOKEN) -> dict[str, str]:
    return {
        "Content-Type": "application/json",
        "User-Agent": "Alertmanager/0.27.0",
        "Authorization": f"Bearer {token}",
    }


def generic_headers(
    body: bytes,
    *,
    key: str | None = None,
    event: str = "deploy.failed",
    secret: str = GENERIC_SECRET,
    b64: bool = False,
) -> dict[str, str]:
    digest = hmac.new(secret.encode(), body, hashlib.sha256).digest()
    sig = base64.b64encode(digest).decode() if b64 else digest.hex()
    headers = {"Content-Type": "application/json", "X-Signature-256": f"sha256={sig}", "X-Event": event}
    if key is not None:
        headers["Idempotency-Key"] = key
    return headers


# --------------------------------------------------------------------------- HTTP


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def _request_bytes(method: str, path: str, body: bytes, headers: Mapping[str, str], host: str) -> bytes:
    lines = [
        f"{method} {path} HTTP/1.1",
        f"Host: {host}",
        f"Content-Length: {len(body)}",
        "Connection: close",
    ]
    lines += [f"{k}: {v}" for k, v in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


async def read_reply(stream: trio.SocketStream) -> Reply:
    """Read one HTTP/1.1 response, skipping a ``100 Continue`` (the server always sends Content-Length)."""
    buf = b""
    while True:
        while b"\r\n\r\n" not in buf:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise ConnectionError(f"closed before a response: {buf!r}")
            buf += chunk
        head, _, buf = buf.partition(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in header_lines)}
        status = int(status_line.split()[1])
        if status == 100:
            continue
        length = int(headers.get("content-length", "0"))
        while len(buf) < length:
            chunk = await stream.receive_some(65536)
            if not chunk:
                break
            buf += chunk
        return Reply(status, headers, buf[:length])


async def post(
    port: int,
    path: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    method: str = "POST",
    timeout: float = REPLY_BOUND,
) -> Reply:
    """One request on a fresh connection (what a webhook sender does); returns the response."""
    with trio.fail_after(timeout):
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        async with stream:
            await stream.send_all(_request_bytes(method, path, body, headers, f"127.0.0.1:{port}"))
            return await read_reply(stream)


# --------------------------------------------------------------------------- hostile clients

#: ``python -c HOSTILE_CLIENTS PORT COUNT SECONDS``: COUNT connections to 127.0.0.1:PORT, each sending
#: half a request line and holding it; one the server answers or closes is reopened at once (as
#: fast as they are cut). Stops by itself after SECONDS (a bounded loop); prints ``ready`` once every
#: connection sent its half line, then at the end ``opened cut`` (connections made, and cut).
HOSTILE_CLIENTS = """
import selectors, socket, sys, time
port, count, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
HALF = b"POST /hooks/github HT"
sel = selectors.DefaultSelector()
opened = cut = sent = 0
def reopen():
    global opened
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect(("127.0.0.1", port))
    except BlockingIOError:
        pass
    except OSError:
        s.close()
        return
    sel.register(s, selectors.EVENT_WRITE, False)
    opened += 1
def drop(s):
    sel.unregister(s)
    s.close()
for _ in range(count):
    reopen()
deadline = time.monotonic() + seconds
ready = False
while (left := deadline - time.monotonic()) > 0:
    if len(sel.get_map()) < count:
        reopen()
    for key, _ in sel.select(min(left, 0.5)):
        s = key.fileobj
        if not key.data:  # connected (or failed): send half a request line, then hold it
            try:
                if s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) or s.send(HALF) != len(HALF):
                    raise OSError
            except OSError:
                drop(s)
                continue
            sel.modify(s, selectors.EVENT_READ, True)
            sent += 1
            if not ready and sent >= count:
                ready = True
                print("ready", flush=True)
        else:  # answered (408, 503) or closed: cut; open another at once
            try:
                s.recv(4096)
            except OSError:
                pass
            drop(s)
            cut += 1
            reopen()
print(opened, cut, flush=True)
"""


# --------------------------------------------------------------------------- the server


@dataclass
class WebhookServer:
    """``agentd serve webhook --http 127.0.0.1:0 --listen 127.0.0.1:PORT`` running; its stderr collected."""

    proc: trio.Process
    mcp_url: str
    hooks_port: int
    stderr: bytearray = field(default_factory=bytearray)

    @property
    def text(self) -> str:
        return self.stderr.decode(errors="replace")


def webhook_argv(
    directory: str, *extra: str, listen: str = "127.0.0.1:0", sources: Sequence[str] = SOURCE_FLAGS
) -> list[str]:
    return [
        sys.executable, "-m", "agentd", "serve", "webhook", "--http", "127.0.0.1:0",
        "--listen", listen, "--dir", directory, *sources, *extra,
    ]  # fmt: skip


@asynccontextmanager
async def webhook_server(
    argv: Sequence[str], *, env: Mapping[str, str] | None = None, kill: bool = False
) -> AsyncIterator[WebhookServer]:
    """Start the server; yield once both addresses are printed; SIGTERM it after (``kill``: SIGKILL)."""
    proc = await trio.lowlevel.open_process(
        list(argv),
        cwd=REPO,
        env=server_env(**SECRET_ENV, **(env or {})),
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    server: WebhookServer | None = None
    try:
        assert proc.stderr is not None
        buf = bytearray()
        with trio.fail_after(START_BOUND):
            while (
                b"listening on " not in buf or b"receiving webhooks on " not in buf or not buf.endswith(b"\n")
            ):
                chunk = await proc.stderr.receive_some()
                assert chunk, f"the server exited before listening: {buf.decode(errors='replace')}"
                buf += chunk
        text = buf.decode()
        mcp_url = text.split("listening on ", 1)[1].split()[0]
        hooks = text.split("receiving webhooks on ", 1)[1].split()[0]
        port = int(hooks.split("/hooks/", 1)[0].rsplit(":", 1)[1])
        server = WebhookServer(proc, mcp_url, port, buf)
        async with trio.open_nursery() as nursery:

            async def drain() -> None:
                assert proc.stderr is not None
                while chunk := await proc.stderr.receive_some():
                    server.stderr += chunk

            nursery.start_soon(drain)
            try:
                yield server
            finally:
                if kill and proc.returncode is None:
                    proc.kill()
                await stop(proc, grace=10)
                nursery.cancel_scope.cancel()
    finally:
        await stop(proc, grace=10)


# --------------------------------------------------------------------------- agentd with the server


def agentd_shim(tmp: Path) -> dict[str, str]:
    """Env for an agentd whose configuration says ``command = "agentd"`` (the examples, as shipped):
    ``agentd`` on PATH is this checkout, run by this interpreter."""
    bin_dir = tmp / "bin"
    bin_dir.mkdir(exist_ok=True)
    shim = bin_dir / "agentd"
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={REPO} exec {sys.executable} -m agentd "$@"\n')
    shim.chmod(0o755)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", **SECRET_ENV}


def example_env(tmp: Path, port: int) -> dict[str, str]:
    """The examples' variables: this port and a fresh delivery directory, the shim, the secrets."""
    return {
        **agentd_shim(tmp),
        "AGENTD_WEBHOOK_LISTEN": f"127.0.0.1:{port}",
        "AGENTD_WEBHOOK_DIR": str(tmp / "deliveries"),
        "ALERTMANAGER_WEBHOOK_TOKEN": ALERTMANAGER_TOKEN,
    }


async def post_until_answered(port: int, path: str, body: bytes, headers: Mapping[str, str]) -> Reply:
    """A sender's retries: POST until the server answers (it may be restarting), bounded by START_BOUND."""
    with trio.fail_after(START_BOUND * 2):
        while True:
            try:
                return await post(port, path, body, headers, timeout=START_BOUND)
            except (OSError, ConnectionError, trio.BrokenResourceError):
                await trio.sleep(0.2)  # a retry interval, as every webhook sender has

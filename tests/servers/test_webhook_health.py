"""What the webhook intake says when it cannot write; what cannot stop it (fault catalog WH13, issue 37 item 6).

Through the real ``agentd serve webhook``:

* its delivery directory on a full file system (a 256 KiB tmpfs mounted in a
  mount namespace of the server's own, gone with it): the sender's 503 says
  the disk is full and names no local path, ``/healthz`` answers 503 naming
  the source and why, ``webhook://status`` says ``unwritable`` (was:
  ``/healthz`` 200 while every delivery got 503, and the 503 told the sender
  the store's absolute path);
* its stderr on ``/dev/full`` or on a pipe whose reader left: deliveries are
  answered and stored, ``/healthz`` answers (was: the intake stopped on its
  first line while the MCP side went on; and a refusal logged to a pipe whose
  reader left ended the whole server: the MCP SDK's rich log handler exits on
  a broken pipe).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.leftovers import AllowedFiles
from tests.support.rawmcp import raw_server, server_env
from tests.support.webhooks import (
    REPLY_BOUND,
    SECRET_ENV,
    dumps,
    free_port,
    github_headers,
    github_issue_labeled,
    post,
    webhook_argv,
    webhook_server,
)

pytestmark = pytest.mark.fault

SOURCE = ("--source", "github=github,secret_env=GITHUB_WEBHOOK_SECRET")
TMPFS_BYTES = 256 * 1024
BIG = 48 * 1024
"""Bytes of padding in each delivery: a few fill the tmpfs."""


@pytest.fixture(autouse=True)
def _webhook_files(allow_files: AllowedFiles) -> None:
    allow_files("seg-*.jsonl", "state.json", "lock")


def _can_mount() -> bool:
    if shutil.which("unshare") is None:
        return False
    done = subprocess.run(
        [
            "unshare",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            "mount -t tmpfs -o size=4k tmpfs /mnt",
        ],
        capture_output=True,
        check=False,
        timeout=30,
    )
    return done.returncode == 0


def _filler(n: int) -> bytes:
    return dumps({**github_issue_labeled(number=n), "padding": "x" * BIG})


@pytest.mark.skipif(not _can_mount(), reason="needs unshare and a tmpfs mount (root, CAP_SYS_ADMIN)")
async def test_wh13_a_full_disk_is_a_503_without_a_path_and_healthz_says_so(tmp_path: Path) -> None:
    directory = tmp_path / "deliveries"
    directory.mkdir(mode=0o700)
    argv = webhook_argv(str(directory))
    # The server in a mount namespace of its own, its --dir a small tmpfs: full after a few deliveries.
    wrapped = [
        "unshare", "--mount", "--propagation", "private", "sh", "-c",
        f'mount -t tmpfs -o size={TMPFS_BYTES},mode=0700 tmpfs "$0" && exec "$@"', str(directory), *argv,
    ]  # fmt: skip
    async with webhook_server(wrapped) as server:
        refused = None
        for n in range(2 * TMPFS_BYTES // BIG):
            body = _filler(n)
            reply = await post(server.hooks_port, "/hooks/github", body, github_headers(body, f"fill-{n}"))
            if reply.status != 200:
                refused = reply
                break
        assert refused is not None, "the tmpfs never filled"
        assert refused.status == 503
        assert refused.headers["retry-after"] == "5"
        error = refused.json()["error"]
        assert error == "the delivery could not be stored (the disk is full); retry later"
        assert str(directory) not in refused.body.decode()
        health = await post(server.hooks_port, "/healthz", b"", {}, method="GET")
        assert health.status == 503
        assert health.json() == {"ok": False, "unwritable": {"github": "the disk is full"}}
        assert str(directory) not in health.body.decode()
    # The server's own log names the file and the fix (for the operator, not the sender).
    assert "No space left on device; free disk space" in server.text
    assert "Traceback" not in server.text


@contextlib.contextmanager
def _stderr(kind: str) -> Iterator[int]:
    """A descriptor for the server's stderr that cannot be written."""
    if kind == "dev-full":
        fd = os.open("/dev/full", os.O_WRONLY | os.O_CLOEXEC)
        try:
            yield fd
        finally:
            os.close(fd)
        return
    read, write = os.pipe2(os.O_CLOEXEC)
    os.close(read)  # the reader left before the server wrote a line
    try:
        yield write
    finally:
        os.close(write)


@pytest.mark.parametrize("kind", ["dev-full", "pipe-reader-gone"])
async def test_wh13_a_stderr_that_cannot_be_written_never_stops_the_intake(tmp_path: Path, kind: str) -> None:
    port = free_port()
    argv = [
        sys.executable, "-m", "agentd", "serve", "webhook", "--listen", f"127.0.0.1:{port}",
        "--dir", str(tmp_path / "deliveries"), *SOURCE,
    ]  # fmt: skip
    with _stderr(kind) as err:
        async with raw_server(argv, env=server_env(**SECRET_ENV), stderr=err) as client:
            await client.initialize()  # the MCP side runs: the intake is bound (before the server ran)
            for n in range(3):
                body = dumps(github_issue_labeled(number=n))
                reply = await post(
                    port, "/hooks/github", body, github_headers(body, f"ok-{n}"), timeout=REPLY_BOUND
                )
                assert reply.json() == {"ok": True, "id": f"ok-{n}", "duplicate": False}
            # A refusal is logged (to the stderr that cannot take it): the intake goes on.
            wrong = await post(port, "/hooks/github", b"{}", github_headers(b"{}", "x", secret="wrong"))
            assert wrong.status == 401
            assert (await post(port, "/healthz", b"", {}, method="GET")).json() == {"ok": True}
            events = await client.read_json("webhook://github/events")
            assert [e["id"] for e in events["events"]] == ["ok-0", "ok-1", "ok-2"]

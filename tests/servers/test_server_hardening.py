"""No bundled server can be turned against its host: symlinks, FIFOs, modes, HTTP Host/Origin/token.

Every test here runs the real server process and fails on the servers as they
were before this hardening (each says how).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import Any

import httpx2
import psutil
import pytest
import trio
from mcp import Client, StdioServerParameters

from tests.support.rawmcp import REPO, raw_server, server_env
from tests.support.servers import http_server, run_cli, serve_argv

#: A refused operation answers at once; the bound covers a loaded machine (a FIFO would block forever).
ANSWER_BOUND = 15.0
FAKE_KUBECTL = str(Path(REPO) / "tests" / "fakes" / "kubectl")
TOKEN = "0123456789abcdef0123456789abcdef"


def inbox_argv(directory: Path, *extra: str) -> list[str]:
    return serve_argv("inbox", "--agent", "bob", "--dir", str(directory), *extra)


def tool_text(result: dict[str, Any]) -> str:
    return result["content"][0]["text"]


# --------------------------------------------------------------------------- inbox writes


@pytest.mark.parametrize("kind", ["symlink", "fifo"])
async def test_respond_refuses_a_sender_inbox_that_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    """Before: a symlink was followed (the reply appended to its target); a FIFO blocked the whole server."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    target = tmp_path / "alice.inbox"
    if kind == "symlink":
        target.symlink_to(victim)
    else:
        os.mkfifo(target)
    (tmp_path / "bob.inbox").write_text(json.dumps({"id": "m1", "from": "alice", "text": "hi"}) + "\n")
    async with raw_server(inbox_argv(tmp_path)) as client:
        await client.initialize()
        await client.read_json("inbox://bob")
        with trio.fail_after(ANSWER_BOUND):
            result = await client.call_tool("respond", {"id": "m1", "text": "pwned"})
        assert result["isError"] is True
        assert (
            f"refused to reply: {target} is a {kind.replace('fifo', 'FIFO')}, not a regular file"
            in tool_text(result)
        )
        assert (await client.read_json("inbox://bob/status"))["agent"] == "bob"  # still answering
    assert victim.read_text() == "precious\n"


async def test_an_inbox_file_that_is_a_fifo_is_an_error_event_not_a_hang(tmp_path: Path) -> None:
    """Before: the start-up drain opened the FIFO and blocked; the server never answered."""
    os.mkfifo(tmp_path / "bob.inbox")
    async with raw_server(inbox_argv(tmp_path)) as client:
        with trio.fail_after(ANSWER_BOUND):
            await client.initialize()
            events = (await client.read_json("inbox://bob"))["events"]
        assert [e["type"] for e in events] == ["ERROR"]
        assert f"cannot read {tmp_path}/bob.inbox" in events[0]["message"]
        assert "it must be a regular file" in events[0]["message"]


async def test_a_fifo_sentinel_is_refused_at_once_instead_of_blocking_start_up(tmp_path: Path) -> None:
    """Before: reading the sentinel (a FIFO, planted by anyone who can write the directory) blocked forever."""
    os.mkfifo(tmp_path / ".~bob.watcher-active")
    with trio.fail_after(ANSWER_BOUND * 2):
        done = await trio.run_process(
            inbox_argv(tmp_path), capture_stderr=True, check=False, env=server_env()
        )
    assert done.returncode == 1
    assert f"{tmp_path}/.~bob.watcher-active is a FIFO, not a regular file; remove it" in done.stderr.decode()


async def test_the_inbox_position_file_is_private(tmp_path: Path) -> None:
    (tmp_path / "bob.inbox").write_text(json.dumps({"id": "m1", "from": "alice", "text": "hi"}) + "\n")
    async with raw_server(inbox_argv(tmp_path)) as client:
        await client.initialize()
        await client.read_json("inbox://bob")
        await client.call_tool("ack", {"id": "m1"})
    assert stat.S_IMODE((tmp_path / ".~bob.cursor").stat().st_mode) == 0o600


# --------------------------------------------------------------------------- memo writes


def _cmdline(proc: psutil.Process) -> str:
    try:
        return " ".join(proc.cmdline())
    except psutil.Error:  # a zombie or a process gone meanwhile (other tests' children)
        return ""


def memo_params(path: Path) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentd.servers", "memo", "--file", str(path)],
        cwd=REPO,
        env=server_env(),
    )


async def test_memo_keeps_the_mode_of_the_notes_file(tmp_path: Path) -> None:
    """Before: every write replaced a 0600 file with a 0644 one (readable by everyone)."""
    notes = tmp_path / "notes.json"
    notes.write_text("{}")
    notes.chmod(0o600)
    async with Client(memo_params(notes)) as client:
        assert not (await client.call_tool("memo_set", {"key": "secret", "value": "s3cr3t"})).is_error
    assert json.loads(notes.read_text()) == {"secret": "s3cr3t"}
    assert stat.S_IMODE(notes.stat().st_mode) == 0o600


async def test_memo_never_writes_through_a_planted_temp_symlink(tmp_path: Path) -> None:
    """Before: the temp file had a predictable name (``.notes.json.tmp-PID``), opened with O_CREAT|O_TRUNC:
    a symlink planted there redirected the write into any file the server could write."""
    notes = tmp_path / "notes.json"
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    async with Client(memo_params(notes)) as client:
        (pid,) = [p.pid for p in psutil.Process().children() if str(notes) in _cmdline(p)]
        (tmp_path / f".notes.json.tmp-{pid}").symlink_to(victim)
        assert not (await client.call_tool("memo_set", {"key": "k", "value": 1})).is_error
    assert victim.read_text() == "precious\n"
    assert json.loads(notes.read_text()) == {"k": 1}


async def test_memo_never_copies_a_corrupt_file_through_a_symlink(tmp_path: Path) -> None:
    """Before: ``PATH.corrupt`` was written with shutil.copyfile, which follows a symlink planted there."""
    notes = tmp_path / "notes.json"
    notes.write_text("not json")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "notes.json.corrupt").symlink_to(victim)
    async with Client(memo_params(notes)) as client:
        result = await client.call_tool("memo_set", {"key": "k", "value": 1})
        assert result.is_error
        assert "notes.json.corrupt is a symlink, not a regular file" in result.content[0].text  # type: ignore[union-attr]
    assert victim.read_text() == "precious\n"
    assert notes.read_text() == "not json"  # nothing replaced while the copy could not be kept


def test_memo_refuses_a_notes_path_that_is_a_symlink_or_a_fifo(tmp_path: Path) -> None:
    """Before: a symlink was read through (serving its target to the model) and replaced on the first write."""
    link = tmp_path / "notes.json"
    link.symlink_to(tmp_path / "elsewhere.json")
    refused = run_cli("memo", "--file", str(link))
    assert refused.returncode == 2
    assert (
        f"--file: '{link}' is not valid: it is a symlink; give the path of a regular file" in refused.stderr
    )
    fifo = tmp_path / "pipe.json"
    os.mkfifo(fifo)
    refused = run_cli("memo", "--file", str(fifo))
    assert refused.returncode == 2
    assert "it is a FIFO" in refused.stderr


async def test_memo_keeps_answering_when_its_file_is_swapped_for_a_fifo(tmp_path: Path) -> None:
    """Before: the watcher re-read the file on the event loop; a FIFO renamed over it blocked the server."""
    notes = tmp_path / "notes.json"
    notes.write_text('{"a": 1}')
    pushed = trio.Event()
    async with (
        Client(memo_params(notes)) as client,
        client.listen(resource_subscriptions=["memo://notes"]) as sub,
    ):
        fifo = tmp_path / "swap"
        os.mkfifo(fifo)
        os.replace(fifo, notes)
        with trio.fail_after(ANSWER_BOUND):
            await sub.__anext__()
            pushed.set()
            with pytest.raises(Exception, match=r"is a FIFO, not a regular file"):
                await client.read_resource("memo://notes")
            assert (await client.call_tool("memo_get", {"key": "a"})).is_error  # answers (with the error)
    assert pushed.is_set()


# --------------------------------------------------------------------------- files reads


async def test_files_server_refuses_a_fifo_instead_of_blocking(tmp_path: Path) -> None:
    """Before: reading file:///pipe opened the FIFO and blocked a worker thread (and the read) forever."""
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "ok.txt").write_text("fine")
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "agentd.servers", "files", "--root", str(tmp_path)],
        cwd=REPO,
        env=server_env(),
    )
    async with Client(params) as client:
        with trio.fail_after(ANSWER_BOUND):
            with pytest.raises(Exception, match=r"'pipe' is not a regular file \(a FIFO, device or socket\)"):
                await client.read_resource("file:///pipe")
            (content,) = (await client.read_resource("file:///ok.txt")).contents
        assert json.loads(content.text)["text"] == "fine"  # type: ignore[union-attr]


# --------------------------------------------------------------------------- HTTP


def server_args(name: str, tmp_path: Path) -> list[str]:
    if name == "memo":
        return []
    if name == "files":
        return ["--root", str(tmp_path)]
    if name == "inbox":
        return ["--agent", "bob", "--dir", str(tmp_path)]
    if name == "webhook":
        secret = tmp_path / "github.secret"
        secret.write_text("a-webhook-secret-for-tests\n")
        return [
            "--dir", str(tmp_path / "deliveries"), "--listen", "127.0.0.1:0",
            "--source", f"github=github,secret_file={secret}",
        ]  # fmt: skip
    return ["--kubectl", FAKE_KUBECTL]


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"},
    },
}
ACCEPT = {"accept": "application/json, text/event-stream", "content-type": "application/json"}


async def post(url: str, **headers: str) -> httpx2.Response:
    async with httpx2.AsyncClient(timeout=ANSWER_BOUND) as http:
        return await http.post(url, json=INIT, headers={**ACCEPT, **headers})


@pytest.mark.parametrize("name", ["memo", "files", "inbox", "kube", "webhook"])
async def test_http_checks_host_and_origin_on_a_loopback_alias(tmp_path: Path, name: str) -> None:
    """Before: the SDK checked Host/Origin only for 127.0.0.1, localhost and ::1; on 127.0.0.2 a DNS-rebinding
    request with ``Host: evil.example`` was served."""
    argv = serve_argv(name, "--http", "127.0.0.2:0", *server_args(name, tmp_path))
    async with http_server(argv) as server:
        assert server.url.startswith("http://127.0.0.2:")
        evil = await post(server.url, host="evil.example")
        assert evil.status_code == 421
        assert "Invalid Host header 'evil.example'" in evil.text
        origin = await post(server.url, origin="http://evil.example")
        assert origin.status_code == 403
        fine = await post(server.url)
        assert fine.status_code == 200, fine.text


async def test_http_on_the_default_loopback_checks_origin_too(tmp_path: Path) -> None:
    async with http_server(serve_argv("memo", "--http", "127.0.0.1:0")) as server:
        assert (await post(server.url, host="evil.example:80")).status_code == 421
        assert (await post(server.url, origin="http://evil.example")).status_code == 403
        assert (await post(server.url, origin=server.url.rsplit("/", 1)[0])).status_code == 200


def test_a_non_loopback_bind_needs_allow_remote_and_a_token(tmp_path: Path) -> None:
    """Before: --allow-remote alone exposed an unauthenticated server."""
    no_token = run_cli("memo", "--http", "0.0.0.0:0", "--allow-remote", "--allow-host", "box.example")
    assert no_token.returncode == 2
    assert (
        "a non-loopback bind needs a bearer token (set AGENTD_SERVE_TOKEN, or name a file holding it with "
        "--token-file); clients send it in their Authorization header" in no_token.stderr
    )
    short = run_cli(
        "memo", "--http", "0.0.0.0:0", "--allow-remote", env=server_env(AGENTD_SERVE_TOKEN="tiny-tok")
    )
    assert short.returncode == 2
    assert "it is 8 characters long: use a bearer token of at least 16 random characters" in short.stderr
    assert "tiny-tok" not in short.stderr  # a credential is never echoed, even a bad one
    wildcard = run_cli(
        "memo", "--http", "0.0.0.0:0", "--allow-remote", env=server_env(AGENTD_SERVE_TOKEN=TOKEN)
    )
    assert wildcard.returncode == 2
    assert "name the host clients use with --allow-host NAME" in wildcard.stderr


async def test_a_remote_bind_serves_only_requests_with_the_bearer_token(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    argv = serve_argv(
        "memo",
        "--http",
        "0.0.0.0:0",
        "--allow-remote",
        "--allow-host",
        "memo.example",
        "--token-file",
        str(token_file),
    )
    async with http_server(argv) as server:
        port = server.url.rsplit(":", 1)[1].split("/")[0]
        url = f"http://127.0.0.1:{port}/mcp"
        assert (await post(url)).status_code == 401
        assert (await post(url, authorization="Bearer wrong-token-wrong-token")).status_code == 401
        assert (await post(url, authorization=f"Bearer {TOKEN}", host="evil.example")).status_code == 421
        assert (
            await post(url, authorization=f"Bearer {TOKEN}", host=f"memo.example:{port}")
        ).status_code == 200
        assert (await post(url, authorization=f"Bearer {TOKEN}")).status_code == 200

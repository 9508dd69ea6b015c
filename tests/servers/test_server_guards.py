"""The bundled servers' guards, in process: safe file access and the HTTP Host/Origin/token check."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import pytest
import trio

from agentd.servers._httpguard import HostOriginGuard, HttpPolicy, host_of
from agentd.servers._safefs import UnsafePath, append_regular, read_regular, write_atomic

# ----------------------------------------------------------------------------- files


def test_write_atomic_keeps_the_mode_and_leaves_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text("{}")
    path.chmod(0o600)
    write_atomic(str(path), b'{"a": 1}')
    assert path.read_bytes() == b'{"a": 1}'
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.json"]
    fresh = tmp_path / "new.json"
    old_umask = os.umask(0o022)
    try:
        write_atomic(str(fresh), b"x", new_mode=0o640)
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o640


@pytest.mark.parametrize("kind", ["symlink", "fifo", "directory"])
def test_every_write_and_read_refuses_what_is_not_a_regular_file(tmp_path: Path, kind: str) -> None:
    victim = tmp_path / "victim"
    victim.write_text("precious")
    path = tmp_path / "target"
    if kind == "symlink":
        path.symlink_to(victim)
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    what = {"symlink": "a symlink", "fifo": "a FIFO", "directory": "a directory"}[kind]
    with pytest.raises(UnsafePath, match=f"target is {what}, not a regular file"):
        write_atomic(str(path), b"x")
    with pytest.raises(UnsafePath, match=f"is {what}, not a regular file"):
        append_regular(str(path), b"x")
    with pytest.raises(UnsafePath, match=f"is {what}, not a regular file"):
        read_regular(str(path))
    assert victim.read_text() == "precious"
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_paths_relative_to_a_directory_descriptor(tmp_path: Path) -> None:
    dfd = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        write_atomic("a.json", b"1", dir_fd=dfd)
        append_regular("a.log", b"line\n", dir_fd=dfd)
        assert read_regular("a.json", dir_fd=dfd) == b"1"
        assert (tmp_path / "a.log").read_bytes() == b"line\n"
    finally:
        os.close(dfd)


# ----------------------------------------------------------------------------- HTTP


def test_host_of_header_values() -> None:
    assert host_of("[::1]:8080") == "::1"
    assert host_of("Example.COM:80") == "example.com"
    assert host_of("127.0.0.2") == "127.0.0.2"


def test_policy_for_each_kind_of_bind() -> None:
    assert HttpPolicy.for_bind("127.0.0.2").allowed_hosts == {"127.0.0.2", "localhost", "127.0.0.1", "::1"}
    assert HttpPolicy.for_bind("10.1.2.3", ["box.lan"]).allowed_hosts == {"10.1.2.3", "box.lan"}
    assert HttpPolicy.for_bind("0.0.0.0", ["box.lan"]).allowed_hosts == {
        "box.lan",
        "localhost",
        "127.0.0.1",
        "::1",
    }


async def call(guard: HostOriginGuard, headers: dict[str, str]) -> tuple[int, bytes]:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(message: Any) -> None:
        sent.append(message)

    scope = {"type": "http", "headers": [(k.encode(), v.encode()) for k, v in headers.items()]}
    await guard(scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


async def test_guard_checks_host_origin_and_token_before_the_app() -> None:
    reached: list[Any] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        reached.append(scope)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    guard = HostOriginGuard(app, HttpPolicy.for_bind("127.0.0.2", token="t" * 20))
    auth = {"authorization": "Bearer " + "t" * 20}
    assert (await call(guard, {"host": "evil.example", **auth}))[0] == 421
    assert (await call(guard, auth))[0] == 421  # no Host at all
    assert (await call(guard, {"host": "127.0.0.2:9", "origin": "http://evil.example", **auth}))[0] == 403
    assert (await call(guard, {"host": "127.0.0.2:9", "origin": "null", **auth}))[0] == 403
    assert (await call(guard, {"host": "127.0.0.2:9"}))[0] == 401
    assert (await call(guard, {"host": "127.0.0.2:9", "authorization": "Bearer nope"}))[0] == 401
    assert reached == []
    assert await call(guard, {"host": "localhost:9", "origin": "http://127.0.0.2:9", **auth}) == (200, b"ok")
    assert len(reached) == 1
    await trio.lowlevel.checkpoint()

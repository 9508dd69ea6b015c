"""agentd.state.files (component): state files opened without links or waits, read with a bound, moved aside.

Real files, FIFOs, links and devices in ``tmp_path``; files of "another user"
are planted with ``os.chown`` (the suite runs as root in CI; skipped otherwise).
Also the users of the module whose rules are easiest to see here: the state
directory's checks, the ``--watch-state`` refusals and the OAuth token cache.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

import pytest
import trio
from mcp.shared.auth import OAuthToken

from agentd.core.errors import ConfigError, NotAFile, NotOurs
from agentd.state import dir as state_dir
from agentd.state import files
from agentd.upstream.auth import TokenCache
from agentd.watches import state as watch_state
from tests.support.telemetry import RecordingTelemetry

STRANGER = 4242


def _as_root() -> None:
    if os.geteuid() != 0:
        pytest.skip("planting another user's file needs root (CI runs as root)")


def _not_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """One of each thing that is not a regular file, by name: (path, what ``kind`` calls it)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    target = tmp_path / "target"
    target.write_bytes(b"the target\n")
    link.symlink_to(target)
    directory = tmp_path / "dir"
    directory.mkdir()
    zero = tmp_path / "zero"
    zero.symlink_to("/dev/zero")
    return {
        "fifo": (fifo, "a FIFO (named pipe)"),
        "link": (link, "a symbolic link"),
        "link-to-dev-zero": (zero, "a symbolic link"),
        "directory": (directory, "a directory"),
        "device": (Path("/dev/null"), "a character device"),
    }


# ------------------------------------------------------------------ opening and reading


def test_only_a_regular_file_of_agentds_user_is_opened(tmp_path: Path) -> None:
    for name, (path, what) in _not_files(tmp_path).items():
        for flags in (os.O_RDONLY, os.O_WRONLY, os.O_RDWR | os.O_CREAT):
            with pytest.raises(NotAFile, match=re.escape(f"is {what}, not a regular file")) as e:
                files.open_state_file(path, flags)
            assert e.value.kind == what, name
    assert (tmp_path / "target").read_bytes() == b"the target\n"  # never written through the link
    good = tmp_path / "good"
    good.write_bytes(b"x" * 100)
    assert files.read_state_file(good, 10) == b"x" * 11  # one past the bound shows it was passed
    assert files.read_state_file(good) == b"x" * 100
    fd = files.open_state_file(tmp_path / "new", os.O_RDWR | os.O_CREAT)
    os.close(fd)
    assert stat.S_IMODE((tmp_path / "new").stat().st_mode) == 0o600
    with pytest.raises(FileNotFoundError):
        files.read_state_file(tmp_path / "absent")


def test_another_users_file_is_refused(tmp_path: Path) -> None:
    _as_root()
    theirs = tmp_path / "theirs"
    theirs.write_bytes(b"planted")
    os.chown(theirs, STRANGER, STRANGER)
    with pytest.raises(NotOurs, match=f"is owned by uid {STRANGER}, not by agentd's user"):
        files.read_state_file(theirs)
    with pytest.raises(NotOurs):
        files.replace_if_not_a_file(theirs, os.O_RDWR | os.O_CREAT)
    assert theirs.read_bytes() == b"planted"


def test_a_file_the_user_names_may_be_a_link_but_never_a_fifo_device_or_directory(tmp_path: Path) -> None:
    things = _not_files(tmp_path)
    assert files.read_regular_file(things["link"][0], 100) == b"the target\n"
    for name in ("fifo", "link-to-dev-zero", "directory", "device"):
        path, _what = things[name]
        with pytest.raises(NotAFile) as e:
            files.read_regular_file(path, 100)  # a FIFO would block here without O_NONBLOCK + stat first
        assert e.value.kind in ("a FIFO (named pipe)", "a directory", "a character device"), name


# ------------------------------------------------------------------ the repair


def test_what_is_not_a_file_is_moved_aside_as_it_is_and_a_new_file_made(tmp_path: Path) -> None:
    for name, (path, what) in _not_files(tmp_path).items():
        if name == "device":
            continue  # /dev/null is not the test's to move
        fd, moved = files.replace_if_not_a_file(path, os.O_RDWR | os.O_CREAT)
        os.write(fd, b"123\n")
        os.close(fd)
        assert moved is not None
        assert moved.problem == f"is {what}, not a regular file"
        assert moved.moved_to.name.startswith(f"{path.name}.unsafe-")
        assert path.read_bytes() == b"123\n"
        assert not path.is_symlink()
    assert (tmp_path / "target").read_bytes() == b"the target\n"
    assert os.readlink(next(tmp_path.glob("link.unsafe-*"))) == str(tmp_path / "target")
    assert stat.S_ISFIFO(next(tmp_path.glob("fifo.unsafe-*")).lstat().st_mode)
    fd, moved = files.replace_if_not_a_file(tmp_path / "fifo", os.O_RDWR)
    os.close(fd)
    assert moved is None  # a regular file now: opened as it is


def test_move_aside_never_overwrites_an_earlier_one(tmp_path: Path) -> None:
    first = tmp_path / "f"
    first.write_bytes(b"1")
    assert files.move_aside(first, files.CORRUPT, now=0.0).name == "f.corrupt-19700101T000000Z"
    first.write_bytes(b"2")
    assert files.move_aside(first, files.CORRUPT, now=0.0).name == "f.corrupt-19700101T000000Z-2"
    assert (tmp_path / "f.corrupt-19700101T000000Z").read_bytes() == b"1"


# ------------------------------------------------------------------ directories


def test_a_private_directory_is_made_0700_and_one_others_may_write_is_refused(tmp_path: Path) -> None:
    old = os.umask(0o777)  # the umask takes every bit: the directory is still exactly 0700
    try:
        files.make_private_dir(tmp_path / "mine")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "mine").stat().st_mode) == 0o700
    files.make_private_dir(tmp_path / "mine")  # there already, and fine
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o1777)
    with pytest.raises(NotOurs, match=r"writable by group and others \(mode 1777, .*run `chmod 700 "):
        files.make_private_dir(shared)
    (tmp_path / "link").symlink_to(tmp_path / "mine")
    with pytest.raises(NotAFile, match="is a symbolic link"):
        files.make_private_dir(tmp_path / "link")


def test_the_state_dir_refusal_names_the_directory_its_mode_and_the_fix(tmp_path: Path) -> None:
    state = tmp_path / "state"
    assert state_dir.refusal(state) is None  # missing: agentd creates it
    state.mkdir(mode=0o755)
    assert state_dir.refusal(state) is None  # readable by others is allowed: every file is 0600
    state.chmod(0o775)
    why = state_dir.refusal(state)
    assert why is not None
    assert why.startswith("it is writable by group (mode 0775, owner uid ")
    assert why.endswith(f"run `chmod 700 {state}`")
    state.chmod(0o700)
    (state / "oauth").symlink_to(tmp_path)
    why = state_dir.refusal(state)
    assert why == (
        f"its subdirectory {str(state / 'oauth')!r} is a symbolic link, not a directory; remove it "
        "(agentd creates the directory, mode 0700)"
    )
    with pytest.raises(ConfigError, match=r"--state-dir: .* is not valid: its subdirectory"):
        state_dir.claim(state)


def test_a_lock_file_another_user_owns_is_refused(tmp_path: Path) -> None:
    _as_root()
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    lock = state / ".agentd.lock"
    lock.write_text("1\n")
    os.chown(lock, STRANGER, STRANGER)
    with pytest.raises(ConfigError, match=f"its lock file .* is owned by uid {STRANGER}"):
        state_dir.claim(state)
    assert lock.read_text() == "1\n"


# ------------------------------------------------------------------ --watch-state


def test_watch_state_named_by_the_operator_is_refused_but_in_the_state_dir_moved_aside(
    tmp_path: Path,
) -> None:
    real = tmp_path / "real.json"
    real.write_text('{"version": 1, "watches": []}')
    link = tmp_path / "watches.json"
    link.symlink_to(real)
    why = watch_state.refusal(link)
    assert why is not None
    assert why.startswith("is a symbolic link, not a regular file; agentd replaces the file by renaming")
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    assert watch_state.refusal(fifo, own_dir=True) is None
    lock = watch_state.claim(fifo, own_dir=True)
    try:
        (moved,) = lock.moved_aside
        assert moved.path == fifo
        assert moved.problem == "is a FIFO (named pipe), not a regular file"
        assert stat.S_ISFIFO(moved.moved_to.lstat().st_mode)
        assert not fifo.exists()
    finally:
        lock.release()


def test_watch_state_another_user_owns_is_refused(tmp_path: Path) -> None:
    _as_root()
    path = tmp_path / "watches.json"
    path.write_text('{"version": 1, "watches": []}')
    os.chown(path, STRANGER, STRANGER)
    why = watch_state.refusal(path)
    assert why is not None
    assert why.startswith(f"is owned by uid {STRANGER}, not by agentd's user")
    with pytest.raises(watch_state.WatchStateError, match="left untouched"):
        watch_state.load(path)


# ------------------------------------------------------------------ the OAuth token cache

TOKEN = OAuthToken(access_token="t0k", token_type="Bearer", expires_in=3600)


async def test_a_token_cache_that_is_not_a_file_is_moved_aside_and_the_token_cached_anew(
    tmp_path: Path,
) -> None:
    oauth = tmp_path / "oauth"
    oauth.mkdir(mode=0o700)
    path = oauth / "s.json"
    path.symlink_to("/dev/zero")
    telemetry = RecordingTelemetry()
    cache = TokenCache(path, "b", telemetry)
    assert await cache.get_tokens() is None
    (moved,) = telemetry.find("state.moved_aside")
    assert (moved["file"], moved["problem"]) == (
        "oauth token cache",
        "is a symbolic link, not a regular file",
    )
    await cache.set_tokens(TOKEN)
    assert cache.write_error is None
    assert path.is_file()
    assert not path.is_symlink()
    again = TokenCache(path, "b")
    token = await again.get_tokens()
    assert token is not None
    assert token.access_token == "t0k"


@pytest.mark.parametrize(
    ("content", "event", "problem"),
    [
        (b'{"binding": "b", "expires_at": 9', "state.moved_aside", "it is cut short"),
        (b'{"binding": "b", "token": {"access_token": 3}}', "state.moved_aside", "its token is not valid"),
        (b'{"profile": "default"}', "state.refused", "it is not an agentd token cache"),
        (b"export TOKEN=x\n", "state.refused", "it is not JSON"),
    ],
)
async def test_a_damaged_token_cache_is_moved_aside_and_a_foreign_file_left_alone(
    tmp_path: Path, content: bytes, event: str, problem: str
) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(content)
    telemetry = RecordingTelemetry()
    cache = TokenCache(path, "b", telemetry)
    assert await cache.get_tokens() is None
    (found,) = telemetry.find(event)
    assert problem in found["problem"]
    await cache.set_tokens(TOKEN)
    if event == "state.refused":
        assert path.read_bytes() == content  # never replaced: the token stays in memory
        assert cache.write_error is not None
        assert "not caching the token" in cache.write_error
    else:
        assert await trio.Path(found["moved_to"]).read_bytes() == content
        assert cache.write_error is None
        assert b'"access_token": "t0k"' in path.read_bytes()

"""The delivery directory obeys the state directory's rules (fault catalog WH12, issue 37 item 4).

Through the real ``agentd serve webhook``: a ``--dir`` (or a source's
directory) that others may write is refused with exit 2 and the ``chmod``
that fixes it, and nothing is written there; one of the server's user that
only its group may write (Kubernetes' ``fsGroup``) is tightened to 0700; a
directory the server creates is 0700 whatever the umask; a segment or
``state.json`` another user owns is
refused by name and left exactly as it was (was: the directory used without
a word, and another user's segment served as a verified, pending delivery).
"""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.leftovers import AllowedFiles
from tests.support.rawmcp import REPO, server_env
from tests.support.webhooks import SECRET_ENV

pytestmark = pytest.mark.fault

SOURCE = ("--source", "github=github,secret_env=GITHUB_WEBHOOK_SECRET")
RUN_BOUND = 60.0
"""Seconds for ``agentd serve webhook`` to start and exit (its imports on a loaded machine)."""
NOBODY = 65534

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's file needs root")


@pytest.fixture(autouse=True)
def _webhook_files(allow_files: AllowedFiles) -> None:
    allow_files("seg-*.jsonl", "state.json", "lock", "planted")


def serve(directory: Path, *extra: str, umask: int = 0o022) -> subprocess.CompletedProcess[str]:
    """``agentd serve webhook --dir DIRECTORY`` on stdio, stdin at EOF: it opens its stores, binds, and
    (started) ends at once with stdin's EOF."""
    return subprocess.run(
        [sys.executable, "-m", "agentd", "serve", "webhook", "--listen", "127.0.0.1:0", "--dir", str(directory),
         *SOURCE, *extra],
        cwd=REPO,
        env=server_env(**SECRET_ENV),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_BOUND,
        check=False,
        umask=umask,
    )  # fmt: skip


@pytest.mark.parametrize("which", ["dir", "source"])
def test_wh12_a_world_writable_delivery_directory_is_refused_with_the_fix(tmp_path: Path, which: str) -> None:
    base = tmp_path / "deliveries"
    base.mkdir(mode=0o700)
    target = base if which == "dir" else base / "github"
    target.mkdir(exist_ok=True)
    target.chmod(0o777)
    before = sorted(p.name for p in target.iterdir())
    done = serve(base)
    assert done.returncode == 2, done.stderr
    assert "is writable by group and others (mode 0777" in done.stderr
    assert f"chmod 700 {target}" in done.stderr
    assert "Traceback" not in done.stderr
    assert sorted(p.name for p in target.iterdir()) == before  # nothing written there


def test_wh12_a_directory_of_this_user_its_group_may_write_is_tightened_to_0700(tmp_path: Path) -> None:
    """What Kubernetes' ``fsGroup`` makes of a volume's directories at every mount (g+rwx, setgid): the
    server's own directory, tightened and used, said in the log."""
    base = tmp_path / "deliveries"
    (base / "github").mkdir(parents=True)
    for d in (base, base / "github"):
        d.chmod(0o2770)
    done = serve(base)
    assert done.returncode == 0, done.stderr
    assert (
        f"the delivery directory {base} was writable by its group (mode 2770); it is 0700 now" in done.stderr
    )
    for d in (base, base / "github"):
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, d


def test_wh12_directories_the_server_creates_are_0700_whatever_the_umask(tmp_path: Path) -> None:
    """Created with umask 000 (a world-writable default): still 0700. The run then stops at a port in
    use, after its stores were opened."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "agentd", "serve", "webhook", "--listen", f"127.0.0.1:{port}",
             "--dir", str(tmp_path / "new" / "deliveries"), *SOURCE],
            cwd=REPO, env=server_env(**SECRET_ENV), stdin=subprocess.DEVNULL, capture_output=True, text=True,
            timeout=RUN_BOUND, check=False, umask=0,
        )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert "cannot receive webhooks on" in done.stderr
    for made in (tmp_path / "new" / "deliveries", tmp_path / "new" / "deliveries" / "github"):
        assert stat.S_IMODE(made.stat().st_mode) == 0o700, made
    assert stat.S_IMODE((tmp_path / "new" / "deliveries" / "github" / "lock").stat().st_mode) == 0o600


def _planted_line() -> bytes:
    """A delivery line as the server writes them: what another user would plant to be served."""
    record = {
        "v": 1, "id": "planted-1", "key": "planted-1", "source": "github", "kind": "github",
        "event": "issues", "received": "2026-12-01T00:00:00.000Z", "at": 1.0, "headers": {},
        "body": {"action": "labeled", "note": "planted by another user"},
    }  # fmt: skip
    return json.dumps(record).encode() + b"\n"


@root_only
@pytest.mark.parametrize("name", ["seg-00000000000000000000.jsonl", "state.json"])
def test_wh12_a_file_another_user_owns_is_refused_and_left_as_it_is(tmp_path: Path, name: str) -> None:
    source_dir = tmp_path / "deliveries" / "github"
    source_dir.mkdir(parents=True, mode=0o700)
    (tmp_path / "deliveries").chmod(0o700)
    planted = source_dir / name
    content = _planted_line() if name.startswith("seg-") else b'{"version": 1, "cursor": {}}'
    planted.write_bytes(content)
    os.chown(planted, NOBODY, NOBODY)
    before = planted.stat()
    done = serve(tmp_path / "deliveries")
    assert done.returncode == 1, done.stderr
    assert f"{planted} is owned by uid {NOBODY}" in done.stderr
    assert "neither read nor replaced; remove it if it is not wanted" in done.stderr
    after = planted.stat()
    assert planted.read_bytes() == content
    assert (after.st_uid, after.st_size, after.st_mtime_ns) == (
        before.st_uid,
        before.st_size,
        before.st_mtime_ns,
    )
    assert "Traceback" not in done.stderr

"""The files server's pure core: root confinement, snapshot diff, file bodies."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import pytest

from agentd.servers._inotify import IN_CLOSE_WRITE, IN_DELETE, IN_ISDIR, IN_MOVED_FROM, TreeEvent
from agentd.servers.files import (
    FileStat,
    PathRefused,
    TreeSnapshot,
    dirty_paths,
    file_body,
    resolve_in_root,
)


@pytest.fixture
def root(tmp_path: Path) -> str:
    r = tmp_path / "root"
    (r / "sub").mkdir(parents=True)
    (r / "sub" / "f.txt").write_text("x")
    (r / "inner").symlink_to(r / "sub")
    (r / "out").symlink_to(tmp_path)
    return os.path.realpath(r)


@pytest.mark.parametrize("raw", ["", ".", "sub", "sub/f.txt", "sub/../sub/f.txt", "inner/f.txt"])
def test_paths_inside_the_root_resolve(root, raw):
    assert resolve_in_root(root, raw, uri="u").startswith(root)


def test_absolute_path_inside_root_is_accepted(root):
    assert resolve_in_root(root, f"{root}/sub", uri="u") == f"{root}/sub"


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ("..", r"leads outside the served root .* \(through '\.\.'"),
        ("sub/../../x", r"through '\.\.'"),
        ("/etc/passwd", r"'/etc/passwd' is outside the served root"),
        ("out/secret", r"symlink to .* outside the served root"),
        ("a\0b", r"NUL byte"),
    ],
)
def test_paths_outside_the_root_are_refused(root, raw, match):
    with pytest.raises(PathRefused, match=match):
        resolve_in_root(root, raw, uri="file:///x")


def test_root_prefix_is_not_containment(tmp_path):
    (tmp_path / "rootx").mkdir()
    with pytest.raises(PathRefused):
        resolve_in_root(str(tmp_path / "root"), str(tmp_path / "rootx"), uri="u")


def test_snapshot_diff_coalesces_a_temp_file_and_rename():
    snap = TreeSnapshot("/r", "/r", {"/r/a.txt": FileStat(1, 10, 7)})
    after = {"/r/a.txt": FileStat(5, 20, 8)}  # replaced by a renamed temp file (new inode)
    drafts = snap.update(["/r/.a.txt.swp", "/r/a.txt", "/r/.a.txt.swp"], after.get)
    assert drafts == [{"type": "MODIFIED", "path": "a.txt", "size": 5, "mtime": 20e-9}]
    assert snap.update(["/r/a.txt"], after.get) == []  # no change, no event


def test_snapshot_added_deleted_and_rescan():
    snap = TreeSnapshot("/r", "/r/d", {"/r/d/gone": FileStat(1, 1, 1)})
    fresh = {"/r/d/new": FileStat(2, 2, 2)}
    drafts = snap.replace(fresh)
    assert [(d["type"], d["path"]) for d in drafts] == [("DELETED", "d/gone"), ("ADDED", "d/new")]
    assert snap.files == fresh


def test_directory_moved_away_marks_its_files_dirty():
    snap = TreeSnapshot(
        "/r", "/r", {"/r/d/a": FileStat(1, 1, 1), "/r/d/b": FileStat(1, 1, 2), "/r/e": FileStat(1, 1, 3)}
    )
    dirty, overflow, gone = dirty_paths(
        [TreeEvent("/r/d", IN_MOVED_FROM | IN_ISDIR), TreeEvent("/r/x", IN_CLOSE_WRITE)], snap
    )
    assert dirty == {"/r/d/a", "/r/d/b", "/r/x"}
    assert (overflow, gone) == (False, False)
    _, overflow, _ = dirty_paths([TreeEvent("/r", IN_DELETE, overflow=True)], snap)
    assert overflow


def test_file_body_text_binary_and_big(tmp_path):
    root = str(tmp_path)
    (tmp_path / "t.txt").write_text("héllo")
    (tmp_path / "b.bin").write_bytes(b"\x00\x01")
    (tmp_path / "bad.txt").write_bytes(b"\xff\xfe")
    (tmp_path / "big.txt").write_text("y" * 100)
    assert file_body(root, str(tmp_path / "t.txt"), max_text_bytes=64) == {
        "path": "t.txt",
        "size": 6,
        "text": "héllo",
    }
    assert (
        file_body(root, str(tmp_path / "b.bin"), max_text_bytes=64)["sha256"]
        == hashlib.sha256(b"\x00\x01").hexdigest()
    )
    assert "sha256" in file_body(root, str(tmp_path / "bad.txt"), max_text_bytes=64)
    big = file_body(root, str(tmp_path / "big.txt"), max_text_bytes=64)
    assert big == {"path": "big.txt", "size": 100, "sha256": hashlib.sha256(b"y" * 100).hexdigest()}
    with pytest.raises(IsADirectoryError):
        file_body(root, root, max_text_bytes=64)

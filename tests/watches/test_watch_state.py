"""The --watch-state file: round trip, corrupt and foreign files, unwritable directories,
crash safety, the one-owner lock."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import orjson
import pytest

from agentd.core.errors import ConfigError
from agentd.state import files
from agentd.watches.extract import EventLogExtractor, StateExtractor, extractor_from_baseline
from agentd.watches.state import (
    STATE_FORMAT_VERSION,
    Loaded,
    WatchSpec,
    WatchStateError,
    WatchStateFile,
    claim,
    encode,
    leftover_temps,
    load,
    lock_path,
    refusal,
    save,
)

REPO = Path(__file__).resolve().parents[2]


def specs() -> list[WatchSpec]:
    log = EventLogExtractor()
    log.feed('{"events": [{"seq": 41, "type": "ADDED"}]}')
    state = StateExtractor()
    state.feed('{"todo": "a"}')
    return [
        WatchSpec(
            name="cm",
            uri="kcp-events://watch/root:app/configmaps?namespace=*",
            on_event='event["type"]',
            owner="sess-1",
            baseline=log.baseline(),
        ),
        WatchSpec(name="notes", uri="memo://notes", on_event=None, owner="sess-1", baseline=state.baseline()),
        WatchSpec(name="cfg", uri="memo://cfg"),
    ]


def test_round_trip(tmp_path):
    path = tmp_path / "watches.json"
    save(path, specs())
    got = load(path)
    assert got.warnings == []
    assert got.moved_aside is None
    loaded = got.specs
    assert loaded == specs()
    assert leftover_temps(path) == []
    # Baselines resume: the event-log one continues after seq 41.
    x = extractor_from_baseline(loaded[0].baseline, shape="event-log")
    assert [e["seq"] for e in x.feed('{"events": [{"seq": 41, "type": "A"}, {"seq": 42, "type": "B"}]}')] == [
        42
    ]


def test_state_file_class_and_rewrite_on_stop(tmp_path):
    f = WatchStateFile(tmp_path / "w.json")
    f.save(specs())
    f.save(specs()[1:])  # watch_stop("cm")
    loaded = f.load().specs
    assert [s.name for s in loaded] == ["notes", "cfg"]


def test_missing_or_empty_file_is_empty(tmp_path):
    assert load(tmp_path / "absent.json") == Loaded()
    (tmp_path / "touched.json").write_bytes(b"\n")
    assert load(tmp_path / "touched.json") == Loaded()
    assert (tmp_path / "touched.json").exists()


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b'{"version": 1, "watches": [{"name": "cm", "uri": ', "unexpected"),  # agentd's, cut short
        (b'{"version": "1", "watches": []}', "version is '1'"),
        (b'{"version": 1, "watches": {}}', "expected"),
        (b'{"watches": [ {"name', "unexpected"),  # agentd's shape, keys in another order, cut short
        (b'{\n  "vers', "unexpected"),  # cut inside the first key
    ],
)
def test_a_damaged_state_file_is_moved_aside_and_loading_continues(tmp_path, content, problem):
    path = tmp_path / "watches.json"
    path.write_bytes(content)
    assert refusal(path) is None  # agentd's own file, even broken: usable
    got = load(path, now=0.0)
    assert (got.specs, got.warnings) == ([], [])
    aside = tmp_path / "watches.json.corrupt-19700101T000000Z"
    assert aside.read_bytes() == content
    assert not path.exists()
    assert got.moved_aside is not None
    assert (got.moved_aside.path, got.moved_aside.moved_to) == (path, aside)
    assert "is not valid watch state" in got.moved_aside.problem
    assert problem.lower() in got.moved_aside.problem.lower()
    # A second damaged file in the same second does not overwrite the first.
    path.write_bytes(b'{"version": ')
    load(path, now=0.0)
    assert (tmp_path / "watches.json.corrupt-19700101T000000Z-2").read_bytes() == b'{"version": '


def test_a_file_cut_short_keeps_every_watch_written_whole_before_the_cut(tmp_path):
    path = tmp_path / "watches.json"
    whole = encode(specs())
    # Cut inside the third entry: the first two were written whole.
    cut = whole[: whole.index(b'"cfg"') + 3]
    path.write_bytes(cut)
    got = load(path, now=0.0)
    assert got.specs == specs()[:2]
    assert got.moved_aside is not None
    assert (tmp_path / "watches.json.corrupt-19700101T000000Z").read_bytes() == cut
    # Over the size bound: agentd's own file, damaged; what is in the bound is kept.
    path.write_bytes(whole)
    import agentd.watches.state as state_module

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(state_module, "MAX_WATCH_STATE_BYTES", len(cut))
        got = load(path, now=0.0)
    assert got.specs == specs()[:2]
    assert got.moved_aside is not None
    assert "larger than" in got.moved_aside.problem


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"{not json", "it is not JSON"),
        (b"[]", "it is JSON list"),
        (b'{"name": "my-app", "version": "1.0.0"}', "it is JSON an object with keys ['name', 'version']"),
        (b"export PATH=/usr/bin\n", "it is not JSON"),
    ],
)
def test_a_file_that_is_not_agentds_is_refused_and_left_untouched(tmp_path, content, problem):
    path = tmp_path / "notes.txt"
    path.write_bytes(content)
    why = refusal(path)
    assert why is not None
    assert why.startswith("exists and is not an agentd watch-state file")
    assert problem in why
    assert "never overwrites or moves a file it did not write" in why
    with pytest.raises(WatchStateError, match="is not an agentd watch-state file"):
        load(path)
    with pytest.raises(ConfigError, match=r"--watch-state: .* is not valid: exists and is not an agentd"):
        claim(path)
    assert path.read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_paths_that_are_not_regular_files_are_refused(tmp_path):
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, kind in [
        (Path("/dev/zero"), "a character device"),
        (tmp_path, "a directory"),
        (fifo, "a FIFO (named pipe)"),
    ]:
        why = refusal(path)
        assert why is not None
        assert why.startswith(f"is {kind}, not a regular file")
        with pytest.raises(WatchStateError, match=re.escape(f"is {kind}, not a regular file")):
            load(path)


def test_one_owner_at_a_time_and_stale_temps_are_removed(tmp_path):
    path = tmp_path / "w.json"
    stale = tmp_path / ".w.json.4242.deadbeef.tmp"
    stale.write_bytes(b"half")
    first = claim(path)
    assert first.held
    assert not stale.exists()  # a crashed writer's temp, removed under the lock
    assert lock_path(path).read_text().strip() == str(os.getpid())
    with pytest.raises(ConfigError, match=rf"another agentd \(pid {os.getpid()}\) is using it"):
        claim(path)
    first.release()
    second = claim(path)
    assert second.held
    second.release()


def test_bad_entries_are_skipped_with_warnings(tmp_path):
    path = tmp_path / "w.json"
    good = {"name": "a", "uri": "u://a"}
    path.write_bytes(
        orjson.dumps(
            {
                "version": 1,
                "watches": [
                    good,
                    {"name": "", "uri": "u"},
                    {"name": "b", "uri": "u", "on_event": 3},
                    {"name": "c", "uri": "u", "baseline": []},
                    "junk",
                    dict(good),
                ],
            }
        )
    )
    got = load(path)
    loaded, warnings = got.specs, got.warnings
    assert [s.name for s in loaded] == ["a"]
    assert len(warnings) == 5
    assert "watches[1]: watch spec has name ''" in warnings[0]
    assert "on_event 3; it must be source text or null" in warnings[1]
    assert "baseline []" in warnings[2]
    assert "a watch spec must be an object" in warnings[3]
    assert "a second watch named 'a'" in warnings[4]


def test_newer_format_is_left_alone(tmp_path):
    path = tmp_path / "w.json"
    path.write_bytes(orjson.dumps({"version": STATE_FORMAT_VERSION + 1, "watches": []}))
    with pytest.raises(WatchStateError, match=r"format version 2, newer than this agentd understands"):
        load(path)
    assert path.exists()


def test_unwritable_directory_is_a_clear_error(tmp_path):
    # The tests run as root, where permission bits do not stop writes: a
    # missing directory gives the same OSError path.
    path = tmp_path / "gone" / "w.json"
    with pytest.raises(
        WatchStateError, match=r"cannot write --watch-state file .*keep running in memory only"
    ):
        save(path, specs())


@pytest.mark.parametrize("err", [errno.ENOSPC, errno.EROFS])
def test_full_or_read_only_disk_keeps_old_file_and_no_temp(tmp_path, err):
    path = tmp_path / "w.json"
    save(path, specs()[:1])
    before = path.read_bytes()

    def fail(step):
        if step == "temp-written":
            raise OSError(err, os.strerror(err))

    with pytest.raises(WatchStateError, match=os.strerror(err)):
        save(path, specs(), step_hook=fail)
    assert path.read_bytes() == before
    assert leftover_temps(path) == []


def test_unreadable_file_is_a_clear_error(tmp_path, monkeypatch):
    path = tmp_path / "w.json"
    save(path, specs())

    def denied(path: Path, limit: int) -> bytes:
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES))

    monkeypatch.setattr(files, "read_state_file", denied)  # root reads any file: inject the error
    with pytest.raises(WatchStateError, match=r"cannot read --watch-state file .*Permission denied"):
        load(path)


_CRASHER = textwrap.dedent(
    """
    import os, sys
    from agentd.watches.state import WatchSpec, save
    path, crash_at = sys.argv[1], sys.argv[2]
    def hook(step):
        if step == crash_at:
            os._exit(17)  # no cleanup, no flush: as abrupt as a kill
    save(path, [WatchSpec(name="new", uri="u://new", on_event="x" * 100_000)], step_hook=hook)
    """
)


@pytest.mark.parametrize("crash_at", ["temp-written", "temp-synced", "renamed", "dir-synced"])
def test_crash_at_each_write_step_leaves_old_or_new_never_partial(tmp_path, crash_at):
    path = tmp_path / "w.json"
    old = [WatchSpec(name="old", uri="u://old")]
    save(path, old)
    old_bytes = path.read_bytes()
    new_bytes = encode([WatchSpec(name="new", uri="u://new", on_event="x" * 100_000)])
    proc = subprocess.run(
        [sys.executable, "-c", _CRASHER, str(path), crash_at],
        cwd=REPO,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert proc.returncode == 17, proc.stderr.decode()
    after = path.read_bytes()
    expected = old_bytes if crash_at in ("temp-written", "temp-synced") else new_bytes
    assert after == expected
    got = load(path)
    assert got.warnings == []
    assert [s.name for s in got.specs] == (["old"] if expected == old_bytes else ["new"])
    # The next owner removes whatever temp file the crash left.
    claim(path).release()
    save(path, old)
    assert path.read_bytes() == old_bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == [".w.json.lock", "w.json"]

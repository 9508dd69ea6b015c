"""The opt-in timeline is a diagnostic: it never raises into agentd, whatever its file does."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from agentd.observe import timeline


@pytest.fixture(autouse=True)
def _restore(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    yield
    monkeypatch.delenv(timeline.TIMELINE_ENV, raising=False)
    timeline.reopen()


def test_marks_lines_with_one_line_per_mark_even_for_a_key_with_newlines(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "timeline"
    monkeypatch.setenv(timeline.TIMELINE_ENV, str(path))
    timeline.reopen()
    timeline.mark("spawn.request", "memo://a\n1.0 2.0 1 forged.line")
    lines = path.read_text().splitlines()
    assert len(lines) == 1
    assert lines[0].split()[3] == "spawn.request"


def test_a_path_it_cannot_open_turns_it_off(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(timeline.TIMELINE_ENV, str(tmp_path / "missing" / "timeline"))
    timeline.reopen()
    timeline.mark("spawn.request")  # no exception
    assert not (tmp_path / "missing").exists()


def test_a_full_disk_turns_it_off_in_this_process(monkeypatch: pytest.MonkeyPatch) -> None:
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    monkeypatch.setenv(timeline.TIMELINE_ENV, "/dev/full")
    timeline.reopen()
    timeline.mark("child.start")  # ENOSPC: swallowed
    timeline.mark("child.start")
    assert timeline._fd is None

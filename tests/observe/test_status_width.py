"""``agentd status``'s human view: cut to the terminal's width, whole when written to a pipe or a file."""

from __future__ import annotations

import io

import pytest

from agentd.cli import _status

DOC = {
    "version": "0.1.0",
    "mode": "reactive",
    "phase": "running",
    "ready": True,
    "uptime_s": 12345,
    "pid": 4242,
    "agents": [],
    "routes": [],
    "servers": [],
    "recent": [],
    "finished": [],
    "budget": {"cost_usd": 0.0015, "tokens": 120, "steps": 1},
}


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_piped_view_is_not_cut_even_when_columns_is_narrow(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setattr("sys.stdout", io.StringIO())
    assert _status._width() == _status.UNCUT
    header = _status.render(DOC, _status._width()).splitlines()[0]
    assert len(header) > 40
    assert header.endswith("cost $0.001500 · 120 tokens · 1 model calls")


def test_a_terminal_view_is_cut_to_the_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "40")
    monkeypatch.setattr("sys.stdout", _Tty())
    assert _status._width() == 40
    assert all(len(line) <= 40 for line in _status.render(DOC, _status._width()).splitlines())

"""agentd.cli: the option table, aliases, did-you-mean and stdin, without a process (component)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from agentd.cli import _stdin, build_parser, flags_from_args
from agentd.cli._options import ALIASES, GROUPS, OPTIONS, alias_spellings, usage_error
from agentd.config import load_settings
from agentd.core.errors import ConfigError


def test_every_alias_names_a_flag_of_the_table_and_sets_the_same_setting(tmp_path: Path) -> None:
    flags = {f for o in OPTIONS for f in o.flags}
    assert set(ALIASES.values()) <= flags
    assert {o.group for o in OPTIONS} == set(GROUPS)
    parser = build_parser()
    given = {
        "--max-turns": ("3", "max_turn_steps", 3),
        "--output-format": ("json", "output", "json"),
        "--allowedTools": ("a__*", "allowed_tools", ["a__*"]),
        "--disallowedTools": ("a__b", "disallowed_tools", ["a__b"]),
        "--system-prompt": ("be brief", "system", "be brief"),
        "--append-system-prompt": ("be brief", "system", "be brief"),
    }
    for alias, (value, field, expected) in given.items():
        ns = parser.parse_args([alias, value, "task"])
        flags_given, _ = flags_from_args(ns)
        settings = load_settings(flags_given, env={}, run_inputs=False)
        assert getattr(settings, field) == expected, alias
    ns = parser.parse_args(["--no-session-persistence", "-p", "task"])
    assert flags_from_args(ns)[0] == {"ephemeral": True, "instruction": "task"}


def test_flags_not_given_override_nothing() -> None:
    flags, config = flags_from_args(build_parser().parse_args([]))
    assert (flags, config) == ({}, None)


def test_alias_spellings_follow_the_last_one_given() -> None:
    assert alias_spellings(["--max-turns", "3", "x"]) == {"--max-turn-steps": "--max-turns"}
    assert alias_spellings(["--max-turns", "3", "--max-turn-steps", "4"]) == {}
    assert alias_spellings(["--", "--max-turns"]) == {}


@pytest.mark.parametrize(
    ("extras", "fix"),
    [
        (["--allowdTools"], "did you mean --allowedTools?"),
        (["--modle=x"], "did you mean --mode or --model?"),
        (["--output_format"], "did you mean --output-format?"),
        (["--zzzzzz"], "agentd --help lists the options"),
        (["--last"], "write --continue (the conversation saved last)"),
        (["two", "--verbos"], "did you mean --verbose?"),
    ],
)
def test_usage_error_names_the_first_unknown_flag(extras: list[str], fix: str) -> None:
    line = usage_error(extras)
    bad = next(x for x in extras if x.startswith("-")).split("=")[0]
    assert line.startswith(f"unknown option {bad} — fix: ")
    assert fix in line


def test_usage_error_for_check_knows_show_secrets() -> None:
    assert "did you mean --show-secrets?" in usage_error(["--show-secret"], check=True)


# ------------------------------------------------------------------ stdin


def test_the_source_of_stdin(tmp_path: Path) -> None:
    r, w = os.pipe()
    try:
        assert _stdin.source(r) == "pipe"
    finally:
        os.close(r)
        os.close(w)
    with open(tmp_path / "f", "w+b") as f:
        assert _stdin.source(f.fileno()) == "file"
    with open(os.devnull, "rb") as null:
        assert _stdin.source(null.fileno()) == "none"
    assert _stdin.source(987654) == "none"


def _pipe_with(data: bytes) -> int:
    r, w = os.pipe()

    def write() -> None:
        with os.fdopen(w, "wb") as f:
            f.write(data)

    threading.Thread(target=write, daemon=True).start()
    return r


def test_context_reads_a_pipe_to_its_end() -> None:
    r = _pipe_with(b"a\nb\n" * 50_000)
    try:
        text, silent = _stdin.context(r)
    finally:
        os.close(r)
    assert (text, silent) == ("a\nb\n" * 50_000, False)
    assert _stdin.with_context("sum up", "a\nb\n") == "sum up\n\n<stdin>\na\nb\n</stdin>"


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (
            b"x" * (_stdin.MAX_STDIN_BYTES + 1),
            r"^stdin: '-' is not valid: more than 1048576 bytes arrived on stdin",
        ),
        (b"caf\xe9", r"^stdin: '-' is not valid: stdin is not UTF-8 text \(byte 3\)"),
    ],
)
def test_context_refuses_what_it_cannot_take(data: bytes, match: str) -> None:
    r = _pipe_with(data)
    try:
        with pytest.raises(ConfigError, match=match):
            _stdin.context(r)
    finally:
        os.close(r)


def test_an_instruction_from_stdin_that_starts_with_at_stays_text() -> None:
    r = _pipe_with(b"@etc/passwd is what I mean")
    try:
        assert _stdin.instruction(r) == "@@etc/passwd is what I mean"
    finally:
        os.close(r)
    empty = _pipe_with(b"  \n")
    try:
        with pytest.raises(ConfigError, match=r"^INSTRUCTION: '-' is not valid: stdin was empty"):
            _stdin.instruction(empty)
    finally:
        os.close(empty)


def test_docs_cli_names_every_flag_and_alias() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "cli.md").read_text()
    missing = [
        flag
        for flag in [*(f for o in OPTIONS for f in o.flags), *ALIASES, "-p", "--print", "--show-secrets"]
        if f"`{flag}`" not in text and f"`{flag} " not in text
    ]
    assert missing == [], f"docs/cli.md does not name {missing}"

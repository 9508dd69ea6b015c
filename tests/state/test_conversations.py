"""agentd.state.conversations: finding, saving and continuing a once run's conversation (component)."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import pytest

from agentd.core.errors import ConfigError
from agentd.selfmcp.protocol import MessageFrame
from agentd.state import journal as jf
from agentd.state.conversations import Conversation, default_state_dir, find, folder, recent


def turn(text: str) -> tuple[MessageFrame, ...]:
    return (MessageFrame(role="user", content=text), MessageFrame(role="assistant", content=f"re: {text}"))


def saved(root: Path, cid: str, *texts: str, max_tokens: int = 100_000) -> Conversation:
    conv = Conversation(folder(root), cid, max_tokens=max_tokens)
    for text in texts:
        conv.save(turn(text))
    return conv


def test_the_per_user_state_directory() -> None:
    assert default_state_dir({"XDG_STATE_HOME": "/x/state", "HOME": "/h"}) == Path("/x/state/agentd")
    # A relative XDG_STATE_HOME is ignored, as the XDG rules say.
    assert default_state_dir({"XDG_STATE_HOME": "rel", "HOME": "/h"}) == Path("/h/.local/state/agentd")


def test_a_saved_conversation_comes_back_as_history(tmp_path: Path) -> None:
    conv = saved(tmp_path, "c1", "one", "two")
    messages, turns, dropped = Conversation(folder(tmp_path), "c1", max_tokens=100_000).history()
    assert (turns, dropped) == (2, 0)
    assert [m.content for m in messages] == ["one", "re: one", "two", "re: two"]
    assert oct(folder(tmp_path).stat().st_mode & 0o777) == "0o700"
    assert oct(conv.path.stat().st_mode & 0o777) == "0o600"


def test_the_file_and_the_history_stay_within_the_token_budget(tmp_path: Path) -> None:
    conv = saved(tmp_path, "c1", *(f"turn {i} " + "x" * 400 for i in range(10)), max_tokens=1000)
    contents = jf.read(conv.path)
    assert len(contents.turns) < 10
    assert contents.turns[0][0].content.startswith("turn 0")  # the first instruction stays
    assert contents.turns[0][1].content == jf.COMPACTED_NOTE
    assert contents.turns[-1][0].content.startswith("turn 9")


def test_find_picks_the_newest_or_the_named_one(tmp_path: Path) -> None:
    saved(tmp_path, "aaaa-1111", "old")
    newer = saved(tmp_path, "bbbb-2222", "new")
    future = time.time() + 60
    os.utime(newer.path, (future, future))
    assert find(tmp_path, resume=None, latest=False) is None
    found = find(tmp_path, resume=None, latest=True)
    assert found is not None
    assert found.id == "bbbb-2222"
    by_prefix = find(tmp_path, resume="aaaa", latest=False)
    assert by_prefix is not None
    assert by_prefix.id == "aaaa-1111"
    assert [f.id for f in recent(folder(tmp_path))] == ["bbbb-2222", "aaaa-1111"]


@pytest.mark.parametrize(
    ("resume", "match"),
    [
        (
            "cccc",
            r"^--resume: 'cccc' is not valid: no conversation with this id in '.*' \(the newest there: ",
        ),
        ("a/../b", r"^--resume: 'a/../b' is not valid: a session id is letters, digits"),
        ("", r"^--resume: '' is not valid: a session id is letters, digits"),
    ],
)
def test_find_refuses_what_names_no_conversation(tmp_path: Path, resume: str, match: str) -> None:
    saved(tmp_path, "aaaa-1111", "x")
    with pytest.raises(ConfigError, match=match):
        find(tmp_path, resume=resume, latest=False)


def test_a_prefix_of_several_ids_asks_for_more(tmp_path: Path) -> None:
    saved(tmp_path, "ab-1", "x")
    saved(tmp_path, "ab-2", "y")
    with pytest.raises(
        ConfigError, match=r"it starts more than one session id \(ab-1, ab-2, …\); give more of it"
    ):
        find(tmp_path, resume="ab", latest=False)


def test_continue_with_nothing_saved_says_what_to_do(tmp_path: Path) -> None:
    with pytest.raises(
        ConfigError, match=r"no conversation is saved there yet: run agentd once without --continue"
    ):
        find(tmp_path, resume=None, latest=True)
    with pytest.raises(ConfigError, match=r"there is no per-user state directory \(no home directory\)"):
        find(None, resume=None, latest=True)


def test_a_torn_tail_keeps_the_whole_turns(tmp_path: Path) -> None:
    conv = saved(tmp_path, "c1", "one", "two")
    size = conv.path.stat().st_size
    with open(conv.path, "r+b") as f:
        f.truncate(size - 5)  # the last record cut short, as a crash of a plain append would leave it
    messages, turns, _ = conv.history()
    assert turns == 1
    assert [m.content for m in messages] == ["one", "re: one"]
    conv.save(turn("three"))
    assert [t[0].content for t in jf.read(conv.path).turns] == ["one", "three"]


def test_a_corrupt_file_is_moved_aside_and_its_good_turns_kept(tmp_path: Path) -> None:
    conv = saved(tmp_path, "c1", "one", "two")
    data = bytearray(conv.path.read_bytes())
    first_turn_end = (
        len(jf.MAGIC)
        + len(jf.encode(jf.OpenRecord(session="c1")))
        + len(jf.encode(jf.TurnRecord(messages=turn("one"))))
    )
    data[first_turn_end + 9] ^= 0xFF  # a byte of the second turn flipped: bad checksum, more after it
    data += jf.encode(jf.TurnRecord(messages=turn("three")))
    conv.path.write_bytes(bytes(data))
    result = conv.save(turn("four"))
    assert result.moved_aside is not None
    assert result.moved_aside.exists()
    assert "fails its checksum" in result.damage
    assert ".corrupt-" in result.moved_aside.name
    assert [t[0].content for t in jf.read(conv.path).turns] == ["one", "four"]


def test_a_link_in_a_conversations_place_is_never_followed(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.write_text("not agentd's")
    folder(tmp_path).mkdir(parents=True)
    link = folder(tmp_path) / "c1.journal"
    link.symlink_to(target)
    conv = Conversation(folder(tmp_path), "c1", max_tokens=100_000)
    with pytest.raises(
        ConfigError,
        match=r"its conversation '.*c1.journal' is a symbolic link, not a regular file; start a new",
    ):
        conv.history()
    result = conv.save(turn("one"))
    assert target.read_text() == "not agentd's"
    assert result.moved_aside is not None
    assert result.moved_aside.is_symlink()
    assert ".unsafe-" in result.moved_aside.name
    assert [t[0].content for t in jf.read(conv.path).turns] == ["one"]
    assert find(tmp_path, resume=None, latest=True) is not None


def test_two_runs_continuing_one_conversation_keep_both_turns(tmp_path: Path) -> None:
    saved(tmp_path, "c1", "start")
    errors: list[BaseException] = []

    def run(text: str) -> None:
        try:
            Conversation(folder(tmp_path), "c1", max_tokens=100_000).save(turn(text))
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(f"run {i}",)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    texts = [t[0].content for t in jf.read(folder(tmp_path) / "c1.journal").turns]
    assert texts[0] == "start"
    assert sorted(texts[1:]) == sorted(f"run {i}" for i in range(8))


def test_another_users_file_is_refused_and_left_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agentd.core.errors import NotOurs

    conv = saved(tmp_path, "c1", "one")
    before = conv.path.read_bytes()
    monkeypatch.setattr(os, "geteuid", lambda: os.getuid() + 1)  # as if another user ran agentd
    with pytest.raises(NotOurs):
        conv.save(turn("two"))
    monkeypatch.undo()
    assert conv.path.read_bytes() == before


def test_a_save_cut_short_leaves_no_temp_file_behind(tmp_path: Path) -> None:
    conv = saved(tmp_path, "c1", "one")
    leftover = folder(tmp_path) / ".c1.journal.4242.deadbeef.tmp"
    leftover.write_bytes(b"half a conversation")
    conv.save(turn("two"))
    assert not leftover.exists()
    assert [t[0].content for t in jf.read(conv.path).turns] == ["one", "two"]

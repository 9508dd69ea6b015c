"""Mutation guards for servers/_inboxlog.py: the log's line parsing, the newline search and the walk over the file (scripts/mutate)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.servers import _inboxlog
from agentd.servers._inboxlog import (
    INLINE_LINE_BYTES,
    TEXT_CAP,
    AckError,
    Entry,
    Note,
    choose_by_id,
    find_newline,
    parse_line,
    walk,
)
from tests.support.inboxlog import URI, line


def reader(path: Path):  # type: ignore[no-untyped-def]
    """``read(offset, n)`` over a real inbox file, as the server reads it."""

    def read(offset: int, n: int) -> bytes:
        with path.open("rb") as f:
            f.seek(offset)
            return f.read(n)

    return read


def inbox(tmp_path: Path, data: bytes) -> Path:
    path = tmp_path / "bob.jsonl"
    path.write_bytes(data)
    return path


def capped(text: str, msg_id: str) -> str:
    return text[:TEXT_CAP] + f"… [{len(text)} characters; read {URI}/message/{msg_id}]"


def walked(
    path: Path,
    *,
    start: int = 0,
    seq: int = 1,
    stop: int | None = None,
    chunk: int = 1 << 20,
    notes: list[Note] | None = None,
) -> list[tuple[int, str, int, int]]:
    stop = path.stat().st_size if stop is None else stop
    found = walk(
        reader(path),
        start=start,
        seq=seq,
        stop_offset=stop,
        notes=notes or [],
        agent="bob",
        uri=URI,
        chunk=chunk,
    )
    return [(e.seq, e.id, e.offset, e.end) for e in found]


# --------------------------------------------------------------------------- parse_line


def test_a_small_line_keeps_its_fields_and_renames_its_own_seq_and_type() -> None:
    raw = line(id="m1", **{"from": "ann"}, text="hi", ts="2026-12-02T00:00:00Z", seq=3, type="note")
    entry = parse_line(raw, offset=10, seq=7, agent="bob", uri=URI)
    assert entry == Entry(
        seq=7,
        kind="MESSAGE",
        offset=10,
        end=10 + len(raw),
        id="m1",
        urgent=False,
        sender="ann",
        event={
            "seq": 7,
            "type": "MESSAGE",
            "id": "m1",
            "from": "ann",
            "text": "hi",
            "ts": "2026-12-02T00:00:00Z",
            "message_seq": 3,
            "message_type": "note",
            "urgent": False,
        },
        text="hi",
        truncated=False,
    )


@pytest.mark.parametrize("field", ["seq", "type"])
def test_a_message_with_only_its_own_seq_or_type_does_not_override_the_inbox_s(field: str) -> None:
    entry = parse_line(line(id="m", **{field: "theirs"}), offset=0, seq=4, agent="bob", uri=URI)
    assert entry is not None
    assert entry.event["seq"] == 4
    assert entry.event["type"] == "MESSAGE"
    assert entry.event[f"message_{field}"] == "theirs"
    assert set(entry.event) == {"seq", "type", "id", "urgent", f"message_{field}"}


def test_an_urgent_message_is_shown_urgent_and_a_missing_text_is_empty() -> None:
    entry = parse_line(line(id="u", urgent=True), offset=0, seq=1, agent="bob", uri=URI)
    assert entry is not None
    assert entry.urgent is True
    assert entry.event["urgent"] is True
    assert entry.text == ""
    assert entry.sender is None


def test_a_line_without_id_is_named_by_its_offset_and_a_non_text_sender_is_dropped() -> None:
    entry = parse_line(line(**{"from": 5}, text={"a": [1, 2]}), offset=42, seq=1, agent="bob", uri=URI)
    assert entry is not None
    assert entry.id == "bob@42"
    assert entry.event["id"] == "bob@42"
    assert entry.sender is None
    assert entry.text == '{"a":[1,2]}'


def test_a_text_of_exactly_the_cap_is_shown_whole_and_one_more_is_capped() -> None:
    whole = parse_line(line(id="w", text="x" * TEXT_CAP), offset=0, seq=1, agent="bob", uri=URI)
    assert whole is not None
    assert (whole.text, whole.truncated) == ("x" * TEXT_CAP, False)
    longer = "y" * (TEXT_CAP + 1)
    cut = parse_line(line(id="c", text=longer), offset=0, seq=1, agent="bob", uri=URI)
    assert cut is not None
    assert (cut.text, cut.truncated) == (capped(longer, "c"), True)
    assert cut.event["text"] == longer  # the log still shows a small line whole


def padded(size: int, **fields: object) -> bytes:
    """A JSON line of exactly ``size`` bytes (newline included)."""
    bare = line(**fields, pad="")
    return line(**fields, pad="p" * (size - len(bare)))


def test_a_line_of_exactly_the_inline_size_is_shown_whole() -> None:
    raw = padded(INLINE_LINE_BYTES, id="i", text="t")
    assert len(raw) == INLINE_LINE_BYTES
    entry = parse_line(raw, offset=0, seq=1, agent="bob", uri=URI)
    assert entry is not None
    assert entry.truncated is False
    assert "pad" in entry.event
    assert "size" not in entry.event


def test_a_big_line_is_summarised_with_its_size_and_where_to_read_it() -> None:
    raw = padded(INLINE_LINE_BYTES + 1, id="big", **{"from": "ann"}, ts=17, urgent=True, text="short", seq=9)
    entry = parse_line(raw, offset=5, seq=2, agent="bob", uri=URI)
    assert entry == Entry(
        seq=2,
        kind="MESSAGE",
        offset=5,
        end=5 + len(raw),
        id="big",
        urgent=True,
        sender="ann",
        event={
            "seq": 2,
            "type": "MESSAGE",
            "id": "big",
            "from": "ann",
            "ts": 17,
            "urgent": True,
            "text": "short",
            "truncated": True,
            "size": INLINE_LINE_BYTES + 1,
            "message_uri": f"{URI}/message/big",
        },
        text="short",
        truncated=True,
    )


@pytest.mark.parametrize(("length", "cut"), [(TEXT_CAP, False), (TEXT_CAP + 1, True)])
def test_a_big_line_caps_only_a_text_over_the_cap(length: int, cut: bool) -> None:
    text = "z" * length
    raw = padded(INLINE_LINE_BYTES + 100, id="big", text=text)
    entry = parse_line(raw, offset=0, seq=1, agent="bob", uri=URI)
    assert entry is not None
    expected = capped(text, "big") if cut else text
    assert (entry.text, entry.event["text"], entry.truncated) == (expected, expected, True)


# --------------------------------------------------------------------------- find_newline


@pytest.mark.parametrize("chunk", [1, 2, 3, 4, 7, 100])
def test_find_newline_finds_the_first_newline_before_the_limit(tmp_path: Path, chunk: int) -> None:
    read = reader(inbox(tmp_path, b"abcde\nfg\nhij\n"))
    assert find_newline(read, 0, 13, chunk) == 5
    assert find_newline(read, 5, 13, chunk) == 5
    assert find_newline(read, 6, 13, chunk) == 8
    assert find_newline(read, 9, 13, chunk) == 12
    assert find_newline(read, 6, 8, chunk) is None  # the newline at 8 is past the limit
    assert find_newline(read, 9, 12, chunk) is None
    assert find_newline(read, 13, 20, chunk) is None  # end of file


def test_find_newline_stops_at_the_end_of_a_shorter_file(tmp_path: Path) -> None:
    read = reader(inbox(tmp_path, b"no newline here"))
    assert find_newline(read, 0, 1000, 4) is None
    assert find_newline(read, 3, 1000) is None


# --------------------------------------------------------------------------- walk


def expected(data: bytes, *, seq: int = 1) -> list[tuple[int, str, int, int]]:
    out = []
    offset = 0
    for raw in data.splitlines(keepends=True):
        if raw.strip():
            entry = parse_line(raw, offset=offset, seq=seq, agent="bob", uri=URI)
            assert entry is not None
            out.append((seq, entry.id, offset, offset + len(raw)))
            seq += 1
        offset += len(raw)
    return out


messages = st.lists(
    st.one_of(
        st.builds(lambda n, k: line(id=f"m{n}", text="t" * k), st.integers(0, 99), st.integers(0, 40)),
        st.builds(lambda k: line(text="t" * k), st.integers(0, 40)),
        st.sampled_from([b"\n", b"  \n"]),
    ),
    max_size=8,
)


@given(lines=messages, chunk=st.integers(1, 64), torn=st.booleans())
def test_walk_gives_every_line_its_seq_whatever_the_chunk(
    tmp_path_factory: pytest.TempPathFactory, lines: list[bytes], chunk: int, torn: bool
) -> None:
    data = b"".join(lines)
    if torn:  # the last line was consumed at end of file without its newline
        data += line(id="tail")[:-1]
    path = inbox(tmp_path_factory.mktemp("walk"), data)
    assert walked(path, chunk=chunk) == expected(data)


@pytest.mark.parametrize("chunk", [1, 5, 16, 1 << 20])
def test_walk_names_lines_without_id_by_agent_and_offset(tmp_path: Path, chunk: int) -> None:
    data = b"\n" + line(text="a") + b"\n\n" + line(text="b" * (TEXT_CAP + 1))
    path = inbox(tmp_path, data)
    entries = list(
        walk(reader(path), start=0, seq=1, stop_offset=len(data), notes=[], agent="bob", uri=URI, chunk=chunk)
    )
    first = len(b"\n")
    second = first + len(line(text="a")) + 2
    assert [e.id for e in entries] == [f"bob@{first}", f"bob@{second}"]
    assert entries[1].text == capped("b" * (TEXT_CAP + 1), f"bob@{second}")


@pytest.mark.parametrize("chunk", [3, 20, 1 << 20])
def test_walk_reads_no_further_than_the_consumed_region(tmp_path: Path, chunk: int) -> None:
    # The second line was consumed at end of file without its newline; the writer then appended
    # the next message to it. The walk must find that message as it was consumed.
    first = line(id="x")
    consumed = b'{"id": "a"}'
    path = inbox(tmp_path, first + consumed + line(id="b"))
    stop = len(first + consumed)
    assert walked(path, stop=stop, chunk=chunk) == [(1, "x", 0, len(first)), (2, "a", len(first), stop)]


@pytest.mark.parametrize("chunk", [4, 1 << 20])
def test_walk_interleaves_notes_including_one_at_its_start_and_one_at_its_end(
    tmp_path: Path, chunk: int
) -> None:
    data = line(id="a") + line(id="b")
    path = inbox(tmp_path, data)
    notes = [
        Note(seq=5, at=0, message="first"),
        Note(seq=7, at=len(line(id="a")), message="between"),
        Note(seq=9, at=len(data), message="last"),
        Note(seq=3, at=0, message="acknowledged already"),
    ]
    assert walked(path, seq=5, chunk=chunk, notes=notes) == [
        (5, "error-5", 0, 0),
        (6, "a", 0, len(line(id="a"))),
        (7, "error-7", len(line(id="a")), len(line(id="a"))),
        (8, "b", len(line(id="a")), len(data)),
        (9, "error-9", len(data), len(data)),
    ]


def test_walk_over_a_file_cut_short_still_gives_the_notes_raised_in_the_region(tmp_path: Path) -> None:
    data = line(id="a")
    path = inbox(tmp_path, data)
    note = Note(seq=2, at=len(data) + 10, message="raised further on")
    # the region was [0, len + 20) but the file now ends earlier
    assert walked(path, stop=len(data) + 20, notes=[note]) == [
        (1, "a", 0, len(data)),
        (2, "error-2", len(data) + 10, len(data) + 10),
    ]


@pytest.mark.parametrize("chunk", [2, 5, 8])
def test_walk_reads_lines_longer_than_a_chunk(tmp_path: Path, chunk: int) -> None:
    data = (
        line(id="first", text="x" * 30)
        + line(id="b")
        + line(id="second", text="y" * 30)
        + line(id="torn", text="z" * 20)[:-1]
    )
    path = inbox(tmp_path, data)
    assert walked(path, chunk=chunk) == expected(data)


@pytest.mark.parametrize("chunk", [4, 16])  # lines over the limit are longer than a chunk
def test_walk_steps_over_a_line_over_the_limit_where_its_error_stands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(_inboxlog, "MAX_LINE_BYTES", 40)
    head = line(id="a")
    exact = padded(40, id="fits")  # exactly the limit: read
    huge = line(id="huge", text="y" * 60)
    tail = line(id="b")
    data = head + exact + huge + tail
    path = inbox(tmp_path, data)
    at = len(head + exact)
    note = Note(seq=3, at=at, message="line too long")
    assert walked(path, chunk=chunk, notes=[note]) == [
        (1, "a", 0, len(head)),
        (2, "fits", len(head), at),
        (3, "error-3", at, at),
        (4, "b", at + len(huge), len(data)),
    ]


# --------------------------------------------------------------------------- choose_by_id


def entry(seq: int, text: str) -> Entry:
    return Entry(seq, "MESSAGE", 0, 1, "dup", False, None, {}, text)


def test_one_pending_message_with_the_id_is_chosen_without_seq() -> None:
    only = [entry(1, "hello")]
    assert choose_by_id(only, "dup", None) == only
    assert choose_by_id([], "dup", None) == []
    assert choose_by_id([entry(1, "a"), entry(2, "b")], "dup", 2) == [entry(2, "b")]


def test_several_pending_messages_with_the_id_name_five_of_them_and_the_fix() -> None:
    found = [entry(s, f"{s}" + "t" * 50) for s in range(1, 7)]
    listed = ", ".join(f"seq {s}: {f'{s}' + 't' * 39!r}" for s in range(1, 6))
    with pytest.raises(AckError) as caught:
        choose_by_id(found, "dup", None)
    assert str(caught.value) == (
        f"id 'dup' names 6 pending messages ({listed}); pass seq to choose one, or seqs=[...] to acknowledge several"
    )

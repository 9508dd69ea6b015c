"""Mutation guards for servers/_inboxlog.py: the cursor and ledger files' JSON, notes, and the channel notification's parameters (scripts/mutate)."""

from __future__ import annotations

import json
import re
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentd.servers import _inboxlog
from agentd.servers._inboxlog import (
    LEDGER_CAP,
    InboxLog,
    Ledger,
    channel_params,
    cursor_from_json,
    parse_line,
)
from tests.support.inboxlog import URI, drain, line


def persist(doc: object, tmp_path: Path) -> dict[str, Any]:
    """Write the cursor file and read it back, as a restarted server does."""
    path = tmp_path / "bob.cursor"
    path.write_text(json.dumps(doc))
    loaded: dict[str, Any] = json.loads(path.read_text())
    return loaded


def restart(doc: dict[str, Any], tmp_path: Path) -> InboxLog:
    cursor, ledger = cursor_from_json(persist(doc, tmp_path))
    return InboxLog("bob", URI, cursor, ledger)


def event(**fields: object) -> Any:
    entry = parse_line(line(**fields), offset=0, seq=1, agent="bob", uri=URI)
    assert entry is not None
    return entry


# --------------------------------------------------------------------------- the cursor file


def test_a_cursor_file_with_every_field_survives_a_restart_unchanged(tmp_path: Path) -> None:
    data = b"".join(
        line(id=f"m{i}", text=f"hello {i}", **({"from": "carol"} if i == 3 else {})) for i in range(1, 6)
    )
    log = InboxLog("bob", URI)
    drain(log, data)
    log.ack_seqs([1, 3])
    log.error("byte 9 is not JSON")
    log.gap_note("2 messages fell off", {"count": 2, "first": 1, "last": 2})
    Ledger.put(log.ledger.acked, "m1", "2026-12-02T05:00:00Z")
    Ledger.put(log.ledger.handled, "m2", {"note": "done"})
    Ledger.put(log.ledger.responded, "m4", "thanks")
    doc: dict[str, Any] = dict(log.snapshot())
    doc["check"], doc["anchor"] = "c" * 64, "a" * 64
    doc = persist(doc, tmp_path)

    # The file's own shape: an ERROR note is written without a type, a GAP one with its type and fields.
    assert doc["notes"] == [
        {"seq": 6, "at": len(data), "message": "byte 9 is not JSON"},
        {
            "seq": 7,
            "at": len(data),
            "message": "2 messages fell off",
            "type": "GAP",
            "fields": {"count": 2, "first": 1, "last": 2},
        },
    ]
    assert doc["ledger"] == {
        "acked": {"m1": "2026-12-02T05:00:00Z"},
        "handled": {"m2": {"note": "done"}},
        "responded": {"m4": "thanks"},
        "senders": {"m1": None, "m3": "carol"},
    }

    fresh = restart(doc, tmp_path)
    again = persist(dict(fresh.snapshot()), tmp_path)
    assert again == doc
    # The pending notes come back as they were shown: same ids, type, text and fields.
    drain(fresh, data)
    shown = {e.id: e for e in fresh.window()}
    assert set(shown) == {"m2", "m4", "m5", "error-6", "gap-7"}
    assert channel_params(shown["gap-7"], agent="bob") == {
        "content": "2 messages fell off",
        "meta": {
            "seq": "7",
            "id": "gap-7",
            "inbox": "bob",
            "type": "ERROR",
            "count": "2",
            "first": "1",
            "last": "2",
        },
    }
    assert shown["gap-7"].event == {
        "seq": 7,
        "type": "GAP",
        "id": "gap-7",
        "count": 2,
        "first": 1,
        "last": 2,
        "message": "2 messages fell off",
    }
    assert shown["error-6"].event == {
        "seq": 6,
        "type": "ERROR",
        "id": "error-6",
        "message": "byte 9 is not JSON",
    }
    assert shown["error-6"].text == "byte 9 is not JSON"


def test_an_empty_cursor_file_starts_at_the_beginning(tmp_path: Path) -> None:
    cursor, ledger = cursor_from_json(persist({}, tmp_path))
    assert (cursor.offset, cursor.seq, cursor.acked.ranges(), cursor.notes) == (0, 1, [], [])
    assert (cursor.check, cursor.anchor) == (None, None)
    assert ledger.to_json() == {"acked": {}, "handled": {}, "responded": {}, "senders": {}}
    log = InboxLog("bob", URI, cursor, ledger)
    assert [e.id for e in drain(log, line(id="first", text="hi"))] == ["first"]


def test_a_restart_never_reuses_a_seq_below_the_cursors_own(tmp_path: Path) -> None:
    cursor, _ = cursor_from_json(persist({"offset": 0, "seq": 40}, tmp_path))
    assert cursor.top == 40
    cursor, _ = cursor_from_json(persist({"offset": 0, "seq": 40, "top": 90}, tmp_path))
    assert cursor.top == 90


def test_a_note_without_a_message_or_type_is_an_error_with_empty_text(tmp_path: Path) -> None:
    cursor, _ = cursor_from_json(persist({"notes": [{"seq": 2, "at": 0}]}, tmp_path))
    [note] = cursor.notes
    assert (note.message, note.type, note.fields) == ("", "ERROR", None)
    assert note.to_json() == {"seq": 2, "at": 0, "message": ""}


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"offset": "12"}, "offset must be an integer >= 0, got '12'"),
        ({"offset": True}, "offset must be an integer >= 0, got True"),
        ({"seq": 0}, "seq must be an integer >= 1, got 0"),
        ({"acked": [[-1, 2]]}, "acked start must be an integer >= 0, got -1"),
        ({"acked": [[1, -2]]}, "acked end must be an integer >= 0, got -2"),
        ({"notes": [5]}, "notes must be objects, got 5"),
        ({"notes": [{"at": 0}]}, "note seq must be an integer >= 1, got None"),
        ({"top": -1}, "top must be an integer >= 0, got -1"),
        ({"top": None}, "top must be an integer >= 0, got None"),
        ({"notes": [{"seq": 1}]}, "note at must be an integer >= 0, got None"),
        ({"notes": [{"seq": 1, "at": 0, "type": "gap"}]}, "note type must be 'ERROR' or 'GAP', got 'gap'"),
        (
            {"notes": [{"seq": 1, "at": 0, "type": "GAP", "fields": [1]}]},
            "note fields must be an object, got [1]",
        ),
    ],
)
def test_a_damaged_cursor_file_is_refused_naming_the_field(
    doc: dict[str, Any], message: str, tmp_path: Path
) -> None:
    with pytest.raises(ValueError, match=f"^{re.escape(message)}$"):
        cursor_from_json(persist(doc, tmp_path))


def test_check_and_anchor_of_the_wrong_type_are_dropped_not_trusted(tmp_path: Path) -> None:
    cursor, _ = cursor_from_json(persist({"check": 5, "anchor": ["x"]}, tmp_path))
    assert (cursor.check, cursor.anchor) == (None, None)


@pytest.mark.parametrize("junk", [5, "ledger", [1, 2]])
def test_a_ledger_that_is_not_an_object_is_ignored(junk: object, tmp_path: Path) -> None:
    _, ledger = cursor_from_json(persist({"ledger": junk}, tmp_path))
    assert ledger.to_json() == {"acked": {}, "handled": {}, "responded": {}, "senders": {}}


def test_each_ledger_table_is_read_on_its_own(tmp_path: Path) -> None:
    doc = {
        "ledger": {
            "acked": 5,
            "handled": {"m1": {"note": "ok"}},
            "responded": {"m2": "yes"},
            "senders": {"m3": None},
        }
    }
    _, ledger = cursor_from_json(persist(doc, tmp_path))
    assert ledger.to_json() == {
        "acked": {},
        "handled": {"m1": {"note": "ok"}},
        "responded": {"m2": "yes"},
        "senders": {"m3": None},
    }


def test_the_ledger_keeps_the_newest_ids_up_to_its_cap() -> None:
    ledger = Ledger()
    for i in range(LEDGER_CAP + 1):
        Ledger.put(ledger.acked, f"m{i}", f"v{i}")
    assert len(ledger.acked) == LEDGER_CAP
    assert "m0" not in ledger.acked
    assert ledger.acked[f"m{LEDGER_CAP}"] == f"v{LEDGER_CAP}"
    Ledger.put(ledger.acked, "m1", "again")  # touched: now the newest, so it outlives m2
    Ledger.put(ledger.acked, "new", "n")
    assert "m1" in ledger.acked
    assert "m2" not in ledger.acked
    assert ledger.acked["m1"] == "again"


# --------------------------------------------------------------------------- ids and the channel


@pytest.mark.parametrize(("value", "expected"), [("", "bob@0"), (True, "bob@0"), (0, "0"), ("x", "x")])
def test_a_message_without_a_usable_id_is_named_by_its_offset(value: object, expected: str) -> None:
    assert event(id=value, text="hi").id == expected


def test_channel_meta_names_the_message_and_shows_fields_as_strings() -> None:
    params = channel_params(
        event(id="m1", text="hi", ok=True, bad=False, n=3, s="plain", tags=["a"]), agent="bob"
    )
    assert params["content"] == "hi"
    meta = params["meta"]
    assert {k: meta[k] for k in ("seq", "id", "inbox", "type")} == {
        "seq": "1",
        "id": "m1",
        "inbox": "bob",
        "type": "MESSAGE",
    }
    assert {k: meta[k] for k in ("ok", "bad", "n", "s", "tags")} == {
        "ok": "true",
        "bad": "false",
        "n": "3",
        "s": "plain",
        "tags": '["a"]',
    }


def test_channel_meta_keys_become_identifiers(monkeypatch: pytest.MonkeyPatch) -> None:
    # Cleaned names are remembered process-wide: start from none remembered, so the cleaning runs.
    monkeypatch.setattr(_inboxlog, "_META_KEYS", {})
    tag = uuid.uuid4().hex
    fields = {f"reply-to.{tag}": "r", f"x{tag}": "y", "": "empty"}
    meta = channel_params(event(id="m1", text="hi", **fields), agent="bob")["meta"]
    assert meta[f"reply_to_{tag}"] == "r"
    assert meta[f"x{tag}"] == "y"
    assert meta["_"] == "empty"
    assert all(isinstance(k, str) and k for k in meta)
    # The same names again (cleaned once, remembered) clean the same way.
    assert channel_params(event(id="m1", text="hi", **fields), agent="bob")["meta"] == meta


def test_channel_meta_keeps_the_first_of_two_fields_that_clean_alike() -> None:
    tag = uuid.uuid4().hex
    meta = channel_params(
        event(id="m1", text="hi", **{f"a-{tag}": "1", f"a_{tag}": "2", f"b{tag}": "3"}), agent="bob"
    )["meta"]
    assert meta[f"a_{tag}"] == "1"
    assert meta[f"b{tag}"] == "3"


def test_channel_meta_is_capped_in_keys_and_value_length() -> None:
    many = {f"f{i:02}": str(i) for i in range(50)}
    meta = channel_params(event(id="m1", text="hi", **many), agent="bob")["meta"]
    assert len(meta) == 32
    assert "f00" in meta
    exact, over = "x" * 256, "y" * 257
    meta = channel_params(event(id="m1", text="hi", exact=exact, over=over), agent="bob")["meta"]
    assert meta["exact"] == exact
    assert meta["over"] == "y" * 256 + "…"


def test_an_in_band_error_is_typed_error_on_the_channel(tmp_path: Path) -> None:
    log = InboxLog("bob", URI)
    note = log.error("line 3 is not JSON")
    assert channel_params(note, agent="bob") == {
        "content": "line 3 is not JSON",
        "meta": {"seq": "1", "id": "error-1", "inbox": "bob", "type": "ERROR"},
    }
    message = channel_params(event(id="m1", text="hi"), agent="bob")["meta"]
    assert message["type"] == "MESSAGE"

"""The inbox's pure drain decision: HWM, deferral, urgent-first ordering, rewrite recovery."""

from __future__ import annotations

import json

from agentd.servers.inbox import DEFER_WARN_AFTER, Hwm, drain_bytes, sentinel_is_live


def line(**fields: object) -> bytes:
    return json.dumps(fields).encode() + b"\n"


def test_batch_is_urgent_first_then_file_order() -> None:
    data = line(id="a") + line(id="b", urgent=True) + line(id="c") + line(id="d", urgent=True)
    out = drain_bytes(data, Hwm(), "bob", None)
    assert [m["id"] for m in out.messages] == ["b", "d", "a", "c"]
    assert out.hwm.offset == len(data)
    assert out.hwm.last_id == "d"
    assert out.messages[2]["urgent"] is False


def test_resume_from_hwm_delivers_only_new_lines() -> None:
    first = line(id="a") + line(id="b")
    hwm = drain_bytes(first, Hwm(), "bob", None).hwm
    out = drain_bytes(first + line(id="c"), hwm, "bob", None)
    assert [m["id"] for m in out.messages] == ["c"]
    assert drain_bytes(first + line(id="c"), out.hwm, "bob", None).messages == []


def test_partial_line_defers_and_never_skips_past() -> None:
    data = line(id="a") + b'{"id": "b", "te'
    out = drain_bytes(data, Hwm(), "bob", None)
    assert [m["id"] for m in out.messages] == ["a"]
    assert out.deferred is not None
    assert out.deferred.offset == len(line(id="a"))
    assert out.deferred.reason == "an incomplete last line"
    done = drain_bytes(data + b'xt": "x"}\n' + line(id="c"), out.hwm, "bob", out.deferred)
    assert [m["id"] for m in done.messages] == ["b", "c"]
    assert done.deferred is None


def test_invalid_line_warns_once_after_three_attempts() -> None:
    data = b"garbage\n" + line(id="a")
    deferral = None
    warnings: list[str] = []
    for _ in range(DEFER_WARN_AFTER + 2):
        out = drain_bytes(data, Hwm(), "bob", deferral)
        assert out.messages == []
        deferral = out.deferred
        warnings += out.warnings
    assert deferral is not None
    assert deferral.attempts == DEFER_WARN_AFTER + 2
    assert warnings == [
        "byte 0 of the inbox is a line that is not a JSON object after 3 attempts; delivery waits there: "
        "finish or fix that line (each line must be one JSON object)"
    ]


def test_missing_id_is_synthesized_and_blank_lines_skipped() -> None:
    data = b"\n" + line(text="hi")
    out = drain_bytes(data, Hwm(), "bob", None)
    assert out.messages[0]["id"] == "bob@1"


def test_rewrite_resumes_after_last_id_and_truncation_restarts() -> None:
    data = line(id="a") + line(id="b")
    hwm = drain_bytes(data, Hwm(), "bob", None).hwm
    rewritten = line(id="z", pad="xxxxxxxx") + line(id="a") + line(id="b") + line(id="c")
    out = drain_bytes(rewritten, hwm, "bob", None)
    assert [m["id"] for m in out.messages] == ["c"]
    assert out.warnings[0].startswith("the inbox was rewritten; resuming after message 'b'")
    gone = drain_bytes(line(id="q"), hwm, "bob", None)
    assert [m["id"] for m in gone.messages] == ["q"]
    assert "delivering it again from the start" in gone.warnings[0]


def test_sentinel_liveness() -> None:
    import os

    import psutil

    me = psutil.Process()
    assert sentinel_is_live({"pid": os.getpid(), "start_time": me.create_time()})
    assert not sentinel_is_live({"pid": os.getpid(), "start_time": me.create_time() - 100})
    assert not sentinel_is_live({"pid": 2**22 + 17, "start_time": 0})
    assert sentinel_is_live({"pid": 1, "host": "some-other-host"})

"""The ``script:`` model: turns, placeholders, then-modes, latency, and every invalid file."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentd.core.errors import ConfigError
from agentd.models import (
    NO_REPLY,
    Message,
    ModelReply,
    Prompt,
    ScriptModel,
    ToolSpec,
    load_script,
    make_model,
)
from agentd.models.base import estimate_input_tokens, estimate_tokens
from agentd.models.script import parse_script
from tests.support.strategies import json_values

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "scripts"
TOOLS = [ToolSpec("memo__memo_set", "Store a memo.", {"type": "object"})]


def _write(tmp_path: Path, data: object, name: str = "s.json") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else json.dumps(data), encoding="utf-8")
    return p


def _model(tmp_path: Path, data: object, **kwargs) -> ScriptModel:
    return ScriptModel(load_script(_write(tmp_path, data)), **kwargs)


async def _call(model: ScriptModel, messages: list[Message], system: str | None = None) -> ModelReply:
    return await model.complete(Prompt(messages=messages, system=system, tools=TOOLS))


# --- playing turns ----------------------------------------------------------------------


async def test_turns_play_in_order_and_position_survives_calls(tmp_path: Path) -> None:
    model = _model(
        tmp_path,
        {
            "turns": [
                {"text": "one", "usage": {"input_tokens": 100, "output_tokens": 7}},
                {"tool_calls": [{"name": "memo__memo_set", "arguments": {"key": "k"}, "id": "c1"}]},
                {"text": "three"},
            ]
        },
    )
    first = await _call(model, [Message.user("go")])
    assert (first.text, first.stop, first.tool_calls, first.refusal) == ("one", "end", [], None)
    assert (first.usage.input_tokens, first.usage.output_tokens) == (100, 7)
    assert model.position == 1
    second = await _call(model, [Message.user("go")])
    assert second.stop == "tool_use"
    [call] = second.tool_calls
    assert (call.id, call.name, call.arguments, call.raw_arguments, call.error) == (
        "c1",
        "memo__memo_set",
        {"key": "k"},
        '{"key": "k"}',
        None,
    )
    third = await _call(model, [Message.user("go")])
    assert third.text == "three"
    assert model.position == 3


async def test_each_new_model_starts_at_turn_one(tmp_path: Path) -> None:
    path = _write(tmp_path, {"turns": [{"text": "a"}, {"text": "b"}]})
    m1 = make_model(f"script:{path}", env={})
    m2 = make_model(f"script:{path}", env={})
    assert (await m1.complete(Prompt(messages=[]))).text == "a"
    assert (await m1.complete(Prompt(messages=[]))).text == "b"
    assert (await m2.complete(Prompt(messages=[]))).text == "a"
    assert (m1.provider, m1.name) == ("script", str(path))


async def test_placeholders_fill_text_refusal_and_arguments(tmp_path: Path) -> None:
    model = _model(
        tmp_path,
        {
            "turns": [
                {
                    "text": "task={instruction} latest={input} tool={last_tool_result} other={unknown} {{x}}",
                    "tool_calls": [
                        {
                            "name": "memo__memo_set",
                            "arguments": {"value": "{instruction}", "list": ["{input}", 3]},
                        }
                    ],
                },
                {"refusal": "no to {input}"},
            ]
        },
    )
    transcript = [
        Message.user("first task"),
        Message.assistant("", []),
        Message.tool_result("c0", "stored {instruction}"),
        Message.user("newest"),
    ]
    reply = await _call(model, transcript)
    # one pass: a placeholder inside a substituted value is not expanded again
    assert reply.text == "task=first task latest=newest tool=stored {instruction} other={unknown} {{x}}"
    assert reply.tool_calls[0].arguments == {"value": "first task", "list": ["newest", 3]}
    assert json.loads(reply.tool_calls[0].raw_arguments) == reply.tool_calls[0].arguments
    refusal = await _call(model, transcript)
    assert (refusal.stop, refusal.refusal, refusal.text) == ("refusal", "no to newest", "")


async def test_placeholders_are_empty_without_messages(tmp_path: Path) -> None:
    model = _model(tmp_path, {"turns": [{"text": "[{instruction}|{input}|{last_tool_result}]"}]})
    assert (await _call(model, [])).text == "[||]"


async def test_then_no_reply_is_the_default(tmp_path: Path) -> None:
    model = _model(tmp_path, {"turns": [{"text": "only"}]})
    await _call(model, [Message.user("x")])
    for _ in range(2):
        reply = await _call(model, [Message.user("x")])
        assert (reply.text, reply.stop, reply.tool_calls) == (NO_REPLY, "end", [])


async def test_then_repeat_starts_over(tmp_path: Path) -> None:
    model = _model(tmp_path, {"turns": [{"text": "a"}, {"text": "b"}], "then": "repeat"})
    texts = [(await _call(model, [])).text for _ in range(5)]
    assert texts == ["a", "b", "a", "b", "a"]


async def test_then_stop_answers_empty_end_turn(tmp_path: Path) -> None:
    model = _model(tmp_path, {"turns": [], "then": "stop"})
    reply = await _call(model, [])
    assert (reply.text, reply.stop, reply.tool_calls) == ("", "end", [])


async def test_invalid_arguments_per_call_and_per_turn(tmp_path: Path) -> None:
    model = _model(
        tmp_path,
        {
            "turns": [
                {
                    "tool_calls": [
                        {"name": "a", "invalid_arguments": "{not json"},
                        {"name": "b", "arguments": {}},
                    ]
                },
                {
                    "invalid_arguments": "[1, 2]",
                    "tool_calls": [{"name": "c"}, {"name": "d", "arguments": {"x": 1}}],
                },
            ]
        },
    )
    first = await _call(model, [])
    bad, good = first.tool_calls
    assert (bad.arguments, bad.raw_arguments) == (None, "{not json")
    assert bad.error is not None
    assert "not valid JSON" in bad.error
    assert (good.arguments, good.error) == ({}, None)
    second = await _call(model, [])
    c, d = second.tool_calls
    assert c.arguments is None
    assert c.error is not None
    assert "not an object" in c.error
    assert d.arguments == {"x": 1}


async def test_default_ids_are_unique_across_calls(tmp_path: Path) -> None:
    model = _model(tmp_path, {"turns": [{"tool_calls": [{"name": "a"}, {"name": "a"}]}], "then": "repeat"})
    ids = [c.id for _ in range(2) for c in (await _call(model, [])).tool_calls]
    assert ids == ["script-1-0", "script-1-1", "script-2-0", "script-2-1"]


async def test_max_tokens_stop(tmp_path: Path) -> None:
    model = _model(tmp_path, {"turns": [{"text": "trunc", "stop": "max_tokens"}]})
    assert (await _call(model, [])).stop == "max_tokens"


async def test_usage_is_estimated_deterministically(tmp_path: Path) -> None:
    model = _model(tmp_path, {"turns": [{"text": "x" * 9}]})
    messages = [Message.user("y" * 10)]
    reply = await _call(model, messages, system="s" * 5)
    assert reply.usage.output_tokens == estimate_tokens("x" * 9) == 3
    assert reply.usage.input_tokens == estimate_input_tokens(
        Prompt(messages=messages, system="s" * 5, tools=TOOLS)
    )
    assert reply.usage.input_tokens > 0


async def test_latency_sleeps_in_virtual_time(tmp_path: Path, autojump_clock: trio.testing.MockClock) -> None:
    model = _model(tmp_path, {"turns": [{"text": "slow", "latency_ms": 1500}, {"text": "fast"}]})
    start = trio.current_time()
    await _call(model, [])
    assert trio.current_time() - start == pytest.approx(1.5)
    await _call(model, [])
    assert trio.current_time() - start == pytest.approx(1.5)


async def test_cancel_during_latency_replays_the_same_turn(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    model = _model(tmp_path, {"turns": [{"text": "slow", "latency_ms": 5000}, {"text": "next"}]})
    with trio.move_on_after(1):
        await _call(model, [])
    assert model.position == 0
    assert (await _call(model, [])).text == "slow"


@pytest.mark.parametrize("name", sorted(p.name for p in EXAMPLES.glob("*.json")))
def test_example_scripts_are_valid(name: str) -> None:
    script = load_script(EXAMPLES / name)
    assert script.turns


async def test_memo_demo_example_flows_data(tmp_path: Path) -> None:
    model = make_model(f"script:{EXAMPLES / 'memo-demo.json'}", env={})
    first = await model.complete(Prompt(messages=[Message.user("buy milk")], tools=TOOLS))
    assert first.tool_calls[0].arguments == {"key": "task", "value": "buy milk"}
    transcript = [
        Message.user("buy milk"),
        first.as_message(),
        Message.tool_result(first.tool_calls[0].id, "ok: task"),
    ]
    second = await model.complete(Prompt(messages=transcript, tools=TOOLS))
    assert second.text == "Done. The memo server answered: ok: task"
    assert (await model.complete(Prompt(messages=transcript, tools=TOOLS))).text == NO_REPLY


T1 = r"turn 1 \(turns\[0\]\)"

# --- invalid files ----------------------------------------------------------------------


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=rf"script file '{path}' does not exist; fix the path") as info:
        load_script(path)
    assert info.value.setting == "model"
    assert info.value.value == f"script:{path}"
    assert info.value.exit_code == 2


def test_home_is_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    _write(tmp_path, {"turns": [{"text": "home"}]})
    assert load_script("~/s.json").source == str(tmp_path / "s.json")


def test_directory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"is a directory, not a regular file; name a script file"):
        load_script(tmp_path)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_file(tmp_path: Path) -> None:
    path = _write(tmp_path, {"turns": []})
    path.chmod(0)
    with pytest.raises(
        ConfigError, match=r"cannot read script file .*Permission denied.*fix the path or its permissions"
    ):
        load_script(path)


def test_path_through_a_file_is_unreadable(tmp_path: Path) -> None:
    parent = _write(tmp_path, {"turns": []})
    with pytest.raises(
        ConfigError, match=r"cannot read script file .*Not a directory.*fix the path or its permissions"
    ):
        load_script(parent / "inner.json")


def test_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    path.write_bytes(b'{"turns": ["\xff"]}')
    with pytest.raises(ConfigError, match=r"is not UTF-8 text"):
        load_script(path)


def test_invalid_json_names_line_and_column(tmp_path: Path) -> None:
    path = _write(tmp_path, '{\n  "turns": [\n    {"text": "a"}\n    {"text": "b"}\n  ]\n}\n')
    with pytest.raises(
        ConfigError, match=r"line 4 column 5: invalid JSON \(Expecting ',' delimiter\); fix the syntax"
    ):
        load_script(path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ([], r"top level: must be an object like \{\"turns\": \[...\]\}, not a list"),
        ({}, r"top level: has no \"turns\" list"),
        ({"turns": [], "mode": "x"}, r"top level: unknown key 'mode'; allowed: description, then, turns"),
        ({"turns": {}}, r"turns: must be a list of turn objects, not an object"),
        ({"turns": [], "then": "loop"}, r"then: is 'loop'; use one of 'no_reply', 'repeat', 'stop'"),
        ({"turns": [], "then": "repeat"}, r"then: \"repeat\" needs at least one turn"),
        ({"turns": [], "description": 3}, r"description: must be a string, not a number"),
        ({"turns": ["hi"]}, r"turn 1 \(turns\[0\]\): must be an object, not a string"),
        ({"turns": [{}, {"txt": "a"}]}, r"turn 2 \(turns\[1\]\): unknown key 'txt'"),
        ({"turns": [{"text": 5}]}, r"turn 1 \(turns\[0\]\).text: must be a string, not a number"),
        ({"turns": [{"tool_calls": {}}]}, r"turn 1 \(turns\[0\]\).tool_calls: must be a list, not an object"),
        (
            {"turns": [{"tool_calls": ["x"]}]},
            r"turn 1 \(turns\[0\]\).tool_calls\[0\]: must be an object like",
        ),
        (
            {"turns": [{"tool_calls": [{"arguments": {}}]}]},
            T1 + r".tool_calls\[0\]: needs a \"name\" \(a non-empty string\), got None",
        ),
        (
            {"turns": [{"tool_calls": [{"name": ""}]}]},
            T1 + r".tool_calls\[0\]: needs a \"name\" \(a non-empty string\), got ''",
        ),
        (
            {"turns": [{"tool_calls": [{"name": "a", "arguments": [1]}]}]},
            T1 + r".tool_calls\[0\].arguments: must be an object, not a list",
        ),
        (
            {"turns": [{"tool_calls": [{"name": "a", "id": ""}]}]},
            T1 + r".tool_calls\[0\].id: must not be empty",
        ),
        (
            {"turns": [{"tool_calls": [{"name": "a", "arguments": {}, "invalid_arguments": "{"}]}]},
            T1 + r".tool_calls\[0\]: give \"arguments\" or \"invalid_arguments\", not both",
        ),
        (
            {"turns": [{"invalid_arguments": "{"}]},
            T1 + r": \"invalid_arguments\" needs at least one tool call in the same turn",
        ),
        (
            {"turns": [{"refusal": "no", "text": "a"}]},
            T1 + r": a \"refusal\" turn cannot also have \"text\" or \"tool_calls\"",
        ),
        (
            {"turns": [{"text": "a", "stop": "tool_use"}]},
            r"turn 1 \(turns\[0\]\).stop: is 'tool_use'; use 'end' or 'max_tokens'",
        ),
        (
            {"turns": [{"refusal": "no", "stop": "max_tokens"}]},
            T1 + r".stop: \"max_tokens\" applies only to a text turn",
        ),
        (
            {"turns": [{"usage": 5}]},
            T1 + r".usage: must be \{\"input_tokens\": int, \"output_tokens\": int\}, not a number",
        ),
        (
            {"turns": [{"usage": {"input_tokens": -1}}]},
            T1 + r".usage.input_tokens: must be an integer >= 0, not -1",
        ),
        (
            {"turns": [{"usage": {"output_tokens": True}}]},
            T1 + r".usage.output_tokens: must be an integer >= 0, not True",
        ),
        ({"turns": [{"usage": {"total": 1}}]}, T1 + r".usage: unknown key 'total'"),
        ({"turns": [{"latency_ms": -5}]}, T1 + r".latency_ms: must be a number of milliseconds >= 0, not -5"),
        (
            {"turns": [{"latency_ms": "5"}]},
            T1 + r".latency_ms: must be a number of milliseconds >= 0, not '5'",
        ),
    ],
)
def test_invalid_shapes_name_file_turn_and_fix(tmp_path: Path, data: object, message: str) -> None:
    path = _write(tmp_path, data)
    with pytest.raises(
        ConfigError,
        match=rf"^model: 'script:{re.escape(str(path))}' is not valid: script file '{re.escape(str(path))}' {message}",
    ) as info:
        load_script(path)
    assert str(info.value).endswith("see the format in rfcs/0022-script-model-format.md or examples/scripts/")


def test_nan_latency_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, '{"turns": [{"latency_ms": NaN}]}')
    with pytest.raises(ConfigError, match=r"latency_ms: must be a number of milliseconds >= 0, not nan"):
        load_script(path)


# --- any JSON: a ConfigError or a working model, never another exception ----------------

_json = json_values(ints=5, text=8, keys=8, leaves=12, floats=True)
_keys = st.sampled_from(
    [
        "text",
        "tool_calls",
        "refusal",
        "stop",
        "usage",
        "latency_ms",
        "invalid_arguments",
        "name",
        "arguments",
        "id",
    ]
)
_turnish = st.recursive(
    _json,
    lambda inner: st.dictionaries(_keys, inner, max_size=4) | st.lists(inner, max_size=3),
    max_leaves=10,
)
_scriptish = st.one_of(
    _json,
    st.fixed_dictionaries(
        {"turns": st.lists(_turnish, max_size=3)},
        optional={"then": st.sampled_from(["no_reply", "repeat", "stop", "x"]) | _json},
    ),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_scriptish)
def test_random_json_is_config_error_or_a_playable_script(data: object) -> None:
    try:
        script = parse_script(data, source="fuzz.json", spec="script:fuzz.json")
    except ConfigError as exc:
        message = str(exc)
        script = None
    if script is None:
        assert "fuzz.json" in message
        return

    async def play() -> None:
        model = ScriptModel(script, sleep=_no_sleep)
        for _ in range(len(script.turns) + 2):
            reply = await model.complete(Prompt(messages=[Message.user("u")], system="s", tools=TOOLS))
            assert reply.stop in ("end", "tool_use", "refusal", "max_tokens")
            assert reply.usage.input_tokens >= 0
            assert reply.usage.output_tokens >= 0

    trio.run(play)


async def _no_sleep(_seconds: float) -> None:
    return None


@settings(max_examples=100, deadline=None)
@given(text=st.text(max_size=40))
def test_random_file_text_is_config_error_or_script(
    tmp_path_factory: pytest.TempPathFactory, text: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "s.json"
    path.write_text(text, encoding="utf-8")
    message = ""
    try:
        load_script(path)
    except ConfigError as exc:
        message = str(exc)
    assert message == "" or str(path) in message

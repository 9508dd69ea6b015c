"""Model settings: parsing, layering, what each wire API can carry, and every message pinned."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.models.settings import (
    PROMPT_CACHES,
    REASONING_EFFORTS,
    SUPPORTED,
    ModelSettings,
    SettingError,
    check_settings,
)


def test_every_key_parses_from_text_as_env_and_flags_give_it() -> None:
    s = ModelSettings.from_mapping(
        {
            "temperature": "0.5",
            "top_p": "1",
            "max_output_tokens": "300",
            "stop": "END",
            "reasoning_effort": " High ",
            "thinking_budget": "0",
            "parallel_tool_calls": "false",
            "tool_choice": "memo__memo_get",
            "prompt_cache": "1h",
            "extra": {"seed": 3},
        }
    )
    assert s.given() == {
        "temperature": 0.5,
        "top_p": 1.0,
        "max_output_tokens": 300,
        "stop": ["END"],
        "reasoning_effort": "high",
        "thinking_budget": 0,
        "parallel_tool_calls": False,
        "tool_choice": "memo__memo_get",
        "prompt_cache": "1h",
        "extra": {"seed": 3},
    }


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("temperature", 2.5, r"^give a number from 0 up to 2$"),
        ("temperature", "hot", r"^give a number from 0 to 2$"),
        ("temperature", True, r"^give a number from 0 to 2$"),
        ("temperature", float("nan"), r"^give a number from 0 to 2$"),
        ("top_p", 0, r"^give a number above 0 up to 1$"),
        ("max_output_tokens", 0, r"^give a whole number ≥ 1 \(tokens per reply\)$"),
        ("max_output_tokens", 1.5, r"^give a whole number ≥ 1"),
        ("thinking_budget", 512, r"smallest thinking budget is 1024 tokens; raise it, or 0 for off$"),
        ("thinking_budget", -1, r"^give a whole number ≥ 0"),
        ("stop", [], r'^give a stop sequence or a list of them, e\.g\. \["END"\]$'),
        ("stop", ["ok", ""], r"^each stop sequence is non-empty text$"),
        ("reasoning_effort", "max", r"^choose one of none, minimal, low, medium, high, xhigh$"),
        ("prompt_cache", "forever", r"^choose one of 5m, 1h, off$"),
        ("parallel_tool_calls", "maybe", r"^write true or false$"),
        ("tool_choice", "call a tool", r"^choose auto, none, required, or the name of one tool to force"),
        ("extra", [1], r"^write a table of raw request fields, e\.g\. extra = \{ seed = 7 \}$"),
        (
            "tempurature",
            1,
            r"^unknown model setting; did you mean 'temperature'\? known: extra, images, max_output",
        ),
    ],
)
def test_bad_values_name_the_fix(key: str, value: Any, message: str) -> None:
    with pytest.raises(SettingError, match=message) as info:
        ModelSettings.from_mapping({key: value})
    assert info.value.key == key


def test_extra_cannot_replace_what_agentd_writes() -> None:
    with pytest.raises(SettingError, match=r"^agentd writes 'tools' itself; remove it from extra$") as info:
        ModelSettings.from_mapping({"extra": {"seed": 1, "tools": []}})
    assert info.value.key == "extra.tools"


def test_merged_takes_the_route_keys_and_merges_extra() -> None:
    top = ModelSettings(temperature=0.2, max_output_tokens=100, extra={"seed": 1, "user": "a"})
    route = ModelSettings(max_output_tokens=50, extra={"user": "b"})
    merged = top.merged(route)
    assert merged.given() == {"temperature": 0.2, "max_output_tokens": 50, "extra": {"seed": 1, "user": "b"}}
    assert top.merged(ModelSettings()) == top


def test_for_api_drops_what_the_api_cannot_carry() -> None:
    s = ModelSettings(temperature=0.1, thinking_budget=2048, reasoning_effort="low", stop=("x",))
    assert s.for_api("chat").given() == {"temperature": 0.1, "reasoning_effort": "low", "stop": ["x"]}
    assert s.for_api("messages").given() == {"temperature": 0.1, "thinking_budget": 2048, "stop": ["x"]}
    assert s.for_api("responses").given() == {"temperature": 0.1, "reasoning_effort": "low"}


@pytest.mark.parametrize(
    ("api", "settings", "key", "message"),
    [
        ("chat", ModelSettings(thinking_budget=2048), "thinking_budget", "use reasoning_effort"),
        ("responses", ModelSettings(stop=("x",)), "stop", "the Responses API has no stop sequences"),
        ("messages", ModelSettings(reasoning_effort="low"), "reasoning_effort", "use thinking_budget"),
        ("chat", ModelSettings(prompt_cache="1h"), "prompt_cache", "OpenAI caches prompts automatically"),
        ("chat", ModelSettings(stop=("a", "b", "c", "d", "e")), "stop", "at most 4 stop sequences"),
        ("messages", ModelSettings(temperature=1.2), "temperature", "takes a temperature from 0 to 1"),
        (
            "messages",
            ModelSettings(thinking_budget=4096, max_output_tokens=4096),
            "max_output_tokens",
            "the output limit must be larger",
        ),
        (
            "messages",
            ModelSettings(thinking_budget=4096, temperature=0.5),
            "temperature",
            "does not take a temp",
        ),
        ("messages", ModelSettings(thinking_budget=4096, top_p=0.5), "top_p", "top_p must be from 0.95 to 1"),
        (
            "messages",
            ModelSettings(thinking_budget=4096, tool_choice="required"),
            "tool_choice",
            "cannot be forced",
        ),
    ],
)
def test_check_settings_per_api(api: Any, settings: ModelSettings, key: str, message: str) -> None:
    problems = check_settings(settings, api, model="m:x")
    assert [p.key for p in problems] == [key]
    assert message in problems[0].fix


def test_the_script_model_takes_every_setting() -> None:
    every = ModelSettings(
        temperature=1.5,
        top_p=0.5,
        max_output_tokens=10,
        stop=tuple("abcdef"),
        reasoning_effort="low",
        thinking_budget=2048,
        parallel_tool_calls=True,
        tool_choice="none",
        prompt_cache="off",
        images=False,
        extra={"x": 1},
    )
    assert set(every.given()) == SUPPORTED["script"]
    assert check_settings(every, "script", model="script:f") == []


_values = st.fixed_dictionaries(
    {},
    optional={
        "temperature": st.floats(0, 2),
        "top_p": st.floats(0.01, 1),
        "max_output_tokens": st.integers(1, 10**6),
        "stop": st.lists(st.text(min_size=1, max_size=5), min_size=1, max_size=3),
        "reasoning_effort": st.sampled_from(REASONING_EFFORTS),
        "thinking_budget": st.sampled_from([0, 1024, 5000]),
        "parallel_tool_calls": st.booleans(),
        "tool_choice": st.sampled_from(["auto", "none", "required", "memo__get"]),
        "prompt_cache": st.sampled_from(PROMPT_CACHES),
        "extra": st.dictionaries(st.sampled_from(["seed", "user", "metadata"]), st.integers(), max_size=2),
    },
)


@given(_values)
def test_given_round_trips_through_the_spawn_payload(values: dict[str, Any]) -> None:
    s = ModelSettings.from_mapping(values)
    assert ModelSettings.from_mapping(s.given()) == s

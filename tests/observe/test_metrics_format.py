"""agentd.observe.metrics.render, checked with Prometheus' own text-format parser."""

from __future__ import annotations

import re
from typing import get_args, get_type_hints

import pytest
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.parser import text_string_to_metric_families

from agentd.events import ServerState, SubscriptionStateChanged
from agentd.observe.metrics import (
    SUBSCRIPTION_STATES,
    MetricsSnapshot,
    escape_help,
    escape_label_value,
    render,
)

FULL = MetricsSnapshot(
    routed={"inbox": 7, "alerts": 2},
    unrouted=3,
    coalesced={"inbox": 5},
    dropped={"drop_oldest": 1, "budget": 4},
    server_restarts={"memo": 2},
    agent_restarts=1,
    tokens_input=1000,
    tokens_output=250,
    tokens_cached_input=600,
    tokens_cache_creation_input=40,
    cost_usd=0.0123456,
    unpriced_calls=2,
    subagents_running=3,
    warm_sessions=2,
    draining=True,
    telemetry_dropped=17,
    outputs_lost=2,
    server_state={"memo": ServerState.CONNECTED, "kube": ServerState.RESTARTING},
    subscription_state={("memo", "memo://a"): "established", ("kube", "kube://pods"): "resubscribing"},
    limit_refusals={"max_self_subscriptions_per_session": 36, "watches.max_watches": 0},
    subscribe_failures={"kube": 28, "memo": 0},
)


def _parse(text: str) -> dict[str, tuple[str, list]]:
    return {f.name: (f.type, f.samples) for f in text_string_to_metric_families(text)}


def _value(samples: list, **labels: str) -> float:
    (match,) = [s.value for s in samples if s.labels == labels]
    return match


def test_every_family_parses_with_the_right_type_and_prefix():
    text = render(FULL)
    families = _parse(text)
    assert set(families) == {
        "agentd_up",
        "agentd_draining",
        "agentd_subagents_running",
        "agentd_warm_sessions",
        "agentd_events_routed",
        "agentd_events_unrouted",
        "agentd_events_coalesced",
        "agentd_events_dropped",
        "agentd_server_restarts",
        "agentd_agent_restarts",
        "agentd_tokens",
        "agentd_cache_tokens",
        "agentd_cost_usd",
        "agentd_model_calls_unpriced",
        "agentd_telemetry_dropped",
        "agentd_outputs_lost",
        "agentd_server_state",
        "agentd_subscription_state",
        "agentd_subscriptions_unresolved",
        "agentd_limit_refusals",
        "agentd_subscribe_failures",
        "agentd_build_info",
        "agentd_model_call_duration_seconds",
        "agentd_tool_call_duration_seconds",
        "agentd_spawn_duration_seconds",
        "agentd_event_to_agent_seconds",
        "agentd_turn_duration_seconds",
    }
    for name, (kind, samples) in families.items():
        assert name.startswith("agentd_")
        if kind == "counter":
            assert all(s.name == name + "_total" for s in samples), name
        elif kind == "histogram":
            assert name.endswith("_seconds"), name
        else:
            assert kind == "gauge", name
    # Every family has HELP and TYPE lines, and the text ends with a newline.
    for name in re.findall(r"^# TYPE (\S+) ", text, flags=re.M):
        assert f"# HELP {name} " in text
    assert text.endswith("\n")


def test_values_round_trip():
    f = _parse(render(FULL))
    assert _value(f["agentd_up"][1]) == 1
    assert _value(f["agentd_draining"][1]) == 1
    assert _value(f["agentd_subagents_running"][1]) == 3
    assert _value(f["agentd_warm_sessions"][1]) == 2
    assert _value(f["agentd_events_routed"][1], route="inbox") == 7
    assert _value(f["agentd_events_routed"][1], route="alerts") == 2
    assert _value(f["agentd_events_unrouted"][1]) == 3
    assert _value(f["agentd_events_coalesced"][1], route="inbox") == 5
    assert _value(f["agentd_events_dropped"][1], reason="budget") == 4
    assert _value(f["agentd_server_restarts"][1], server="memo") == 2
    assert _value(f["agentd_agent_restarts"][1]) == 1
    assert _value(f["agentd_tokens"][1], direction="input") == 1000
    assert _value(f["agentd_tokens"][1], direction="output") == 250
    assert _value(f["agentd_cache_tokens"][1], kind="read") == 600
    assert _value(f["agentd_cache_tokens"][1], kind="write") == 40
    assert _value(f["agentd_cost_usd"][1]) == pytest.approx(0.0123456)
    assert _value(f["agentd_model_calls_unpriced"][1]) == 2
    assert _value(f["agentd_telemetry_dropped"][1]) == 17
    assert _value(f["agentd_outputs_lost"][1]) == 2
    assert _value(f["agentd_limit_refusals"][1], limit="max_self_subscriptions_per_session") == 36
    assert _value(f["agentd_limit_refusals"][1], limit="watches.max_watches") == 0
    assert _value(f["agentd_subscribe_failures"][1], server="kube") == 28


def test_state_sets_have_one_sample_per_state_and_exactly_one_set():
    f = _parse(render(FULL))
    servers = f["agentd_server_state"][1]
    assert len(servers) == 2 * len(ServerState)
    for server, current in FULL.server_state.items():
        ones = [s.labels["state"] for s in servers if s.labels["server"] == server and s.value == 1]
        assert ones == [current.value]
    subs = f["agentd_subscription_state"][1]
    assert len(subs) == 2 * len(SUBSCRIPTION_STATES)
    assert _value(subs, server="kube", uri="kube://pods", state="resubscribing") == 1
    assert _value(subs, server="kube", uri="kube://pods", state="established") == 0


def test_subscription_vocabulary_matches_the_reactor_event():
    # A drift guard: the metric's state set is the event's Literal.
    hint = get_type_hints(SubscriptionStateChanged)["state"]
    assert get_args(hint) == SUBSCRIPTION_STATES


def test_empty_snapshot_still_renders_every_family():
    f = _parse(render(MetricsSnapshot()))
    assert _value(f["agentd_up"][1]) == 1
    assert _value(f["agentd_draining"][1]) == 0
    assert f["agentd_events_routed"][1] == []
    assert f["agentd_server_state"][1] == []


def test_render_is_deterministic():
    assert render(FULL) == render(FULL)
    reordered = MetricsSnapshot(routed={"alerts": 2, "inbox": 7})
    assert render(reordered) == render(MetricsSnapshot(routed={"inbox": 7, "alerts": 2}))


def test_escaping_examples():
    assert escape_label_value('a"b\\c\nd') == 'a\\"b\\\\c\\nd'
    assert escape_help("x\\y\nz") == "x\\\\y\\nz"


@given(st.text(), st.text())
def test_any_label_value_survives_the_parser(route, uri):
    snap = MetricsSnapshot(routed={route: 1}, subscription_state={("s", uri): "lost"})
    f = _parse(render(snap))
    assert f["agentd_events_routed"][1][0].labels == {"route": route}
    assert _value(f["agentd_subscription_state"][1], server="s", uri=uri, state="lost") == 1


def test_build_info_names_the_version_and_python():
    from agentd import __version__

    (sample,) = _parse(render(MetricsSnapshot()))["agentd_build_info"][1]
    assert sample.value == 1
    assert sample.labels["version"] == __version__
    assert sample.labels["python_version"].count(".") == 2


def test_histograms_render_cumulative_buckets_sum_and_count():
    from agentd.observe.histograms import LATENCY_BUCKETS, Histograms

    h = Histograms()
    for seconds in (0.0005, 0.2, 0.2, 7.0, 10_000.0, -1.0):
        h.observe("model_call", seconds, {"route": "inbox", "provider": "openai"})
    h.observe("spawn", 0.003, {"how": "zygote"})
    f = _parse(render(MetricsSnapshot(histograms=h.snapshot())))
    kind, samples = f["agentd_model_call_duration_seconds"]
    assert kind == "histogram"
    buckets = {
        s.labels["le"]: s.value
        for s in samples
        if s.name.endswith("_bucket") and s.labels["route"] == "inbox" and s.labels["provider"] == "openai"
    }
    assert len(buckets) == len(LATENCY_BUCKETS) + 1
    assert buckets["0.001"] == 2  # 0.0005 and the negative one, counted as 0
    assert buckets["0.25"] == 4
    assert buckets["10.0"] == 5
    assert buckets["+Inf"] == 6
    (total,) = [s.value for s in samples if s.name.endswith("_count")]
    (summed,) = [s.value for s in samples if s.name.endswith("_sum")]
    assert total == 6
    assert summed == pytest.approx(0.0005 + 0.4 + 7.0 + 10_000.0)
    spawn = f["agentd_spawn_duration_seconds"][1]
    assert {s.labels["how"] for s in spawn} == {"zygote"}
    # Families with no observation yet are still declared (HELP and TYPE).
    assert f["agentd_turn_duration_seconds"] == ("histogram", [])


def test_process_metrics_come_with_the_endpoint_rendering():
    from agentd.observe.metrics import render_with_process

    f = _parse(render_with_process(MetricsSnapshot()))
    assert _value(f["process_resident_memory_bytes"][1]) > 0
    assert _value(f["process_open_fds"][1]) > 0
    assert "agentd_up" in f

"""What agentd exposes to Prometheus, rendered with ``prometheus_client``'s exposition.

The reactor owns every number; :class:`MetricsSnapshot` is a frozen copy of
them taken on request (``/metrics`` calls an injected ``snapshot()``).
:func:`render` turns one snapshot into Prometheus text exposition format
0.0.4 through a custom collector (:class:`SnapshotCollector`) and
``prometheus_client.generate_latest``; it is pure and synchronous. The
endpoint itself stays agentd's own trio server (:mod:`agentd.observe.health`), which
also adds the standard ``process_*`` families (:func:`render_with_process`).

Families (every name prefixed ``agentd_``; counters end in ``_total``):

=====================================  =======  ==========================
family                                 type     labels
=====================================  =======  ==========================
``agentd_up``                          gauge    (none): always 1
``agentd_draining``                    gauge    (none): 1 once SIGTERM arrived
``agentd_subagents_running``           gauge    (none)
``agentd_warm_sessions``               gauge    (none)
``agentd_events_routed_total``         counter  ``route``
``agentd_events_unrouted_total``       counter  (none)
``agentd_events_coalesced_total``      counter  ``route``
``agentd_events_dropped_total``        counter  ``reason``
``agentd_server_restarts_total``       counter  ``server``
``agentd_agent_restarts_total``        counter  (none)
``agentd_tokens_total``                counter  ``direction`` (input/output)
``agentd_cache_tokens_total``          counter  ``kind`` (read/write): parts of the input tokens
``agentd_cost_usd_total``              counter  (none): US dollars of the priced model calls
``agentd_model_calls_unpriced_total``  counter  (none): calls whose price is unknown
``agentd_telemetry_dropped_total``     counter  (none)
``agentd_outputs_lost_total``          counter  (none)
``agentd_server_state``                gauge    ``server``, ``state``: 0/1
``agentd_subscription_state``          gauge    ``server``, ``uri``, ``state``: 0/1
``agentd_subscriptions_unresolved``    gauge    (none): declared patterns matching nothing
``agentd_limit_refusals_total``        counter  ``limit``: a model's request refused by a cap (rfcs/0265)
``agentd_subscribe_failures_total``    counter  ``server``: a model's subscription the server refused
``agentd_build_info``                  gauge    ``version``, ``python_version``: always 1
``agentd_*_seconds``                   histo.   see :mod:`agentd.observe.histograms`
=====================================  =======  ==========================

Declared routes appear in the per-route counters at 0 from the start.

The two ``*_state`` families are state sets: for every server (subscription)
one sample per member of the closed state vocabulary, exactly one of them 1,
so a query like ``agentd_server_state{state="failed"} == 1`` needs no regex.
"""

from __future__ import annotations

import platform
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, get_args

from agentd import __version__
from agentd.core.redact import redact
from agentd.events import ServerState
from agentd.observe.histograms import HISTOGRAMS, HistogramName, Series

if TYPE_CHECKING:
    # Imported where a scrape renders: the reactor holds a MetricsSnapshot in every run,
    # and a run without /metrics never needs the exposition library.
    from prometheus_client import CollectorRegistry
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The ``Content-Type`` of :func:`render`'s output (exposition format 0.0.4)."""

SubscriptionState = Literal["established", "lost", "resubscribing", "failed"]
"""The states a subscription reports (same vocabulary as ``SubscriptionStateChanged.state``)."""

SUBSCRIPTION_STATES: tuple[SubscriptionState, ...] = get_args(SubscriptionState)

TokenDirection = Literal["input", "output"]
"""Which side of a model call the tokens were spent on."""


@dataclass(frozen=True, slots=True)
class MetricsSnapshot:
    """A frozen copy of the reactor's numbers at one instant.

    Counters only ever grow during a process's life; gauges are the current
    value. Label-keyed mappings are bounded by configuration (route ids,
    server names, declared subscriptions), never by traffic, so cardinality
    stays under the operator's control.
    """

    routed: Mapping[str, int] = field(default_factory=dict)
    """Events delivered through a route, by route id."""
    unrouted: int = 0
    """Events that matched no route (logged and discarded)."""
    coalesced: Mapping[str, int] = field(default_factory=dict)
    """Events merged into one already queued for the same URI, by route id."""
    dropped: Mapping[str, int] = field(default_factory=dict)
    """Events dropped by an overflow policy or a budget, by reason."""
    server_restarts: Mapping[str, int] = field(default_factory=dict)
    """Reconnects of upstream MCP servers, by server name."""
    agent_restarts: int = 0
    """Restarts of the root agent (``loop`` mode)."""
    tokens_input: int = 0
    """Model input tokens spent by the whole tree."""
    tokens_output: int = 0
    """Model output tokens spent by the whole tree."""
    tokens_cached_input: int = 0
    """The part of the input tokens read from a prompt cache."""
    tokens_cache_creation_input: int = 0
    """The part of the input tokens written to a prompt cache."""
    cost_usd: float = 0.0
    """US dollars the priced model calls cost (``genai-prices``)."""
    unpriced_calls: int = 0
    """Model calls whose price is unknown (not counted in ``cost_usd``)."""
    subagents_running: int = 0
    """Child agent processes alive now."""
    warm_sessions: int = 0
    """Continue-route sessions alive and waiting for their next delivery."""
    draining: bool = False
    """True once the first SIGTERM/SIGINT/SIGHUP arrived."""
    telemetry_dropped: int = 0
    """Telemetry lines dropped because stderr was full, closed or not read."""
    outputs_lost: int = 0
    """Published results that could not be written to stdout (daemons keep running)."""
    server_state: Mapping[str, ServerState] = field(default_factory=dict)
    """Current state of every configured upstream server, by name."""
    subscription_state: Mapping[tuple[str, str], SubscriptionState] = field(default_factory=dict)
    """Current state of every subscription, keyed by ``(server, uri)``."""
    subscriptions_unresolved: int = 0
    """Declared subscription patterns that resolve to no resource right now (rfcs/0134)."""
    limit_refusals: Mapping[str, int] = field(default_factory=dict)
    """A model's requests refused by a cap on what it may create, by cap (its setting's name)."""
    subscribe_failures: Mapping[str, int] = field(default_factory=dict)
    """Subscriptions a model asked for that the server refused or did not confirm, by server."""
    histograms: Mapping[HistogramName, Mapping[tuple[str, ...], Series]] = field(default_factory=dict)
    """Latency observations by histogram and label values (:mod:`agentd.observe.histograms`)."""


def escape_label_value(value: str) -> str:
    r"""Escape a label value for the text format: ``\`` → ``\\``, ``"`` → ``\"``, newline → ``\n``."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    r"""Escape HELP text for the text format: ``\`` → ``\\``, newline → ``\n``."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


Sample = tuple[Mapping[str, str], int | float]
"""One sample: its labels and its value."""


def _family(
    name: str, kind: Literal["counter", "gauge"], help_text: str, samples: Iterable[Sample]
) -> Metric:
    from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

    samples = list(samples)
    labels = sorted(samples[0][0]) if samples and samples[0][0] else []
    family: CounterMetricFamily | GaugeMetricFamily
    if kind == "counter":
        family = CounterMetricFamily(name.removesuffix("_total"), help_text, labels=labels)
    else:
        family = GaugeMetricFamily(name, help_text, labels=labels)
    for sample_labels, value in samples:
        # Label values come from configuration and URIs: redacted like every other output.
        family.add_metric([redact(sample_labels[k]) for k in labels], float(value))
    return family


def _by(label: str, counts: Mapping[str, int]) -> list[Sample]:
    return [({label: key}, counts[key]) for key in sorted(counts)]


def _histogram(name: HistogramName, series: Mapping[tuple[str, ...], Series]) -> Metric:
    from prometheus_client.core import HistogramMetricFamily

    spec = HISTOGRAMS[name]
    family = HistogramMetricFamily(spec.family, spec.help, labels=list(spec.labels))
    for key in sorted(series):
        s = series[key]
        family.add_metric([redact(v) for v in key], buckets=s.cumulative(), sum_value=s.sum)
    return family


class SnapshotCollector:
    """A ``prometheus_client`` collector over one snapshot function (called per scrape)."""

    def __init__(self, snapshot: Callable[[], MetricsSnapshot]) -> None:
        self._snapshot = snapshot

    def collect(self) -> Iterator[Metric]:
        yield from families(self._snapshot())


def families(snap: MetricsSnapshot) -> list[Metric]:
    """Every agentd family of ``snap``, in a fixed order."""
    server_states = [
        ({"server": server, "state": state.value}, int(current is state))
        for server, current in sorted(snap.server_state.items())
        for state in ServerState
    ]
    subscription_states = [
        ({"server": server, "state": state, "uri": uri}, int(current == state))
        for (server, uri), current in sorted(snap.subscription_state.items())
        for state in SUBSCRIPTION_STATES
    ]
    out = [
        _family("agentd_up", "gauge", "1 while agentd answers.", [({}, 1)]),
        _family(
            "agentd_draining",
            "gauge",
            "1 once a stop signal arrived and agentd is draining.",
            [({}, int(snap.draining))],
        ),
        _family(
            "agentd_subagents_running",
            "gauge",
            "Child agent processes alive now.",
            [({}, snap.subagents_running)],
        ),
        _family(
            "agentd_warm_sessions",
            "gauge",
            "Continue-route sessions alive between deliveries.",
            [({}, snap.warm_sessions)],
        ),
        _family(
            "agentd_events_routed_total",
            "counter",
            "Resource events delivered through a route.",
            _by("route", snap.routed),
        ),
        _family(
            "agentd_events_unrouted_total",
            "counter",
            "Resource events that matched no route.",
            [({}, snap.unrouted)],
        ),
        _family(
            "agentd_events_coalesced_total",
            "counter",
            "Events merged into one already queued for the same URI.",
            _by("route", snap.coalesced),
        ),
        _family(
            "agentd_events_dropped_total",
            "counter",
            "Events dropped by an overflow policy or a budget.",
            _by("reason", snap.dropped),
        ),
        _family(
            "agentd_server_restarts_total",
            "counter",
            "Reconnects of upstream MCP servers.",
            _by("server", snap.server_restarts),
        ),
        _family(
            "agentd_agent_restarts_total",
            "counter",
            "Restarts of the root agent (loop mode).",
            [({}, snap.agent_restarts)],
        ),
        _family(
            "agentd_tokens_total",
            "counter",
            "Model tokens spent by the whole agent tree.",
            [({"direction": "input"}, snap.tokens_input), ({"direction": "output"}, snap.tokens_output)],
        ),
        _family(
            "agentd_cache_tokens_total",
            "counter",
            "Input tokens read from (kind=read) or written to (kind=write) a provider's prompt cache.",
            [
                ({"kind": "read"}, snap.tokens_cached_input),
                ({"kind": "write"}, snap.tokens_cache_creation_input),
            ],
        ),
        _family(
            "agentd_cost_usd_total",
            "counter",
            "US dollars the model calls cost, from the genai-prices database (priced calls only).",
            [({}, float(snap.cost_usd))],
        ),
        _family(
            "agentd_model_calls_unpriced_total",
            "counter",
            "Model calls whose price is unknown (a model genai-prices does not list).",
            [({}, snap.unpriced_calls)],
        ),
        _family(
            "agentd_telemetry_dropped_total",
            "counter",
            "Telemetry lines dropped because stderr was full, closed or not read.",
            [({}, snap.telemetry_dropped)],
        ),
        _family(
            "agentd_outputs_lost_total",
            "counter",
            "Published results that could not be written to stdout.",
            [({}, snap.outputs_lost)],
        ),
        _family(
            "agentd_server_state",
            "gauge",
            "1 for the current state of each upstream MCP server, 0 for the others.",
            server_states,
        ),
        _family(
            "agentd_subscription_state",
            "gauge",
            "1 for the current state of each resource subscription, 0 for the others.",
            subscription_states,
        ),
        _family(
            "agentd_subscriptions_unresolved",
            "gauge",
            "Declared subscription patterns that resolve to no resource of any server.",
            [({}, snap.subscriptions_unresolved)],
        ),
        _family(
            "agentd_limit_refusals_total",
            "counter",
            "A model's subscribe or watch_start refused by a cap on what it may create (label: the setting).",
            _by("limit", snap.limit_refusals),
        ),
        _family(
            "agentd_subscribe_failures_total",
            "counter",
            "Subscriptions a model asked for (subscribe, watch_start) that the server refused or did not confirm.",
            _by("server", snap.subscribe_failures),
        ),
    ]
    out.append(
        _family(
            "agentd_build_info",
            "gauge",
            "Which agentd runs: always 1, its version and Python's in labels.",
            [({"version": __version__, "python_version": platform.python_version()}, 1)],
        )
    )
    out += [_histogram(name, snap.histograms.get(name, {})) for name in HISTOGRAMS]
    return out


def _registry(snap: MetricsSnapshot, *, process: bool) -> CollectorRegistry:
    from prometheus_client import CollectorRegistry, ProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(SnapshotCollector(lambda: snap))
    if process:
        ProcessCollector(registry=registry)
    return registry


def render(snap: MetricsSnapshot) -> str:
    """Render ``snap`` as Prometheus text exposition format 0.0.4 (agentd's families only).

    The output is deterministic (families in a fixed order, series sorted)
    and ends with a newline, as the format requires.
    """
    from prometheus_client import generate_latest

    return generate_latest(_registry(snap, process=False)).decode()


def render_with_process(snap: MetricsSnapshot) -> str:
    """:func:`render` plus the standard ``process_*`` families (CPU, memory, descriptors, start time)."""
    from prometheus_client import generate_latest

    return generate_latest(_registry(snap, process=True)).decode()

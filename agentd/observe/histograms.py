"""Latency histograms: cumulative buckets in seconds, kept in memory, pure and synchronous.

The parts that time something call :meth:`agentd.observe.telemetry.Telemetry.observe`
(telemetry already carries agentd's counters to every part);
``/metrics`` renders a copy (:meth:`Histograms.snapshot`). Label values come
from configuration (route ids, provider and server names), never from
traffic, so the number of series stays under the operator's control.

===========================  ===============================================  =======================
histogram                    what is timed                                    labels
===========================  ===============================================  =======================
``model_call``               one model call, retries included (the child's    ``route``, ``provider``
                             measure)
``tool_call``                one tool call through the supervisor's hub       ``server``
``spawn``                    the spawn request → the child runs               ``how`` (zygote/fresh)
``event_to_agent``           an update received → agentd hands it to an       ``route``
                             agent (spawn request or a warm session's turn)
``turn``                     an agent's turn: handed its input → terminal     ``route``
                             status
===========================  ===============================================  =======================
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal, get_args

HistogramName = Literal["model_call", "tool_call", "spawn", "event_to_agent", "turn"]
"""The closed set of histograms agentd keeps."""

#: Bucket upper bounds in seconds: milliseconds (a fork, a local tool) to minutes (a long model call, a turn).
LATENCY_BUCKETS: tuple[float, ...] = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)


@dataclass(frozen=True, slots=True)
class HistogramSpec:
    """One histogram: its Prometheus family, help text and label names."""

    family: str
    help: str
    labels: tuple[str, ...]


HISTOGRAMS: Mapping[HistogramName, HistogramSpec] = {
    "model_call": HistogramSpec(
        "agentd_model_call_duration_seconds",
        "Model call latency, retries included, by route and provider.",
        ("route", "provider"),
    ),
    "tool_call": HistogramSpec(
        "agentd_tool_call_duration_seconds",
        "Tool call latency through the supervisor, by server.",
        ("server",),
    ),
    "spawn": HistogramSpec(
        "agentd_spawn_duration_seconds",
        "From an agent's spawn request to its child running, by how it started (zygote or fresh).",
        ("how",),
    ),
    "event_to_agent": HistogramSpec(
        "agentd_event_to_agent_seconds",
        "From a resource update received to agentd handing it to an agent (debounce and queueing included).",
        ("route",),
    ),
    "turn": HistogramSpec(
        "agentd_turn_duration_seconds",
        "An agent's turn, from its input handed over to its terminal status, by route.",
        ("route",),
    ),
}
assert set(HISTOGRAMS) == set(get_args(HistogramName))


@dataclass(frozen=True, slots=True)
class Series:
    """One label set's observations: per-bucket counts (not cumulative), the sum and the count."""

    buckets: tuple[int, ...]
    sum: float
    count: int

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, cumulative count)`` pairs ending with ``+Inf``, as the exposition writes them."""
        out: list[tuple[str, int]] = []
        total = 0
        for bound, n in zip(LATENCY_BUCKETS, self.buckets, strict=False):
            total += n
            out.append((repr(bound), total))
        out.append(("+Inf", self.count))
        return out


class Histograms:
    """Observations by histogram and label values. Every thread may observe and snapshot."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._series: dict[HistogramName, dict[tuple[str, ...], list[float]]] = {n: {} for n in HISTOGRAMS}

    def observe(self, name: HistogramName, seconds: float, labels: Mapping[str, str | None]) -> None:
        """Record one observation of ``seconds`` (negative or NaN values count as 0)."""
        spec = HISTOGRAMS[name]
        key = tuple(str(labels.get(label) or "") for label in spec.labels)
        value = seconds if seconds > 0 else 0.0
        slot = bisect.bisect_left(LATENCY_BUCKETS, value)
        with self._lock:
            series = self._series[name].get(key)
            if series is None:
                # buckets…, the overflow bucket, sum, count
                series = self._series[name][key] = [0.0] * (len(LATENCY_BUCKETS) + 3)
            series[slot] += 1
            series[-2] += value
            series[-1] += 1

    def snapshot(self) -> dict[HistogramName, dict[tuple[str, ...], Series]]:
        """A copy of every series."""
        with self._lock:
            return {
                name: {
                    key: Series(
                        buckets=tuple(int(n) for n in raw[: len(LATENCY_BUCKETS)]),
                        sum=raw[-2],
                        count=int(raw[-1]),
                    )
                    for key, raw in series.items()
                }
                for name, series in self._series.items()
            }


__all__ = ["HISTOGRAMS", "LATENCY_BUCKETS", "HistogramName", "HistogramSpec", "Histograms", "Series"]

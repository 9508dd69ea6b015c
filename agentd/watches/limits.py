"""Every number the watch stage obeys, in one frozen dataclass.

The defaults are the ones the design fixed (seed ADR 0005, "Limits"); each is
configurable so operators can tune a busy deployment and tests can use short
time limits. Invalid values raise :class:`agentd.core.errors.ConfigError` naming the
field, the value and the fix.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Protocol

from agentd.core.errors import ConfigError

#: 64 MiB: generous for a filter that formats one event and keeps a few
#: counters, small enough that five watches cannot starve the supervisor.
DEFAULT_FILTER_MEMORY_BYTES = 64 * 1024 * 1024

#: Watches all sessions together may hold (``[watches] max_watches_total``, rfcs/0265).
#: Each holds a task, an upstream subscription and its resource's last state
#: (up to ``--max-read-bytes``), so a model must not multiply them freely;
#: 256 is 51 sessions at the per-session cap of 5.
DEFAULT_MAX_WATCHES_TOTAL = 256

#: Python's own default is 1000; a filter has no business recursing deeply, and
#: a low cap keeps a runaway recursion cheap to stop.
DEFAULT_FILTER_RECURSION_DEPTH = 200


@dataclass(frozen=True, slots=True)
class WatchLimits:
    """Limits for watches, filters, notices and resubscription.

    Attributes:
        max_watches: Watches one agent (session) may hold at once.
        max_watches_total: Watches all sessions together may hold at once.
        filter_time_secs: Sandbox execution time per event (sleep is disabled,
            so this is CPU-bound work only; time spent in catalog calls on the
            host does not count).
        filter_tool_calls: Catalog calls (``read_resource``, ``list_resources``,
            read-only tools) one event's filter run may make.
        filter_memory_bytes: Sandbox heap cap per filter session.
        filter_recursion_depth: Sandbox call-stack depth cap.
        events_per_update: Events one resource read may deliver (the rest are
            summarized in a ``GAP`` event with reason ``overflow``).
        lines_per_notice: Lines shown in one notice before ``+N more``.
        debounce_quiet_secs: A notice is sent once no new line arrived for this long.
        debounce_max_secs: ... but no later than this after the burst's first line.
        resubscribe_attempts: Failed resubscriptions in a row before a subscription
            (and every watch on it) fails; 0 fails it at the first loss. A stream
            that is acknowledged and ends at once counts as failed (see
            :class:`agentd.upstream.backoff.ResubscribePolicy`).
        resubscribe_initial_secs: First backoff delay; doubled after each failure.
        resubscribe_max_secs: Backoff ceiling.
    """

    max_watches: int = 5
    max_watches_total: int = DEFAULT_MAX_WATCHES_TOTAL
    filter_time_secs: float = 2.0
    filter_tool_calls: int = 10
    filter_memory_bytes: int = DEFAULT_FILTER_MEMORY_BYTES
    filter_recursion_depth: int = DEFAULT_FILTER_RECURSION_DEPTH
    events_per_update: int = 100
    lines_per_notice: int = 20
    debounce_quiet_secs: float = 3.0
    debounce_max_secs: float = 15.0
    resubscribe_attempts: int = 5
    resubscribe_initial_secs: float = 1.0
    resubscribe_max_secs: float = 16.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise ConfigError(f"watch limit {f.name}", value, "give a positive number")
            if isinstance(value, float) and not math.isfinite(value):
                raise ConfigError(f"watch limit {f.name}", value, "give a finite positive number")
            if f.name == "resubscribe_attempts":
                if value < 0:
                    raise ConfigError(
                        f"watch limit {f.name}",
                        value,
                        "give 0 or more (0: a lost subscription fails at once)",
                    )
            elif value <= 0:
                raise ConfigError(f"watch limit {f.name}", value, "give a number greater than 0")
        for name in (
            "max_watches",
            "max_watches_total",
            "filter_tool_calls",
            "filter_memory_bytes",
            "filter_recursion_depth",
            "events_per_update",
            "lines_per_notice",
            "resubscribe_attempts",
        ):
            if not isinstance(getattr(self, name), int):
                raise ConfigError(f"watch limit {name}", getattr(self, name), "give a whole number")
        if self.events_per_update < 2:
            raise ConfigError(
                "watch limit events_per_update",
                self.events_per_update,
                "give at least 2 (one slot may hold the GAP summary of skipped events)",
            )
        if self.lines_per_notice < 2:
            raise ConfigError(
                "watch limit lines_per_notice",
                self.lines_per_notice,
                "give at least 2 (one line may be the '+N more' summary)",
            )
        if self.debounce_max_secs < self.debounce_quiet_secs:
            raise ConfigError(
                "watch limit debounce_max_secs",
                self.debounce_max_secs,
                f"give a value >= debounce_quiet_secs ({self.debounce_quiet_secs!r})",
            )
        if self.resubscribe_max_secs < self.resubscribe_initial_secs:
            raise ConfigError(
                "watch limit resubscribe_max_secs",
                self.resubscribe_max_secs,
                f"give a value >= resubscribe_initial_secs ({self.resubscribe_initial_secs!r})",
            )

    def resubscribe_delays(self) -> tuple[float, ...]:
        """The backoff before each resubscribe attempt: 1, 2, 4, 8, 16 s by default.

        The supervisor hands this and :attr:`resubscribe_attempts` to every
        upstream connection, which does the resubscribing.
        """
        return tuple(
            min(self.resubscribe_initial_secs * 2**i, self.resubscribe_max_secs)
            for i in range(self.resubscribe_attempts)
        )


class LimitsSource(Protocol):
    """What :func:`watch_limits` reads: the ``[watches]`` settings (kept structural so
    this module does not import the config package, which imports it)."""

    def limits(self) -> WatchLimits: ...


def watch_limits(config: LimitsSource) -> WatchLimits:
    """:class:`WatchLimits` from the ``[watches]`` settings (:class:`agentd.config.WatchesConfig`).

    Raises:
        ConfigError: a combination the stage cannot run with (names the setting and the fix).
    """
    return config.limits()  # the settings face of WatchLimits builds them

"""WatchLimits: the design's defaults, configurability, and clear errors."""

from __future__ import annotations

import pytest

from agentd.core.errors import ConfigError
from agentd.watches.limits import WatchLimits


def test_defaults_match_the_design():
    lim = WatchLimits()
    assert lim.max_watches == 5
    assert lim.max_watches_total == 256
    assert lim.filter_time_secs == 2.0
    assert lim.filter_tool_calls == 10
    assert lim.events_per_update == 100
    assert lim.lines_per_notice == 20
    assert (lim.debounce_quiet_secs, lim.debounce_max_secs) == (3.0, 15.0)
    assert lim.resubscribe_attempts == 5
    assert lim.resubscribe_delays() == (1.0, 2.0, 4.0, 8.0, 16.0)


def test_configurable_and_backoff_capped():
    lim = WatchLimits(resubscribe_attempts=7, resubscribe_max_secs=10.0, filter_time_secs=0.25)
    assert lim.resubscribe_delays() == (1.0, 2.0, 4.0, 8.0, 10.0, 10.0, 10.0)
    assert lim.filter_time_secs == 0.25


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"max_watches": 0}, r"watch limit max_watches: 0 is not valid: give a number greater than 0"),
        ({"max_watches_total": 1.5}, r"watch limit max_watches_total: 1.5 is not valid: give a whole number"),
        ({"filter_time_secs": float("inf")}, r"filter_time_secs: inf .* finite"),
        ({"filter_tool_calls": 2.5}, r"filter_tool_calls: 2.5 .* whole number"),
        ({"lines_per_notice": True}, r"lines_per_notice: True .* positive number"),
        ({"events_per_update": 1}, r"events_per_update: 1 .* at least 2"),
        ({"lines_per_notice": 1}, r"lines_per_notice: 1 .* at least 2"),
        ({"debounce_max_secs": 1.0}, r"debounce_max_secs: 1.0 .* >= debounce_quiet_secs \(3.0\)"),
        ({"resubscribe_max_secs": 0.5}, r"resubscribe_max_secs: 0.5 .* >= resubscribe_initial_secs"),
    ],
)
def test_invalid_limits_name_the_field_and_fix(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        WatchLimits(**kwargs)


def test_zero_resubscribe_attempts_means_fail_at_the_first_loss():
    lim = WatchLimits(resubscribe_attempts=0)
    assert lim.resubscribe_delays() == ()
    with pytest.raises(ConfigError, match=r"resubscribe_attempts: -1 .* give 0 or more"):
        WatchLimits(resubscribe_attempts=-1)


def test_every_watches_setting_reaches_the_limits():
    """Each ``[watches]`` key, changed from its default, lands in the field the stage obeys."""
    from agentd.config import WatchesConfig
    from agentd.watches.limits import watch_limits

    # key: (a value other than its default, the WatchLimits field it must land in)
    lands = {
        "max_watches": (2, "max_watches"),
        "max_watches_total": (9, "max_watches_total"),
        "filter_timeout": (0.5, "filter_time_secs"),
        "filter_tool_calls": (3, "filter_tool_calls"),
        "events_per_update": (7, "events_per_update"),
        "notice_lines": (4, "lines_per_notice"),
        "debounce": (0.25, "debounce_quiet_secs"),
        "max_wait": (2.0, "debounce_max_secs"),
        "resubscribe_attempts": (0, "resubscribe_attempts"),
    }
    assert set(WatchesConfig.model_fields) == set(lands), (
        "a new [watches] setting needs a place in watch_limits() and a test that sees its effect"
    )
    values = {key: value for key, (value, _) in lands.items()}
    lim = watch_limits(WatchesConfig(**values))
    assert {key: getattr(lim, field) for key, (_, field) in lands.items()} == values


@pytest.mark.parametrize("key", ["events_per_update", "notice_lines"])
def test_the_config_refuses_what_the_watch_stage_would_refuse(key):
    """``agentd check`` and the run agree: the smallest value the config accepts, the stage accepts."""
    from pydantic import ValidationError

    from agentd.config import WatchesConfig
    from agentd.watches.manager import watch_limits

    with pytest.raises(ValidationError, match=r"≥ 2"):
        WatchesConfig(**{key: 1})
    watch_limits(WatchesConfig(**{key: 2}))  # the smallest accepted value runs

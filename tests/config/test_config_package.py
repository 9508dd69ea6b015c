"""The settings package: one definition per vocabulary and default, every knob through the layers."""

from __future__ import annotations

from pathlib import Path

import pytest

import agentd.config
from agentd.config import WatchesConfig
from agentd.core.errors import ConfigError
from agentd.observe.output import DEFAULT_TELEMETRY_BUFFER
from agentd.triggers import mode, router
from agentd.upstream import MAX_READ_BYTES
from agentd.watches.limits import WatchLimits
from tests.support.settings import load


def test_public_surface() -> None:
    assert sorted(agentd.config.__all__) == sorted(set(agentd.config.__all__))
    for name in agentd.config.__all__:
        assert getattr(agentd.config, name) is not None


def test_each_vocabulary_and_default_is_defined_once() -> None:
    from agentd.config import _vocab

    assert agentd.config.Mode is router.Mode
    assert agentd.config.Overflow is router.Overflow
    assert agentd.config.SessionKind is mode.SessionMode
    assert _vocab.DEFAULT_MAX_INFLIGHT is router.DEFAULT_MAX_INFLIGHT
    assert _vocab.DEFAULT_ROUTE_DEBOUNCE == router.DEFAULT_DEBOUNCE
    # The read cap: one value, whether the settings or an upstream connection applies it.
    assert MAX_READ_BYTES == agentd.config.DEFAULT_MAX_READ_BYTES


def test_watches_table_and_the_watch_stage_agree() -> None:
    limits = WatchesConfig().limits()
    assert limits == WatchLimits()
    # Whatever the table accepts, the stage accepts: a value it refuses is refused at load,
    # spelled as the table's key.
    with pytest.raises(ValueError, match=r"notice_lines"):
        WatchesConfig(notice_lines=1)
    WatchesConfig(notice_lines=2).limits()


def test_operator_knobs_go_through_the_layers(tmp_path: Path) -> None:
    s = load(tmp_path)
    assert (s.reconnect_backoff, s.telemetry_buffer) == (None, DEFAULT_TELEMETRY_BUFFER)
    s = load(tmp_path, env={"AGENTD_RECONNECT_BACKOFF": "0.1,0.2", "AGENTD_TELEMETRY_BUFFER": "4KiB"})
    assert (s.reconnect_backoff, s.telemetry_buffer) == ((0.1, 0.2), 4096)
    s = load(tmp_path, toml='reconnect_backoff = [1, 3]\ntelemetry_buffer = "1MiB"\n')
    assert (s.reconnect_backoff, s.telemetry_buffer) == ((1.0, 3.0), 1024 * 1024)
    with pytest.raises(
        ConfigError, match=r"^AGENTD_RECONNECT_BACKOFF: 'soon' is not valid: give comma-separated seconds"
    ):
        load(tmp_path, env={"AGENTD_RECONNECT_BACKOFF": "soon"})
    with pytest.raises(
        ConfigError, match=r"^AGENTD_TELEMETRY_BUFFER: '10' is not valid: give a size of at least 1KiB"
    ):
        load(tmp_path, env={"AGENTD_TELEMETRY_BUFFER": "10"})

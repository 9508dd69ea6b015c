"""Numbers in settings are ASCII digits: ``²`` passes ``str.isdigit()`` and ``int()``/``float()`` read
``١٢`` as 12, so either was a traceback or a number nobody wrote. Each is now a ConfigError (exit 2)
naming the setting, the value and the fix (issue 37, item 3)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.config import ConfigErrors
from agentd.core.errors import ConfigError
from tests.support.settings import load

#: Digits of other scripts and a superscript: each read as a number by isdigit(), int() or float().
NUMERALS = ["²", "١٢", "１２"]


@pytest.mark.parametrize("count", NUMERALS)
def test_a_shard_count_in_other_digits_is_refused_with_the_fix(tmp_path: Path, count: str) -> None:
    # Before: "²" was int()'s own error ("invalid literal …"), "١٢" twelve replicas.
    with pytest.raises(
        ConfigError,
        match=rf"--shard: 'auto' is not valid: .* AGENTD_SHARD_COUNT, which is '{count}'; set it to the "
        r"replica count in ASCII digits, e\.g\. 3",
    ):
        load(
            tmp_path,
            shard="auto",
            mode="reactive",
            env={"HOSTNAME": "agentd-2", "AGENTD_SHARD_COUNT": count},
        )


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"AGENTD_MODEL_SETTINGS__TEMPERATURE": "١"},
            r"AGENTD_MODEL_SETTINGS__TEMPERATURE: '١' is not valid: give a number from 0 to 2",
        ),
        (
            {"AGENTD_RECONNECT_BACKOFF": "١,٢"},
            r"AGENTD_RECONNECT_BACKOFF: '١,٢' is not valid: give comma-separated seconds",
        ),
        (
            {"AGENTD_BUDGET_USD": "١٢"},
            r"AGENTD_BUDGET_USD: '١٢' is not valid: .*amount in US dollars above 0",
        ),
    ],
)
def test_decimal_settings_in_other_digits_are_refused(
    tmp_path: Path, env: dict[str, str], message: str
) -> None:
    # Before: float() took each for 1, 1 and 2, and 12.
    with pytest.raises((ConfigError, ConfigErrors), match=message):
        load(tmp_path, env=env)


def test_the_same_settings_in_ascii_digits_still_load(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        env={
            "AGENTD_MODEL_SETTINGS__TEMPERATURE": "1",
            "AGENTD_RECONNECT_BACKOFF": "1, 2.5",
            "AGENTD_BUDGET_USD": "$2.50",
        },
    )
    assert (s.model_settings.temperature, s.reconnect_backoff, s.budget_usd) == (1.0, (1.0, 2.5), 2.5)

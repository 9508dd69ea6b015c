"""Numbers in flags are ASCII digits or refused with exit 2, naming the flag, the value and the fix.

``str.isdigit()`` is true for ``²`` (then ``int()`` raised: a traceback) and ``int()`` reads
``١٢`` as 12 (a port nobody wrote). In-process, through each command's own parsing; the real
command is run in ``test_numbers_command.py`` (issue 37, item 3).
"""

from __future__ import annotations

import argparse

import pytest

from agentd.cli import _status
from agentd.core.errors import ConfigError
from agentd.observe.health import parse_addr
from agentd.servers import _base, files
from agentd.servers.inbox import server as inbox
from agentd.servers.webhook import server as webhook

#: A superscript, Arabic-Indic digits and fullwidth digits: each a "digit" to isdigit().
NUMERALS = ["²", "١٢", "１２"]


@pytest.mark.parametrize("port", NUMERALS)
def test_status_addr_with_a_port_in_other_digits_exits_2(
    port: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: "²" was a traceback (exit 1), "١٢" a connection to port 12.
    assert _status.main(["--addr", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"agentd: error: status: --addr '127.0.0.1:{port}' is not valid — fix: give HOST:PORT with the port "
        "in ASCII digits 1-65535, e.g. 127.0.0.1:8080 (the daemon's --health-addr)\n"
    )


def test_status_addr_from_the_environment_is_named_as_the_variable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(_status.ADDR_ENV, "127.0.0.1:١٢")
    assert _status.main([]) == 2
    assert "status: $AGENTD_HEALTH_ADDR '127.0.0.1:١٢' is not valid" in capsys.readouterr().err


def test_status_interval_in_other_digits_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    # Before: float("١") was 1.0, taken.
    assert _status.main(["--addr", "127.0.0.1:1", "--interval", "١"]) == 2
    assert (
        "argument --interval: '١' is not a number of seconds: write a number as ASCII digits 0-9"
        in capsys.readouterr().err
    )


@pytest.mark.parametrize("port", NUMERALS)
def test_serve_http_and_webhook_listen_ports_in_other_digits_are_refused(port: str) -> None:
    with pytest.raises(
        ConfigError,
        match=rf"^--http: '127\.0\.0\.1:{port}' is not valid: .*a port in 0-65535 in ASCII digits",
    ):
        _base.parse_http(f"127.0.0.1:{port}", allow_remote=False)
    with pytest.raises(
        ConfigError,
        match=rf"^--listen: '127\.0\.0\.1:{port}' is not valid: .*a port in 0-65535 in ASCII digits",
    ):
        webhook.parse_listen(f"127.0.0.1:{port}", allow_remote=False)


@pytest.mark.parametrize("port", NUMERALS)
def test_the_health_listeners_address_parser_refuses_other_digits(port: str) -> None:
    # The settings check --health-addr with an ASCII pattern first; the listener's own parser agrees.
    with pytest.raises(ConfigError, match=rf"^--metrics-addr: '127\.0\.0\.1:{port}' is not valid"):
        parse_addr(f"127.0.0.1:{port}", setting="--metrics-addr")


def test_serve_http_port_in_other_digits_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    # Before: ValueError out of `agentd serve memo`, a traceback.
    assert _base.main(["memo", "--http", "127.0.0.1:²"]) == 2
    assert capsys.readouterr().err.startswith("agentd serve memo: --http: '127.0.0.1:²' is not valid")


@pytest.mark.parametrize(
    ("module", "flag"),
    [
        (files, "--max-watchers"),
        (files, "--max-text-bytes"),
        (inbox, "--window"),
        (webhook, "--max-connections"),
        (webhook, "--retain-count"),
        (webhook, "--window"),
    ],
)
@pytest.mark.parametrize("value", ["١٢", "²", "1_000"])
def test_bundled_servers_count_flags_take_ascii_digits_only(
    module: object, flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Before: int() took "١٢" for 12 and "1_000" for 1000.
    parser = argparse.ArgumentParser(prog="agentd serve x")
    module.add_arguments(parser)  # type: ignore[attr-defined]
    with pytest.raises(SystemExit) as exited:
        parser.parse_args(["--root", "/", flag, value] if module is files else [flag, value])
    assert exited.value.code == 2
    assert (
        f"argument {flag}: {value!r} is not a whole number: write a whole number as ASCII digits 0-9"
        in capsys.readouterr().err
    )
    assert parser.parse_args(["--root", "/", flag, "12"] if module is files else [flag, "12"])

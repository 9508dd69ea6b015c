"""A server's ``protocol`` and ``transport`` settings in every source (rfcs/0285, rfcs/0286)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import get_args

import pytest
from mcp_types.version import KNOWN_PROTOCOL_VERSIONS

from agentd.config import ProtocolSetting, ServerSpec
from agentd.config._servers import parse_mcp_servers_json
from agentd.core.errors import ConfigError
from tests.support.settings import load

ALLOWED = "choose one of auto, 2026-07-28, 2025-11-25, 2025-06-18, 2025-03-26, 2024-11-05"


def test_the_protocol_values_are_the_sdks_known_versions() -> None:
    """A new MCP version in the SDK must be added to the setting (and the docs), not silently refused."""
    assert set(get_args(ProtocolSetting)) == {"auto", *KNOWN_PROTOCOL_VERSIONS}


def test_defaults_auto_for_both() -> None:
    url = ServerSpec(name="a", url="http://h/x")
    assert (url.protocol, url.transport) == ("auto", "auto")
    cmd = ServerSpec(name="b", command="srv")
    assert (cmd.protocol, cmd.transport) == ("auto", "stdio")


def test_toml_table(tmp_path: Path) -> None:
    toml = (
        '[servers.old]\ncommand = "old-server"\nprotocol = "2024-11-05"\n'
        '[servers.web]\nurl = "http://h/sse"\ntransport = "sse"\nprotocol = "2025-03-26"\n'
    )
    s = load(tmp_path, toml=toml)
    assert s.servers["old"].protocol == "2024-11-05"
    assert (s.servers["web"].transport, s.servers["web"].protocol) == ("sse", "2025-03-26")


def test_mcp_servers_json_key_and_url_without_type() -> None:
    doc = {
        "mcpServers": {
            "cursor": {"url": "http://127.0.0.1:9/sse"},
            "pinned": {"command": "x", "protocol": "2026-07-28"},
        }
    }
    ignored: list[str] = []
    servers = parse_mcp_servers_json(json.dumps(doc), label="m.json", env={}, ignored=ignored)
    assert servers["cursor"].transport == "auto"
    assert servers["pinned"].protocol == "2026-07-28"
    assert ignored == []


def test_flag_options(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        mcp_stdio=["old=old-server --tags a,b,protocol=2024-11-05"],
        mcp_http=["web=http://h/x?a=1,b=2,transport=sse,protocol=2025-06-18", "plain=http://h/mcp"],
    )
    old, web, plain = s.servers["old"], s.servers["web"], s.servers["plain"]
    # A comma inside the command line or the URL stays there: only known trailing options are taken.
    assert (old.args, old.protocol) == (["--tags", "a,b"], "2024-11-05")
    assert (web.url, web.transport, web.protocol) == ("http://h/x?a=1,b=2", "sse", "2025-06-18")
    assert (plain.transport, plain.protocol) == ("auto", "auto")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"toml": '[servers.a]\nurl = "http://h/x"\nprotocol = "2025"\n'},
            rf"servers\.a\.protocol: '2025' is not valid: {ALLOWED}",
        ),
        (
            {"mcp_http": ["a=http://h/x,protocol=latest"]},
            rf"--mcp-http a\.protocol: 'latest' is not valid: {ALLOWED}",
        ),
        ({"mcp_stdio": ["a=srv,protocol=1.0"]}, rf"--mcp-stdio a\.protocol: '1\.0' is not valid: {ALLOWED}"),
        (
            {"mcp_http": ["a=http://h/x,transport=ws"]},
            r"--mcp-http a\.transport: 'ws' is not valid: choose one of stdio, http, sse, auto",
        ),
        (
            {"mcp_http": ["a=http://h/x,protocol=auto,protocol=auto"]},
            r"--mcp-http: .* protocol is given twice; keep one",
        ),
        ({"mcp_http": ["a=http://h/x,transport=stdio"]}, r"a url server's transport is http, sse or auto"),
    ],
)
def test_invalid_values_exit_2_naming_the_setting_and_the_choices(
    tmp_path: Path, kwargs: dict[str, object], message: str
) -> None:
    with pytest.raises(ConfigError, match=message):
        load(tmp_path, **kwargs)  # type: ignore[arg-type]


def test_invalid_json_protocol_names_the_entry() -> None:
    doc = '{"mcpServers": {"a": {"url": "http://h/x", "protocol": "v9"}}}'
    with pytest.raises(ConfigError, match=rf"m\.json: mcpServers\.a\.protocol: 'v9' is not valid: {ALLOWED}"):
        parse_mcp_servers_json(doc, label="m.json", env={})

"""Pure helpers of the upstream package: tool namespacing and URI resolution (no I/O)."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.upstream import (
    Catalog,
    ToolNameMap,
    body_size,
    namespaced,
    resolve_server_for_uri,
    split_namespaced,
)

PROVIDER_RULE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")


def test_namespaced_plain_names_round_trip() -> None:
    assert namespaced("github", "create_issue") == "github__create_issue"
    assert split_namespaced("github__create_issue") == ("github", "create_issue")


def test_namespaced_sanitizes_and_truncates_with_hash() -> None:
    assert namespaced("my.server", "do thing") == "my_server__do_thing"
    long = namespaced("s" * 40, "t" * 40)
    assert len(long) == 64
    assert long.startswith("s" * 40 + "__" + "t" * 13 + "_")
    assert long != namespaced("s" * 40, "t" * 39 + "u")


@given(st.text(min_size=1, max_size=80), st.text(min_size=1, max_size=80))
def test_namespaced_always_fits_provider_rules(server: str, tool: str) -> None:
    assert PROVIDER_RULE.match(namespaced(server, tool))


def test_split_rejects_unnamespaced() -> None:
    with pytest.raises(
        ValueError, match=r"^tool name 'plain' is not namespaced: expected '<server>__<tool>'"
    ):
        split_namespaced("plain")


def test_tool_name_map_reverses_fitted_names_and_refuses_collisions() -> None:
    names = ToolNameMap()
    fitted = names.add("my.server", "do thing")
    assert names.resolve(fitted) == ("my.server", "do thing")
    with pytest.raises(ValueError, match=r"both map to 'my_server__do_thing'; rename one server"):
        names.add("my_server", "do thing")
    names.remove_server("my.server")
    assert fitted not in names
    with pytest.raises(KeyError, match="no upstream tool is served as"):
        names.resolve(fitted)


def test_resolve_prefers_exact_then_template_then_subscriber() -> None:
    catalogs = {
        "files": Catalog(uris=frozenset({"file:///a"}), templates=("file:///{path}",), can_subscribe=False),
        "notes": Catalog(uris=frozenset({"note://alpha"}), templates=("note://{name}",), can_subscribe=True),
        "bad": Catalog(templates=("{broken",)),
    }
    assert resolve_server_for_uri("note://alpha", catalogs) == "notes"
    assert resolve_server_for_uri("file:///a", catalogs) == "files"
    assert resolve_server_for_uri("note://zeta", catalogs) == "notes"
    assert resolve_server_for_uri("file:///b", catalogs) == "files"
    assert resolve_server_for_uri("k8s://pods", catalogs) == "notes"
    assert resolve_server_for_uri("k8s://pods", {"files": catalogs["files"]}) is None


def test_body_size_counts_decoded_bytes() -> None:
    import mcp_types as types

    contents = [
        types.TextResourceContents(uri="a://x", text="héllo"),
        types.BlobResourceContents(uri="a://y", blob="AAAA"),
    ]
    assert body_size(contents) == 6 + 3

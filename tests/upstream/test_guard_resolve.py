"""Which server owns a URI: the first in configuration order at every step (docs/testing.md)."""

from __future__ import annotations

import mcp_types as types

from agentd.upstream.resolve import Catalog, resolve_server_for_uri, resource_listing

GH = "gh://{owner}/{repo}"


def test_a_uri_two_templates_match_goes_to_the_first_server_in_order() -> None:
    a = Catalog(templates=("gh://{owner}/{repo}",))
    b = Catalog(templates=("gh://{org}/{name}",), can_subscribe=True)
    assert resolve_server_for_uri("gh://x/y", [("a", a), ("b", b)]) == "a"
    assert resolve_server_for_uri("gh://x/y", [("b", b), ("a", a)]) == "b"
    assert resolve_server_for_uri("gh://x/y", {"a": a, "b": b}) == "a"
    assert resolve_server_for_uri("gh://x/y", {"b": b, "a": a}) == "b"


def test_an_exact_listing_beats_an_earlier_template_and_the_first_listing_wins() -> None:
    tpl = Catalog(templates=(GH,), can_subscribe=True)
    one = Catalog(uris=frozenset({"gh://x/y"}))
    two = Catalog(uris=frozenset({"gh://x/y"}), can_subscribe=True)
    assert resolve_server_for_uri("gh://x/y", [("tpl", tpl), ("one", one), ("two", two)]) == "one"
    assert resolve_server_for_uri("gh://x/y", [("tpl", tpl), ("two", two), ("one", one)]) == "two"


def test_with_no_listing_or_template_the_first_subscribable_server_wins() -> None:
    plain = Catalog(uris=frozenset({"memo://a"}))
    sub1 = Catalog(can_subscribe=True)
    sub2 = Catalog(can_subscribe=True)
    assert resolve_server_for_uri("file:///x", [("plain", plain), ("s1", sub1), ("s2", sub2)]) == "s1"
    assert resolve_server_for_uri("file:///x", [("plain", plain)]) is None
    assert resolve_server_for_uri("file:///x", []) is None


def test_a_malformed_template_only_loses_template_routing_for_itself() -> None:
    bad = Catalog(templates=("gh://{owner",))
    good = Catalog(templates=(GH,))
    assert not bad.matches_template("gh://x/y")
    assert good.matches_template("gh://x/y")
    assert not good.matches_template("memo://x")
    assert resolve_server_for_uri("gh://x/y", [("bad", bad), ("good", good)]) == "good"
    # A malformed template before a good one in the same server does not hide the good one.
    assert Catalog(templates=("gh://{owner", GH)).matches_template("gh://x/y")


class _Caps:
    def __init__(self, subscribe: bool | None) -> None:
        # None: the server has no resources capability at all.
        self.resources = None if subscribe is None else types.ResourcesCapability(subscribe=subscribe)


class _Up:
    def __init__(
        self, resources: list[types.Resource], templates: list[types.ResourceTemplate], sub: bool | None
    ) -> None:
        self.resources = resources
        self.templates = templates
        self.capabilities = _Caps(sub)


def test_the_listing_names_every_resource_then_template_per_server_in_order() -> None:
    res = types.Resource(
        uri="memo://a", name="a", description="A note.\nExample: memo://a\nmore", mimeType="text/plain"
    )
    tpl = types.ResourceTemplate(
        uriTemplate=GH, name="repo", description="Example: gh://o/r\nExample: gh://x/y"
    )
    listing = resource_listing({"memo": _Up([res], [], True), "gh": _Up([], [tpl], False)})
    assert listing == [
        {
            "uri": "memo://a",
            "template": False,
            "name": "a",
            "description": "A note.\nExample: memo://a\nmore",
            "example": "Example: memo://a",
            "mime_type": "text/plain",
            "server": "memo",
            "subscribable": True,
        },
        {
            "uri": GH,
            "template": True,
            "name": "repo",
            "description": "Example: gh://o/r\nExample: gh://x/y",
            "example": "Example: gh://x/y",
            "mime_type": None,
            "server": "gh",
            "subscribable": False,
        },
    ]
    assert resource_listing({"none": object()}) == []


def test_a_resource_without_a_description_or_capability_is_listed_plainly() -> None:
    bare = types.Resource(uri="memo://b", name="b")
    no_example = types.Resource(uri="memo://c", name="c", description="Just text.")
    listing = resource_listing({"memo": _Up([bare, no_example], [], None)})
    assert [(e["description"], e["example"], e["subscribable"]) for e in listing] == [
        ("", None, False),
        ("Just text.", None, False),
    ]

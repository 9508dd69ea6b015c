"""Which upstream server owns a resource URI. Pure and synchronous."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import mcp_types as types
from mcp.shared.uri_template import InvalidUriTemplate, UriTemplate

__all__ = ["Catalog", "resolve_server_for_uri", "resource_listing"]


@dataclass(frozen=True, slots=True)
class Catalog:
    """What one server offers, as far as URI routing is concerned."""

    uris: frozenset[str] = frozenset()
    """Concrete resource URIs from ``resources/list``."""
    templates: tuple[str, ...] = ()
    """RFC 6570 URI templates from ``resources/templates/list``."""
    can_subscribe: bool = False
    """Whether the server advertises ``resources.subscribe``."""
    _parsed: tuple[UriTemplate, ...] = field(default=(), init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        parsed: list[UriTemplate] = []
        for text in self.templates:
            try:
                parsed.append(UriTemplate.parse(text))
            except InvalidUriTemplate:
                # A server listing a malformed template only loses template routing for it.
                continue
        object.__setattr__(self, "_parsed", tuple(parsed))

    def matches_template(self, uri: str) -> bool:
        """Whether one of this server's templates matches ``uri``."""
        return any(t.match(uri) is not None for t in self._parsed)


def resolve_server_for_uri(
    uri: str, catalogs: Mapping[str, Catalog] | Sequence[tuple[str, Catalog]]
) -> str | None:
    """The server to read or subscribe ``uri`` on.

    In order: the first server that lists ``uri`` exactly; else the first whose
    URI template matches it; else the first server that can subscribe; else
    ``None``. "First" is the configuration order of ``catalogs``.
    """
    items = list(catalogs.items()) if isinstance(catalogs, Mapping) else list(catalogs)
    for name, catalog in items:
        if uri in catalog.uris:
            return name
    for name, catalog in items:
        if catalog.matches_template(uri):
            return name
    for name, catalog in items:
        if catalog.can_subscribe:
            return name
    return None


def resource_listing(upstreams: Mapping[str, object]) -> list[dict[str, object]]:
    """What ``list_resources`` returns, to agents and to watch filters alike.

    One entry per concrete resource, then per template, of every server in
    configuration order: ``uri`` (the template itself when ``template``),
    ``template``, ``name``, ``description``, ``example`` (the description's
    last ``Example:`` line, or ``None``), ``mime_type``, ``server``,
    ``subscribable`` (the server advertises ``resources.subscribe``).
    ``upstreams`` maps server names to objects with ``resources``,
    ``templates`` and ``capabilities`` (:class:`agentd.upstream.Upstream`).
    """
    out: list[dict[str, object]] = []
    for server, up in upstreams.items():
        resources = getattr(getattr(up, "capabilities", None), "resources", None)
        subscribable = bool(getattr(resources, "subscribe", False))
        for r in getattr(up, "resources", None) or []:
            out.append(_describe(server, str(r.uri), False, r, subscribable))
        for t in getattr(up, "templates", None) or []:
            out.append(_describe(server, str(t.uri_template), True, t, subscribable))
    return out


def _describe(
    server: str, uri: str, template: bool, r: types.Resource | types.ResourceTemplate, subscribable: bool
) -> dict[str, object]:
    desc = r.description or ""
    example = next(
        (ln.strip() for ln in reversed(desc.splitlines()) if ln.strip().startswith("Example:")), None
    )
    return {
        "uri": uri,
        "template": template,
        "name": r.name,
        "description": desc,
        "example": example,
        "mime_type": getattr(r, "mime_type", None),
        "server": server,
        "subscribable": subscribable,
    }

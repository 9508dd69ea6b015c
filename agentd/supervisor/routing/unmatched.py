"""Settings that do nothing: what they name and nothing offers, and what can never happen (pure).

A route glob no resource matches, a tool rule no tool matches, a subscribed
URI no server has, a server that did not start, a reactive run nothing can
wake: each of these runs without an error and does nothing, which looks
like a working run. This module finds them and says which setting, the
value, what is wrong and the fix, as :class:`Finding` (rfcs/0315).

Two moments, two functions:

* :func:`before_start`: what the settings alone decide (a reactive run with
  no subscription and no timer; a declared route no declared subscription
  can feed). ``agentd check`` prints these, and a run says them at start.
* :func:`against_offers`: the settings against what each server offers
  (its tools, resources and resource templates; :class:`Offer`), or why it
  did not start (:class:`Down`). A run says these once, when every server's
  first connection attempt has settled; ``agentd check --connect`` after
  connecting. Catalogs change later (``list_changed``), so a glob that
  matches nothing is said to match nothing *now*; it is not said again.

A route or subscription glob is compared with a resource template as two
patterns: it "matches" the template when some URI matches both
(:func:`overlaps`, a product of two small automata; a template expression
is read generously, so a glob is never told it matches nothing when the
template could produce a URI it matches). No trio, no I/O.
"""

from __future__ import annotations

import bisect
import fnmatch
import itertools
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from agentd.events import ServerState
from agentd.supervisor.routing.subscriptions import CatalogLike, SubscriptionPattern, pattern_label
from agentd.triggers.glob import Glob, compile_glob
from agentd.triggers.patterns import covers, overlaps, template_atoms

__all__ = [
    "Down",
    "Finding",
    "FindingKind",
    "Offer",
    "SettingsLike",
    "UpstreamView",
    "against_offers",
    "at_start",
    "before_start",
    "coverage",
    "covers",
    "offers_of",
    "overlaps",
    "subscription_fix",
    "unavailable",
]

FindingKind = Literal["reactive", "route", "subscription", "tool_rule", "server"]
"""What a finding is about: the mode, a route, a declared subscription, a tool rule, a server."""

#: Most names a finding quotes from what the servers offer (the rest are counted).
SAMPLE = 5


@dataclass(frozen=True, slots=True)
class Finding:
    """A setting that does nothing, and what to do about it.

    Attributes:
        kind: what it is about (:data:`FindingKind`).
        setting: the setting as the user writes it (``--route (routes[0].match)``).
        value: its value.
        problem: what is wrong, in words that hold at the time they are said.
        fix: what to do.
    """

    kind: FindingKind
    setting: str
    value: str
    problem: str
    fix: str

    def message(self) -> str:
        """One line: ``SETTING: 'VALUE' PROBLEM — fix: FIX``."""
        return f"{self.setting}: {self.value!r} {self.problem} — fix: {self.fix}"

    def fields(self) -> dict[str, str]:
        """The ``config.warning`` telemetry fields."""
        return {
            "kind": self.kind,
            "setting": self.setting,
            "value": self.value,
            "problem": self.problem,
            "fix": self.fix,
        }


@dataclass(frozen=True, slots=True)
class Offer:
    """What one connected server offers: its tools (its own names) and its resource catalog."""

    tools: tuple[str, ...]
    catalog: CatalogLike
    sorted_uris: tuple[str, ...] = field(init=False, repr=False, compare=False)
    """The catalog's URIs in order: those a glob's literal prefix allows are one slice of it."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sorted_uris", tuple(sorted(self.catalog.uris)))

    def any_resource(self, glob: Glob) -> bool:
        """Whether a listed resource matches ``glob`` (only URIs that start with its prefix are tried)."""
        uris = self.sorted_uris
        start = bisect.bisect_left(uris, glob.prefix)
        for uri in itertools.islice(uris, start, None):
            if not uri.startswith(glob.prefix):
                return False
            if glob.match(uri):
                return True
        return False


@dataclass(frozen=True, slots=True)
class Down:
    """A server that did not connect (its first attempt failed, or it failed for good)."""

    state: ServerState
    error: str | None


class _RouteLike(Protocol):
    @property
    def name(self) -> str | None: ...
    @property
    def match(self) -> str | None: ...
    @property
    def timer(self) -> bool: ...
    @property
    def allowed_tools(self) -> Sequence[str] | None: ...
    @property
    def disallowed_tools(self) -> Sequence[str]: ...


class _ServerLike(Protocol):
    @property
    def command(self) -> str | None: ...
    @property
    def args(self) -> Sequence[str]: ...
    @property
    def url(self) -> str | None: ...
    @property
    def source(self) -> str: ...
    @property
    def required(self) -> bool: ...
    @property
    def allowed_tools(self) -> Sequence[str] | None: ...
    @property
    def disallowed_tools(self) -> Sequence[str]: ...


class SettingsLike(Protocol):
    """What the checks read of :class:`agentd.config.Settings` (the pure core does not import it)."""

    @property
    def mode(self) -> str: ...
    @property
    def interval(self) -> float | None: ...
    @property
    def cron(self) -> str | None: ...
    @property
    def state_dir(self) -> object | None: ...
    @property
    def watch_state(self) -> object | None: ...
    @property
    def subscriptions(self) -> Sequence[SubscriptionPattern]: ...
    @property
    def routes(self) -> Sequence[_RouteLike]: ...
    @property
    def servers(self) -> Mapping[str, _ServerLike]: ...
    @property
    def allowed_tools(self) -> Sequence[str] | None: ...
    @property
    def disallowed_tools(self) -> Sequence[str]: ...


class UpstreamView(Protocol):
    """What :func:`offers_of` reads of a connection (:class:`agentd.upstream.Upstream`)."""

    @property
    def state(self) -> ServerState: ...
    @property
    def last_error(self) -> str | None: ...
    @property
    def tools(self) -> Sequence[_NamedTool]: ...
    def catalog(self) -> CatalogLike: ...


class _NamedTool(Protocol):
    @property
    def name(self) -> str: ...


def offers_of(upstreams: Mapping[str, UpstreamView]) -> dict[str, Offer | Down]:
    """Each server's :class:`Offer` if it is connected now, else why not (:class:`Down`)."""
    out: dict[str, Offer | Down] = {}
    for name, up in upstreams.items():
        if up.state is ServerState.CONNECTED:
            out[name] = Offer(tuple(t.name for t in up.tools), up.catalog())
        else:
            out[name] = Down(up.state, up.last_error)
    return out


def unavailable(states: Mapping[str, ServerState], errors: Mapping[str, str | None]) -> dict[str, str]:
    """The servers not connected as the run ends: name -> ``state`` or ``state: error`` (``supervisor.exit``)."""
    out: dict[str, str] = {}
    for name, state in states.items():
        if state in (ServerState.CONNECTED, ServerState.STOPPED):
            continue
        error = errors.get(name)
        out[name] = f"{state.value}: {error}" if error else state.value
    return out


def at_start(
    settings: SettingsLike,
    offers: Mapping[str, Offer | Down],
    *,
    restored: bool | None = None,
    self_tools: Iterable[str] = (),
    told: Collection[str] = (),
) -> list[Finding]:
    """:func:`before_start` and :func:`against_offers` together, one finding per setting and kind.

    A route no subscription feeds is not also said to match nothing offered:
    the first finding is the one to fix.
    """
    first = before_start(settings, restored=restored)
    said = {(f.kind, f.setting) for f in first}
    later = against_offers(settings, offers, self_tools=self_tools, told=told)
    return [*first, *(f for f in later if (f.kind, f.setting) not in said)]


# --------------------------------------------------------------------------- before start


def before_start(settings: SettingsLike, *, restored: bool | None = None) -> list[Finding]:
    """What the settings alone say does nothing (see the module docstring).

    Args:
        settings: the validated settings.
        restored: whether sessions or watches restored from ``--state-dir`` /
            ``--watch-state`` hold routes now (a run knows; None: not known
            yet, as in ``agentd check``).
    """
    findings: list[Finding] = []
    timer = settings.interval is not None or settings.cron is not None
    if settings.mode == "reactive" and not settings.subscriptions and not timer and not restored:
        state = settings.state_dir is not None or settings.watch_state is not None
        unless = (
            " (unless sessions or watches an earlier run saved in the state directory are restored)"
            if state and restored is None
            else ""
        )
        findings.append(
            Finding(
                "reactive",
                "--mode",
                "reactive",
                "has no subscription and no timer: nothing will ever wake an agent" + unless,
                "subscribe to what should wake it (--subscribe [SERVER:]URI, with a --route for it), or "
                "add a timer (--interval or --cron, with --route '@timer=spawn'); for a single run use "
                "--mode once",
            )
        )
    findings += _uncovered(settings)
    subscribed = [compile_glob(s.uri) for s in settings.subscriptions]
    for i, route in enumerate(settings.routes):
        if route.timer or route.match is None:
            continue
        glob = compile_glob(route.match)
        if any(overlaps(glob, sub) for sub in subscribed):
            continue
        findings.append(
            Finding(
                "route",
                _route_setting(i, route.name),
                route.match,
                "matches no declared subscription: a route receives only changes of subscribed URIs, "
                "so it never fires",
                "subscribe to the URIs it should take (--subscribe [SERVER:]URI or subscribe = [...]), "
                "or remove the route",
            )
        )
    return findings


# --------------------------------------------------------------------------- which route covers which


@dataclass(frozen=True, slots=True)
class Coverage:
    """Which declared routes take a subscription's changes (ARCHITECTURE decision 22).

    Attributes:
        subscription: the subscription as written (``[server:]uri``).
        whole: routes every URI of the subscription matches (the first of them owns it,
            unless a route listed in ``part`` comes first for some URIs).
        part: routes only some of its URIs match.
    """

    subscription: str
    whole: tuple[str, ...]
    part: tuple[str, ...]

    @property
    def covered(self) -> Literal["whole", "part", "none"]:
        return "whole" if self.whole else "part" if self.part else "none"


def coverage(settings: SettingsLike) -> list[Coverage]:
    """For each declared subscription, the declared routes that cover it wholly or in part."""
    routes = [
        (route.name or f"r{i}", compile_glob(route.match))
        for i, route in enumerate(settings.routes)
        if not route.timer and route.match is not None
    ]
    out: list[Coverage] = []
    for sub in settings.subscriptions:
        glob = compile_glob(sub.uri)
        whole = tuple(name for name, r in routes if covers(r, glob))
        part = tuple(name for name, r in routes if name not in whole and overlaps(r, glob))
        out.append(Coverage(pattern_label(sub), whole, part))
    return out


def _uncovered(settings: SettingsLike) -> list[Finding]:
    """Where routes are declared, the subscriptions no route covers (wholly or in part): agentd adds none."""
    if not any(not r.timer for r in settings.routes):
        return []
    findings: list[Finding] = []
    for i, cov in enumerate(coverage(settings)):
        if cov.covered == "whole":
            continue
        setting = f"--subscribe (subscribe[{i}])"
        if cov.covered == "none":
            problem = (
                "no declared route matches it: its changes are unrouted (counted and dropped), since "
                "agentd adds no route of its own where routes are declared"
            )
        else:
            problem = (
                f"the declared routes cover only part of it ({', '.join(map(repr, cov.part))}): changes of "
                "its other URIs are unrouted (counted and dropped)"
            )
        findings.append(
            Finding(
                "subscription",
                setting,
                cov.subscription,
                problem,
                "add a route whose match covers it (--route or [[routes]]), or drop the subscription",
            )
        )
    return findings


# --------------------------------------------------------------------------- against what servers offer


def against_offers(
    settings: SettingsLike,
    offers: Mapping[str, Offer | Down],
    *,
    self_tools: Iterable[str] = (),
    told: Collection[str] = (),
) -> list[Finding]:
    """The settings against what the servers offer now (see the module docstring).

    Args:
        settings: the validated settings.
        offers: every configured server, in configuration order: what it
            offers, or why it is down.
        self_tools: the names of the self-tools agents are offered (a deny
            glob may name them).
        told: declared subscription patterns (:func:`pattern_label`) already
            reported as resolving to nothing (``subscription.unresolved``).
    """
    up = {name: o for name, o in offers.items() if isinstance(o, Offer)}
    down = [name for name, o in offers.items() if isinstance(o, Down)]
    findings = [_server_down(settings, name, o) for name, o in offers.items() if isinstance(o, Down)]
    findings += _routes(settings, up, down)
    findings += [f for f in _subscriptions(settings, up, down) if f.value not in told]
    findings += _tool_rules(settings, up, down, tuple(self_tools))
    return findings


def _server_down(settings: SettingsLike, name: str, down: Down) -> Finding:
    spec = settings.servers[name]
    value = spec.url if spec.url is not None else " ".join([spec.command or "", *spec.args])
    what = "failed" if down.state is ServerState.FAILED else "did not start"
    retry = (
        ""
        if down.state is ServerState.FAILED
        else "; agentd keeps retrying with backoff, and runs without it"
    )
    required = " (required: no agent starts until it connects)" if spec.required else ""
    return Finding(
        "server",
        f"server {name} ({spec.source})" if spec.source else f"server {name}",
        value,
        f"{what}: {down.error or 'no error was reported'}{retry}{required}",
        "fix the server's command or URL (the problem says why it failed); a run goes on without its tools "
        "and resources unless it is required (--require NAME)",
    )


def _unknown(down: Sequence[str]) -> str:
    """The honest tail of a "matches nothing" problem when some servers are not connected."""
    if not down:
        return ""
    names = ", ".join(repr(n) for n in down[:SAMPLE]) + (
        f" and {len(down) - SAMPLE} more" if len(down) > SAMPLE else ""
    )
    return f" ({names} did not connect: what {'it offers' if len(down) == 1 else 'they offer'} is not known)"


def _offered(up: Mapping[str, Offer]) -> str:
    """What the connected servers offer, in a few names (for a problem's text)."""
    if not up:
        return "no server is connected"
    parts = []
    for name, offer in list(up.items())[:SAMPLE]:
        uris = offer.sorted_uris
        items = [*uris[:SAMPLE], *offer.catalog.templates[: max(0, SAMPLE - len(uris))]]
        more = len(uris) + len(offer.catalog.templates) - len(items)
        listed = ", ".join(items) + (f" and {more} more" if more > 0 else "") if items else "no resources"
        parts.append(f"{name!r} offers {listed}")
    if len(up) > SAMPLE:
        parts.append(f"and {len(up) - SAMPLE} more servers")
    return "; ".join(parts)


def _matches_catalog(glob: Glob, offer: Offer) -> bool:
    catalog = offer.catalog
    if glob.exact:
        uri = glob.literal
        return uri in catalog.uris or catalog.matches_template(uri)
    return offer.any_resource(glob) or any(overlaps(glob, template_atoms(t)) for t in catalog.templates)


def _routes(settings: SettingsLike, up: Mapping[str, Offer], down: Sequence[str]) -> list[Finding]:
    findings = []
    for i, route in enumerate(settings.routes):
        if route.timer or route.match is None:
            continue
        glob = compile_glob(route.match)
        if any(_matches_catalog(glob, offer) for offer in up.values()):
            continue
        findings.append(
            Finding(
                "route",
                _route_setting(i, route.name),
                route.match,
                f"matches nothing the servers offer now ({_offered(up)}){_unknown(down)}",
                "write the match as a URI or glob of what the servers list (agentd check --connect "
                "shows it); a server that adds resources later can still feed it",
            )
        )
    return findings


def subscription_fix(pattern: str) -> str:
    """The fix of a declared subscription that resolves to nothing (also ``subscription.unresolved``)."""
    if compile_glob(pattern).exact:
        return (
            "subscribe to a URI a server lists or one of its templates matches (agentd check --connect "
            "shows them), and prefix it with the server's name (SERVER:URI) if more than one could have it"
        )
    return (
        "a glob subscribes only to resources a server lists (templates are not subscribable): widen it "
        "to the listed URIs, or subscribe to the exact URI a template makes"
    )


def _subscriptions(settings: SettingsLike, up: Mapping[str, Offer], down: Sequence[str]) -> list[Finding]:
    findings = []
    for i, sub in enumerate(settings.subscriptions):
        candidates = [sub.server] if sub.server else list(settings.servers)
        glob = compile_glob(sub.uri)
        offers = [up[n] for n in candidates if n in up]
        if glob.exact:
            uri = glob.literal
            if any(uri in o.catalog.uris or o.catalog.matches_template(uri) for o in offers):
                continue
            problem = "is listed by no server and matches none of their resource templates now"
        else:
            if any(o.any_resource(glob) for o in offers):
                continue
            problem = "matches no resource the servers list now"
        scope = {n: up[n] for n in candidates if n in up}
        findings.append(
            Finding(
                "subscription",
                f"--subscribe (subscribe[{i}])",
                pattern_label(sub),
                f"{problem} ({_offered(scope)}){_unknown([n for n in candidates if n in down])}",
                subscription_fix(sub.uri),
            )
        )
    return findings


def _tool_rules(
    settings: SettingsLike, up: Mapping[str, Offer], down: Sequence[str], self_tools: tuple[str, ...]
) -> list[Finding]:
    from agentd.upstream.naming import namespaced

    upstream = [namespaced(s, t) for s, o in up.items() for t in o.tools]
    every = [*self_tools, *upstream]
    findings: list[Finding] = []

    def check(
        setting: str,
        globs: Iterable[str],
        *,
        allow: bool,
        names: Sequence[str] = every,
        tools: Sequence[str] = upstream,
        unknown: Sequence[str] = down,
    ) -> None:
        globs = list(globs)
        matched = [g for g in globs if any(fnmatch.fnmatchcase(n, g) for n in names)]
        for glob in globs:
            if glob in matched:
                continue
            more = f" and {len(tools) - SAMPLE} more" if len(tools) > SAMPLE else ""
            if not allow:
                effect = "a deny glob that matches nothing removes nothing"
            elif not any(fnmatch.fnmatchcase(t, g) for t in tools for g in matched):
                effect = "as written, the allow list lets no server tool through: agents get none"
            else:
                effect = "this glob lets nothing through"
            findings.append(
                Finding(
                    "tool_rule",
                    setting,
                    glob,
                    f"matches no tool the servers offer now (tools: {', '.join(tools[:SAMPLE]) or 'none'}"
                    f"{more}){_unknown(unknown)}",
                    f"write globs of the tools as listed (agentd check --connect lists them); {effect}",
                )
            )

    check("--allowed-tools", settings.allowed_tools or (), allow=True)
    check("--disallowed-tools", settings.disallowed_tools, allow=False)
    for name, spec in settings.servers.items():
        if name not in up:
            continue  # a server that is down has no tools to match: its own rules wait for it
        own = up[name].tools
        for key, globs, allow in (
            ("allowed_tools", spec.allowed_tools or (), True),
            ("disallowed_tools", spec.disallowed_tools, False),
        ):
            check(f"servers.{name}.{key}", globs, allow=allow, names=own, tools=own, unknown=())
    for i, route in enumerate(settings.routes):
        check(_route_setting(i, route.name, "allowed_tools"), route.allowed_tools or (), allow=True)
        check(_route_setting(i, route.name, "disallowed_tools"), route.disallowed_tools, allow=False)
    return findings


def _route_setting(index: int, name: str | None, key: str = "match") -> str:
    """``--route (routes[0].match)``, or ``--route 'notes' (routes[0].match)`` for a named route."""
    named = f" {name!r}" if name else ""
    return f"--route{named} (routes[{index}].{key})"

"""Which tools an agent is offered: allow and deny globs, globally, per server and per route.

Pure and synchronous (no I/O, no trio): the hub asks :meth:`ToolPolicy.allows`
for every tool when it builds an agent's catalog, and a tool that is not
offered is, for that agent, an unknown tool (the model never sees it, and a
call to it is refused like any other unknown name).

The rules, in the order they apply to an upstream tool ``server__tool``:

1. the server's own ``allowed_tools`` / ``disallowed_tools`` (globs over the
   server's tool names, as written in its table: ``read_*``);
2. the global ``allowed_tools`` / ``disallowed_tools`` (globs over the
   namespaced name: ``files__read_*``, ``memo__*``);
3. the agent's route: its ``allowed_tools`` / ``disallowed_tools`` (namespaced
   globs) and ``tools = "read-only"`` (only tools the server annotates
   ``readOnlyHint: true``, as watch filters already require).

A tool must pass every level: a deny always wins, an allow list (when given)
must match. The self-tools (``subscribe``, ``watch_start``, …) are not
upstream tools: an allow list does not remove them, and only an explicit
deny glob that matches their name does.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agentd.config import Settings

__all__ = ["ToolPolicy", "ToolRules"]


def _compile(globs: Iterable[str]) -> re.Pattern[str] | None:
    parts = [fnmatch.translate(g) for g in globs]
    return re.compile("|".join(parts)) if parts else None


@dataclass(frozen=True)
class ToolRules:
    """One level of the policy."""

    allowed: tuple[str, ...] | None = None
    """Globs a tool must match (None: every tool)."""
    disallowed: tuple[str, ...] = ()
    """Globs no offered tool may match."""
    read_only: bool = False
    """Only tools annotated read-only."""
    _allow: re.Pattern[str] | None = field(init=False, repr=False, compare=False)
    _deny: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_allow", _compile(self.allowed or ()))
        object.__setattr__(self, "_deny", _compile(self.disallowed))

    @classmethod
    def of(
        cls, allowed: Iterable[str] | None, disallowed: Iterable[str] = (), *, read_only: bool = False
    ) -> ToolRules:
        return cls(None if allowed is None else tuple(allowed), tuple(disallowed), read_only)

    @property
    def is_open(self) -> bool:
        """Whether this level lets everything through."""
        return self.allowed is None and not self.disallowed and not self.read_only

    def denies(self, name: str) -> bool:
        return self._deny is not None and self._deny.fullmatch(name) is not None

    def admits(self, name: str, *, read_only_hint: bool | None) -> bool:
        """Whether an upstream tool called ``name`` (as this level spells it) passes this level."""
        if self.denies(name):
            return False
        if self.allowed is not None and (self._allow is None or self._allow.fullmatch(name) is None):
            return False
        return not self.read_only or read_only_hint is True


@dataclass(frozen=True)
class ToolPolicy:
    """The whole policy (see the module docstring)."""

    everywhere: ToolRules = ToolRules()
    servers: Mapping[str, ToolRules] = field(default_factory=dict)
    routes: Mapping[str, ToolRules] = field(default_factory=dict)

    def allows(
        self,
        route: str | None,
        name: str,
        *,
        server: str | None = None,
        tool: str | None = None,
        read_only_hint: bool | None = None,
    ) -> bool:
        """Whether the agent of ``route`` is offered the tool it would call ``name``.

        Args:
            route: the agent's route id (None: no route, e.g. the root).
            name: the name the model sees (``server__tool``, or a self-tool's name).
            server: the upstream server, None for a self-tool.
            tool: the server's own name for the tool.
            read_only_hint: the tool's ``readOnlyHint`` annotation.
        """
        scope = self.routes.get(route) if route is not None else None
        if server is None:  # a self-tool: only an explicit deny removes it
            return not self.everywhere.denies(name) and not (scope is not None and scope.denies(name))
        own = self.servers.get(server)
        if own is not None and not own.admits(tool or name, read_only_hint=read_only_hint):
            return False
        if not self.everywhere.admits(name, read_only_hint=read_only_hint):
            return False
        return scope is None or scope.admits(name, read_only_hint=read_only_hint)

    def scoped(self, route: str | None) -> str | None:
        """The key under which ``route``'s catalog is cached (None: the same as no route)."""
        return route if route is not None and route in self.routes else None

    @classmethod
    def from_settings(cls, settings: Settings) -> ToolPolicy:
        """Build it from :class:`agentd.config.Settings` (route ids as the router numbers them)."""
        servers = {
            name: ToolRules.of(spec.allowed_tools, spec.disallowed_tools)
            for name, spec in settings.servers.items()
            if spec.allowed_tools is not None or spec.disallowed_tools
        }
        routes: dict[str, ToolRules] = {}
        for i, rc in enumerate(settings.routes):
            rules = ToolRules.of(rc.allowed_tools, rc.disallowed_tools, read_only=rc.tools == "read-only")
            if not rules.is_open:
                routes[rc.name if rc.name is not None else f"r{i}"] = rules
        return cls(ToolRules.of(settings.allowed_tools, settings.disallowed_tools), servers, routes)

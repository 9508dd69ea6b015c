"""Namespaced tool names: ``server__tool``, fitted to provider rules.

Model providers accept tool names matching ``^[a-zA-Z0-9_-]{1,64}$``. agentd
serves every upstream tool to its agents under ``<server>__<tool>``; a name
that does not fit is sanitized (every other character becomes ``_``) and, when
still too long, truncated with a short stable hash so distinct long names stay
distinct. Because that mapping is lossy, :class:`ToolNameMap` keeps the
reverse map; :func:`split_namespaced` is the lossless inverse for names that
needed no fitting.

Pure and synchronous.
"""

from __future__ import annotations

import hashlib
import re

__all__ = ["MAX_TOOL_NAME", "SEPARATOR", "ToolNameMap", "namespaced", "split_namespaced"]

SEPARATOR = "__"
"""Between the server name and the tool name."""

MAX_TOOL_NAME = 64
"""Longest tool name the providers accept (OpenAI and Anthropic both cap at 64)."""

_HASH_CHARS = 8
"""Hex digits of sha256 kept when a name is truncated: 32 bits, collisions are
negligible among the few hundred tools one supervisor serves."""

_VALID = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_INVALID_CHAR = re.compile(r"[^a-zA-Z0-9_-]")


def namespaced(server: str, tool: str) -> str:
    """The provider-safe name for ``tool`` on ``server``.

    ``namespaced("github", "create_issue") == "github__create_issue"``. Invalid
    characters become ``_``; a result longer than 64 characters is cut to 55
    and suffixed with ``_`` and 8 hex digits of a hash of the unfitted name.
    """
    raw = f"{server}{SEPARATOR}{tool}"
    if _VALID.match(raw):
        return raw
    clean = _INVALID_CHAR.sub("_", raw)
    if len(clean) <= MAX_TOOL_NAME:
        return clean
    digest = hashlib.sha256(raw.encode()).hexdigest()[:_HASH_CHARS]
    return f"{clean[: MAX_TOOL_NAME - _HASH_CHARS - 1]}_{digest}"


def split_namespaced(name: str) -> tuple[str, str]:
    """Split ``server__tool`` at the first separator.

    Exact for names :func:`namespaced` did not have to fit (server names
    without ``__``); for fitted names use :meth:`ToolNameMap.resolve`.

    Raises:
        ValueError: ``name`` has no ``__`` separator.
    """
    server, sep, tool = name.partition(SEPARATOR)
    if not sep or not server or not tool:
        raise ValueError(
            f"tool name {name!r} is not namespaced: expected '<server>{SEPARATOR}<tool>', "
            "as listed by the supervisor's tools/list"
        )
    return server, tool


class ToolNameMap:
    """Forward and reverse map between (server, tool) and namespaced names."""

    def __init__(self) -> None:
        self._reverse: dict[str, tuple[str, str]] = {}

    def add(self, server: str, tool: str) -> str:
        """Register ``tool`` on ``server`` and return its namespaced name.

        Raises:
            ValueError: the fitted name is already taken by a different tool.
        """
        name = namespaced(server, tool)
        existing = self._reverse.get(name)
        if existing is not None and existing != (server, tool):
            raise ValueError(
                f"tool {tool!r} on server {server!r} and tool {existing[1]!r} on server "
                f"{existing[0]!r} both map to {name!r}; rename one server in the configuration"
            )
        self._reverse[name] = (server, tool)
        return name

    def remove_server(self, server: str) -> None:
        """Forget every tool of ``server`` (before re-adding its refreshed list)."""
        self._reverse = {k: v for k, v in self._reverse.items() if v[0] != server}

    def resolve(self, name: str) -> tuple[str, str]:
        """The (server, tool) behind a namespaced name.

        Raises:
            KeyError: no tool is registered under ``name``.
        """
        try:
            return self._reverse[name]
        except KeyError:
            raise KeyError(f"no upstream tool is served as {name!r}") from None

    def __contains__(self, name: object) -> bool:
        return name in self._reverse

    def __len__(self) -> int:
        return len(self._reverse)

"""Reactor parts for tests that build a reactor by hand: hooks that only record spawns."""

from __future__ import annotations

from collections.abc import Callable

from agentd.supervisor.loop.reactor import Agent, Hooks


def spawn_hooks(spawn: Callable[[Agent], None]) -> Hooks:
    """Hooks that pass each spawn to ``spawn`` and do nothing for kills, unsubscribes and publishing."""
    return Hooks(
        spawn=spawn, kill_all=lambda: None, unsubscribe=lambda _s, _u: None, publish=lambda *_a: None
    )

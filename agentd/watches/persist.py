"""``--watch-state`` as the watch manager keeps it: one writer task, spec names, the restore notice.

Specs (name, URI, filter, owner, baseline) are written on every start and
stop and after every notice, by one writer task, in a worker thread. The
baseline written is the one as of the last notice handed to the reactor, so
a restart reports again what no notice has carried yet (rfcs/0076). A
declared route's stage is saved as a spec with no owner, named
``route:<route id>:<uri>``. The file itself (format, atomic writes, the
lock, a damaged file moved aside) is :mod:`agentd.watches.state`.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Final

import trio

from agentd.core.errors import WatchStateError
from agentd.observe.telemetry import Telemetry
from agentd.watches import state as state_file
from agentd.watches.state import WatchSpec

#: ``--watch-state`` names of declared-route stages start with this (watch names cannot hold ``:``).
ROUTE_SPEC_PREFIX: Final = "route:"

#: The instruction after a restore notice.
RESTORE_INSTRUCTION: Final = (
    "agentd restarted and started again the watches you had set up (listed above). "
    "Changes made while it was down follow as watch events. "
    "If nothing here needs action, answer with exactly NO_REPLY and nothing else."
)


def route_spec_name(route_id: str, uri: str) -> str:
    """The ``--watch-state`` name of a declared route's stage for ``uri``."""
    return f"{ROUTE_SPEC_PREFIX}{route_id}:{uri}"


def render_restore(lines: Iterable[str]) -> str:
    """The restore notice: a ``<watches-restored>`` block, one watch per line, then the instruction."""
    body = "\n".join(html.escape(line, quote=False) for line in lines)
    return f"<watches-restored>\n{body}\n</watches-restored>\n{RESTORE_INSTRUCTION}"


class StateWriter:
    """Keeps ``--watch-state`` up to date (a no-op without a path).

    Args:
        path: The ``--watch-state`` file, or ``None`` (watches in memory only).
        telemetry: Where a file that cannot be read or written is reported
            (once per problem), and its recovery.
        specs: What the file is to hold now (the manager's view).
    """

    def __init__(self, path: Path | None, telemetry: Telemetry, specs: Callable[[], list[WatchSpec]]) -> None:
        self.path = path
        self._telemetry = telemetry
        self._specs = specs
        self._wanted = trio.Event()
        self._problem: str | None = None
        """Why the file cannot be used now (reported once), or None."""

    def request(self) -> None:
        """Ask for a write (the writer task makes one for any number of requests)."""
        if self.path is not None:
            self._wanted.set()

    async def run(self) -> None:
        """The writer task (runs until cancelled)."""
        while True:
            await self._wanted.wait()
            self._wanted = trio.Event()
            await self.write()

    async def write(self) -> None:
        if self.path is None:
            return
        path, specs = self.path, self._specs()
        try:
            await trio.to_thread.run_sync(state_file.save, path, specs)
        except WatchStateError as exc:
            if self._problem != str(exc):
                self._problem = str(exc)
                self._telemetry.emit("watch.state_unavailable", path=str(path), error=str(exc))
            return
        if self._problem is not None:
            self._problem = None
            self._telemetry.emit("watch.state_recovered", path=str(path))

    async def load(self) -> list[WatchSpec] | None:
        """The specs the file holds; None without a path, or when it cannot be read (reported).

        A damaged file is moved aside, keeping the watches it held whole
        (``state.moved_aside``); its warnings are reported one by one.
        """
        if self.path is None:
            return None
        try:
            loaded = await trio.to_thread.run_sync(state_file.load, self.path)
        except WatchStateError as exc:
            self._problem = str(exc)
            self._telemetry.emit("watch.state_unavailable", path=str(self.path), error=str(exc))
            return None
        specs = loaded.specs
        if loaded.moved_aside is not None:
            self._telemetry.emit(
                "state.moved_aside",
                file="watch state",
                path=str(loaded.moved_aside.path),
                moved_to=str(loaded.moved_aside.moved_to),
                problem=loaded.moved_aside.problem,
                kept=len(specs),
                fix="the watches it held whole are restored and the file is written anew; inspect or delete the moved file",
            )
        for warning in loaded.warnings:
            self._telemetry.emit("watch.state_warning", path=str(self.path), warning=warning)
        return specs

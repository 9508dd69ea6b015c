"""The session journals of one agentd: commit after each turn, restore at the next delivery.

Who writes: the supervisor, in the child's own control-channel task
(:func:`agentd.supervisor.children.channel.serve_control`), when a journaled child ends
a turn: the turn's messages (sent by the child as transcript parts) are
appended and fsynced *before* the reactor hears of the turn end. The child
never touches the state directory, and nothing it sends is interpreted: the
messages are data, stored as the model saw them (tool results included) and
only ever shown to the model again.

Which sessions: warm ones. A continue route's session, the warm loop root
(``root``) and an agent that subscribed itself (its session is its agent id)
are journaled; ``--mode once`` roots, schedule roots and fresh loop roots are
not (their spawn payload does not ask for transcript parts), and a spawned
agent's turn is kept only once it is a session (it subscribed or watches).

Lifecycle of one journal:

* **start** (:meth:`SessionJournals.scan`): every journal is read once;
  a torn tail is cut off (``journal.torn``), a corrupt file is moved aside
  and its good prefix kept, what is not a regular file is moved aside
  unread (``state.moved_aside``), a foreign file is refused and left
  untouched (``state.refused``; rfcs/0275). Each readable journal is
  *resumable*: its self-subscriptions are restored at once (routes and
  upstream subscriptions, with the start-up re-read); the conversation stays
  on disk.
* **next delivery**: the reactor starts the session's agent with the
  delivery as its input, and :meth:`history` loads the conversation for its
  spawn payload (``journal.restored``): the model sees exactly the
  conversation it had, compacted only past the token budget.
* **each turn end**: :meth:`commit` appends the turn (compacting the file
  past the budget, ``journal.compacted``).
* **end**: a session whose agent exits while agentd runs on (nothing left to
  wait for, a crash) is over: :meth:`end` removes its journal. Drain, budget
  exhaustion and a killed agentd keep it.

A journal that cannot be written (full disk, read-only) gives
``journal.failed`` and the session runs on in memory: a turn is never held
back by its journal.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import trio

from agentd.core.errors import NotAFile, NotOurs, StateFileError
from agentd.observe.telemetry import Telemetry
from agentd.selfmcp.protocol import MessageFrame, SpawnPayload
from agentd.state import files
from agentd.state import journal as jf

if TYPE_CHECKING:
    from agentd.config import Settings
    from agentd.supervisor.children.tree import Tree

Subs = tuple[tuple[str, str | None], ...]
"""A session's self-subscriptions: ``(uri, server)`` pairs."""

#: Default token budget of one journaled conversation (``[sessions] max_tokens``):
#: below the context window of the models agents use, so a restored session fits.
DEFAULT_MAX_TOKENS = 100_000

TurnJournal = Callable[[Sequence[MessageFrame]], Awaitable[None]]
"""Records one agent's finished turn; returns once it is durable (:meth:`SessionJournals.journal_for`)."""


@dataclass
class _Journal:
    """One session's open journal."""

    session: str
    path: Path
    owner: str | None = None
    """The agent writing it now (its first commit opened or created the file)."""
    fd: int | None = None
    turn_tokens: list[int] = field(default_factory=list)
    subs: Subs = ()
    lock: trio.Lock = field(default_factory=trio.Lock)


class SessionJournals:
    """Every session journal under ``directory`` (see the module docstring).

    Args:
        directory: ``<state-dir>/sessions`` (created if missing).
        telemetry: ``journal.*`` events.
        max_tokens: token budget of one conversation (compaction beyond it).
    """

    def __init__(self, directory: Path, telemetry: Telemetry, *, max_tokens: int) -> None:
        self.directory = directory
        self._telemetry = telemetry
        self.max_tokens = max_tokens
        self._journals: dict[str, _Journal] = {}
        self._resumable: dict[str, Subs] = {}
        """Sessions found at start whose conversation waits on disk -> their self-subscriptions."""
        self._restored_agents: dict[str, str] = {}
        """Agent id -> the session whose history it was started with."""
        self._refused: set[str] = set()
        """File names found at start that are not agentd's (or not readable): never written."""

    # -- start ----------------------------------------------------------------------------

    def scan(self) -> None:
        """Blocking (run it in a thread, once, before the reactor turns): find every journal.

        The repair rule (rfcs/0275): what is not a regular file is moved aside
        unread (``state.moved_aside``); a damaged journal is moved aside with
        its good turns kept; another user's file, or a file that is not a
        journal, is refused and left untouched (``state.refused``), and its
        name is never written while this agentd runs.
        """
        files.make_private_dir(self.directory)
        for leftover in self.directory.glob(".*.tmp"):
            with contextlib.suppress(OSError):
                leftover.unlink()  # a link is removed, never followed
        for path in sorted(self.directory.glob("*" + jf.SUFFIX)):
            self._scan_one(path)

    def _repaired(self, path: Path, repair: Callable[[], None]) -> bool:
        """Run ``repair`` on the damaged journal ``path``; False (reported) when the file system refused."""
        try:
            repair()
        except OSError as exc:
            self._telemetry.emit("journal.failed", path=str(path), error=str(exc))
            return False
        return True

    def _scan_one(self, path: Path) -> None:
        try:
            contents = jf.read(path)
        except NotAFile as exc:
            problem = exc.problem
            try:
                aside = files.move_aside(path, files.UNSAFE)
            except OSError as err:
                self._telemetry.emit(
                    "journal.failed", path=str(path), error=f"{problem}; cannot move it: {err}"
                )
                self._refused.add(path.name)
                return
            self._telemetry.emit(
                "state.moved_aside",
                file="session journal",
                path=str(path),
                moved_to=str(aside),
                problem=problem,
                kept=0,
                fix="never read; inspect or delete it",
            )
            return
        except NotOurs as exc:
            self._refused.add(path.name)
            self._telemetry.emit(
                "state.refused",
                file="session journal",
                path=str(path),
                problem=exc.problem,
                fix="left untouched and not restored; remove it if it is not wanted",
            )
            return
        except OSError as exc:
            self._refused.add(path.name)
            self._telemetry.emit(
                "journal.failed",
                path=str(path),
                error=f"cannot read it: {exc.strerror or exc}",
                fix="fix its permissions; the session starts fresh until then",
            )
            return
        if contents.problem == "foreign":
            self._refused.add(path.name)
            self._telemetry.emit(
                "state.refused",
                file="session journal",
                path=str(path),
                problem=contents.detail,
                fix="left untouched and not restored; move it out of the state directory",
            )
            return
        session = contents.session
        if contents.problem is None and session is not None and jf.file_name(session) != path.name:
            contents.problem, contents.detail = (
                "corrupt",
                f"it names session {session!r}, whose journal is another file",
            )
            contents.turns, contents.good_bytes = [], 0
        if contents.problem == "torn":
            dropped = path.stat().st_size - contents.good_bytes
            good_bytes = contents.good_bytes
            if not self._repaired(
                path, path.unlink if session is None else lambda: jf.truncate(path, good_bytes)
            ):
                return
            self._telemetry.emit(
                "journal.torn",
                session=session,
                path=str(path),
                detail=contents.detail,
                dropped_bytes=dropped,
                turns=len(contents.turns),
                note="the last turn was being written when agentd stopped; the session resumes before it",
            )
        elif contents.problem == "corrupt":
            kept = session is not None and bool(contents.turns) and jf.file_name(session) == path.name
            moved: list[Path] = []

            def move() -> None:
                moved.append(files.move_aside(path, files.CORRUPT))
                if kept:
                    assert session is not None
                    jf.write_whole(path, session, contents.turns, contents.subs)

            if not self._repaired(path, move):
                return
            self._telemetry.emit(
                "state.moved_aside",
                file="session journal",
                session=session,
                path=str(path),
                moved_to=str(moved[0]),
                problem=contents.detail,
                kept=len(contents.turns) if kept else 0,
                fix="moved aside untouched, its good turns kept; inspect or delete it",
            )
            if not kept:
                return
        if session is None or not contents.turns:
            return
        self._resumable[session] = contents.subs
        self._journals[session] = _Journal(
            session, path, turn_tokens=[jf.turn_tokens(t) for t in contents.turns], subs=contents.subs
        )
        self._telemetry.emit(
            "journal.found", session=session, turns=len(contents.turns), subscriptions=len(contents.subs)
        )

    # -- what the reactor asks ----------------------------------------------------------------

    def resumable(self, session: str) -> Subs | None:
        """The self-subscriptions of a session whose conversation waits on disk (None: start it fresh)."""
        return self._resumable.get(session)

    def reserved(self, name: str) -> bool:
        """Whether ``name`` is a session with a journal (a new agent must not take it as its id)."""
        return name in self._resumable

    def sessions_with_subscriptions(self) -> dict[str, Subs]:
        """Resumable sessions that had self-subscriptions (restored at start)."""
        return {s: subs for s, subs in self._resumable.items() if subs}

    async def history(self, agent: str, session: str) -> tuple[MessageFrame, ...]:
        """The conversation ``agent`` resumes ``session`` with (compacted to the budget); () if none."""
        if session not in self._resumable:
            return ()
        path = self.directory / jf.file_name(session)
        try:
            contents = await trio.to_thread.run_sync(jf.read, path)
        except (OSError, StateFileError) as exc:
            self._telemetry.emit("journal.failed", session=session, path=str(path), error=str(exc))
            return ()
        if contents.problem is not None or not contents.turns:
            self._telemetry.emit(
                "journal.failed",
                session=session,
                path=str(path),
                error=f"changed since start: {contents.detail or 'empty'}",
                fix="the session starts fresh",
            )
            return ()
        turns, dropped = jf.compact(contents.turns, self.max_tokens)
        self._restored_agents[agent] = session
        messages = tuple(m for t in turns for m in t)
        self._telemetry.emit(
            "journal.restored",
            session=session,
            agent=agent,
            turns=len(contents.turns),
            messages=len(messages),
            dropped_turns=dropped,
        )
        return messages

    def end(self, session: str) -> None:
        """The session is over (its agent exited while agentd runs on): its journal goes."""
        self._resumable.pop(session, None)
        j = self._journals.pop(session, None)
        path = j.path if j is not None else self.directory / jf.file_name(session)
        if j is not None and j.fd is not None:
            with contextlib.suppress(OSError):
                os.close(j.fd)
        if path.name in self._refused:
            return  # not agentd's: left as it is
        with contextlib.suppress(FileNotFoundError):
            try:
                path.unlink()
            except OSError as exc:
                self._telemetry.emit("journal.failed", session=session, path=str(path), error=str(exc))

    # -- the write path --------------------------------------------------------------------------

    def journal_for(self, agent: SessionAgent) -> TurnJournal:
        """What records ``agent``'s turns: bound to the reactor's own record of it when it is spawned.

        Each turn is recorded under the session the agent serves at that
        turn's end (an agent becomes a session when it first subscribes
        itself), with the self-subscriptions it then holds; a turn of an
        agent that serves no session is not recorded.
        """

        async def record(messages: Sequence[MessageFrame]) -> None:
            if agent.session is not None:
                await self.commit(agent.id, messages, session=agent.session, subs=session_subs(agent))

        return record

    async def commit(self, agent: str, messages: Sequence[MessageFrame], *, session: str, subs: Subs) -> None:
        """Append ``agent``'s finished turn to ``session``'s journal (durable when this returns).

        ``subs`` are the session's self-subscriptions at this turn's end.
        Errors are reported (``journal.failed``), never raised: the turn goes on.
        """
        j = self._journals.get(session)
        if j is None:
            j = self._journals[session] = _Journal(session, self.directory / jf.file_name(session))
        async with j.lock:
            try:
                dropped = await trio.to_thread.run_sync(self._commit_sync, j, agent, tuple(messages), subs)
            except (OSError, ValueError, StateFileError) as exc:
                self._telemetry.emit(
                    "journal.failed",
                    session=session,
                    agent=agent,
                    path=str(j.path),
                    error=str(exc),
                    fix="free space or fix the state directory; the session runs on in memory",
                )
                return
        if dropped:
            self._telemetry.emit(
                "journal.compacted",
                session=session,
                dropped_turns=dropped,
                tokens=sum(j.turn_tokens),
                max_tokens=self.max_tokens,
            )

    def _commit_sync(self, j: _Journal, agent: str, messages: tuple[MessageFrame, ...], subs: Subs) -> int:
        """Append the turn (worker thread); returns how many turns compaction dropped."""
        if j.path.name in self._refused:
            raise NotOurs(
                str(j.path),
                "was found at start and is not an agentd journal (or another user's); it is left as it "
                "is: move it out of the state directory so this session is journaled",
            )
        if j.owner != agent:
            # This agent's first turn for the session: continue the file it was
            # restored from, or start a new one (replacing any stale file).
            if j.fd is not None:
                os.close(j.fd)
                j.fd = None
            j.owner = agent
            # Taken, not read: it is needed at this first turn only (the map stays as small as the restores in flight).
            if self._restored_agents.pop(agent, None) == j.session and j.path.exists():
                j.fd = jf.open_append(j.path)
            else:
                j.turn_tokens = []
                jf.write_whole(j.path, j.session, [], ())
                j.fd = jf.open_append(j.path)
        assert j.fd is not None
        record = jf.encode(jf.TurnRecord(messages=messages, subs=subs))
        if len(record) > jf.MAX_RECORD_BYTES:
            raise ValueError(f"a turn of {len(record)} bytes is over the journal's record limit")
        jf.append(j.fd, record)
        j.turn_tokens.append(jf.turn_tokens(messages))
        j.subs = subs
        if sum(j.turn_tokens) > self.max_tokens:
            return self._compact_sync(j)
        return 0

    def _compact_sync(self, j: _Journal) -> int:
        contents = jf.read(j.path)
        turns, dropped = jf.compact(contents.turns, self.max_tokens)
        if not dropped:
            return 0
        if j.fd is not None:
            os.close(j.fd)
            j.fd = None
        jf.write_whole(j.path, j.session, turns, j.subs)
        j.fd = jf.open_append(j.path)
        j.turn_tokens = [jf.turn_tokens(t) for t in turns]
        return dropped

    async def spawn_resumed(
        self, tree: Tree, agent: str, session: str, payload: SpawnPayload, journal: TurnJournal | None
    ) -> None:
        """Spawn ``session``'s agent with the conversation its journal holds (read in a worker thread)."""
        history = await self.history(agent, session)
        with contextlib.suppress(RuntimeError):  # the tree stopped meanwhile (agentd is exiting)
            tree.spawn(
                agent,
                payload.model_copy(update={"history": history}) if history else payload,
                journal=journal,
            )

    def close(self) -> None:
        for j in self._journals.values():
            if j.fd is not None:
                with contextlib.suppress(OSError):
                    os.close(j.fd)
                j.fd = None


class SessionAgent(Protocol):
    """The reactor's record of an agent that a journal records (its session and self-subscriptions)."""

    @property
    def id(self) -> str: ...
    @property
    def session(self) -> str | None: ...
    @property
    def subscriptions(self) -> Collection[str]: ...
    @property
    def subscription_servers(self) -> Mapping[str, str]: ...


def session_subs(agent: SessionAgent) -> Subs:
    """``agent``'s self-subscriptions as a journal records them: ``(uri, server)``, sorted by URI."""
    return tuple((uri, agent.subscription_servers.get(uri)) for uri in sorted(agent.subscriptions))


def journals_for(settings: Settings, telemetry: Telemetry) -> SessionJournals | None:
    """The session journals under ``--state-dir`` (None without one, and in once mode: nothing resumes)."""
    if settings.state_dir is None or settings.mode == "once":
        return None
    from agentd.state.dir import SESSIONS_NAME

    return SessionJournals(
        settings.state_dir / SESSIONS_NAME, telemetry, max_tokens=settings.session_max_tokens
    )


__all__ = [
    "DEFAULT_MAX_TOKENS",
    "SessionAgent",
    "SessionJournals",
    "Subs",
    "TurnJournal",
    "journals_for",
    "session_subs",
]

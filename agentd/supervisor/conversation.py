"""A once run's conversation (rfcs/0303): what it continues, what it says at start, where its turn is saved."""

from __future__ import annotations

import dataclasses
import os
import uuid
from collections.abc import Sequence
from typing import TYPE_CHECKING

import trio

from agentd.config import Settings
from agentd.core.errors import StateFileError
from agentd.observe.telemetry import Telemetry
from agentd.selfmcp.protocol import MessageFrame

if TYPE_CHECKING:
    from agentd.state.conversations import Conversation
    from agentd.supervisor.children.channel import Journal


@dataclasses.dataclass(frozen=True)
class OnceConversation:
    """A once run's conversation (rfcs/0303): its id, what it continues, and where it is saved.

    Attributes:
        session_id: the conversation's id (the run's ``session_id``).
        history: the saved turns the root continues (empty for a new conversation).
        turns: how many turns were saved before (0: new).
        dropped_turns: turns the history left out to fit ``--session-max-tokens``.
        saving: where this run's turn is saved (None: ``--ephemeral``, or no state directory).
        unsaved: why it is not saved although it could be (told once the run starts), or "".
    """

    session_id: str
    history: tuple[MessageFrame, ...] = ()
    turns: int = 0
    dropped_turns: int = 0
    saving: Conversation | None = None
    unsaved: str = ""


def once_conversation(settings: Settings) -> OnceConversation | None:
    """The conversation a once run continues and saves (None in other modes).

    Raises:
        ConfigError: ``--continue`` / ``--resume`` name no readable conversation (exit 2).
    """
    if settings.mode != "once":
        return None
    from agentd.state import conversations as conv

    root = conv.state_root(settings.state_dir, os.environ)
    unsaved = ""
    if root is None:
        unsaved = "there is no home directory for the per-user state directory"
    elif settings.state_dir is None and root.exists():
        from agentd.state.dir import refusal

        why = refusal(root)
        unsaved = f"the per-user state directory {str(root)!r}: {why}" if why is not None else ""
    found = conv.find(root, resume=settings.resume, latest=settings.continue_conversation)
    session_id = found.id if found is not None else str(uuid.uuid4())
    saving = (
        conv.Conversation(conv.folder(root), session_id, max_tokens=settings.session_max_tokens)
        if root is not None
        else None
    )
    history: tuple[MessageFrame, ...] = ()
    turns = dropped = 0
    if found is not None and saving is not None:
        history, turns, dropped = saving.history()
    if settings.ephemeral or unsaved:
        saving = None
    return OnceConversation(session_id, history, turns, dropped, saving, unsaved)


def conversation_telemetry(conversation: OnceConversation, telemetry: Telemetry) -> None:
    """What a once run says about its conversation at start: continued, or not saved and why."""
    if conversation.turns:
        telemetry.emit(
            "conversation.resumed",
            session=conversation.session_id,
            turns=conversation.turns,
            messages=len(conversation.history),
            dropped_turns=conversation.dropped_turns,
        )
    if conversation.unsaved:
        telemetry.emit(
            "conversation.unsaved",
            session=conversation.session_id,
            error=conversation.unsaved,
            fix="give --state-dir DIR (a directory of agentd's user), or --ephemeral to save nothing",
        )


def saver(saving: Conversation, session_id: str, telemetry: Telemetry, agent: str) -> Journal:
    """The once root ``agent``'s journal: its turn is added to the conversation file (in a worker thread)."""

    async def save(messages: Sequence[MessageFrame]) -> None:
        try:
            saved = await trio.to_thread.run_sync(saving.save, messages)
        except (OSError, StateFileError) as exc:
            # Never fails the run: the answer is still printed, only continuing it is lost.
            telemetry.emit(
                "conversation.unsaved",
                session=session_id,
                path=str(saving.path),
                error=str(exc),
                fix="give --state-dir DIR (a writable directory of agentd's user), or --ephemeral to save nothing",
            )
            return
        if saved.moved_aside is not None:
            telemetry.emit(
                "state.moved_aside",
                file="conversation",
                session=session_id,
                path=str(saved.path),
                moved_to=str(saved.moved_aside),
                problem=saved.damage,
                kept=saved.turns - 1,
                fix="the file was moved aside untouched; inspect or delete it",
            )
        telemetry.emit(
            "conversation.saved",
            session=session_id,
            agent=agent,
            path=str(saved.path),
            turns=saved.turns,
            dropped_turns=saved.dropped_turns,
        )

    return save

"""Telling clients: ``resources/updated`` for the log and its status, and the Claude Code channel push.

Each message goes out once per client as ``notifications/claude/channel``
(to whom, per ``--channel``: docs/inbox.md); readers of ``inbox://AGENT``
learn of it from ``resources/updated`` and read the log.
"""

from __future__ import annotations

import logging
from typing import Final, Literal

from agentd.servers._base import LegacyClient, WatchableServer
from agentd.servers._inboxlog import Entry, InboxLog, channel_params
from agentd.servers._intervals import IntervalSet
from agentd.servers.inbox.cursor import CursorPersister

log = logging.getLogger("agentd.servers.inbox")

CHANNEL_METHOD: Final = "notifications/claude/channel"
CHANNEL_CAPABILITY: Final = "claude/channel"

ChannelPolicy = Literal["auto", "always", "never"]


class Notifier:
    """Tells the server's clients about the inbox's events (it never writes to disk itself)."""

    def __init__(
        self,
        server: WatchableServer,
        log: InboxLog,
        persister: CursorPersister,
        *,
        channel: ChannelPolicy,
        inbox_path: str,
    ) -> None:
        self._server = server
        self._log = log
        self._persister = persister
        self.channel = channel
        self._inbox_path = inbox_path
        self.uri = log.uri
        self.status_uri = f"{log.uri}/status"

    def wants_channel(self, client: LegacyClient) -> bool:
        if self.channel == "never":
            return False
        if self.channel == "always" or client.declares(CHANNEL_CAPABILITY):
            return True
        # auto: Claude Code declares nothing for channels; a client that subscribed to the log reads it instead.
        return not self._server.is_subscribed(client, self.uri)

    async def push_channel(self, entries: list[Entry], clients: list[LegacyClient] | None = None) -> None:
        """Push the pending ones of ``entries`` that a channel client has not had yet."""
        for client in self._server.legacy_clients() if clients is None else clients:
            if not self.wants_channel(client):
                continue
            pushed = client.state.get("inbox_pushed")
            if not isinstance(pushed, IntervalSet):
                pushed = client.state["inbox_pushed"] = IntervalSet()
            todo = [e for e in entries if e.seq not in pushed and self._log.is_pending(e.seq)]
            if not todo:
                continue
            for e in todo:
                pushed.add(e.seq)
            await self._server.send_custom(
                client, CHANNEL_METHOD, [channel_params(e, agent=self._log.agent) for e in todo]
            )

    async def publish(self, entries: list[Entry]) -> None:
        """Tell clients about new pending events (ERROR events are made durable first: their seqs are stable)."""
        if not entries:
            return
        errors = [e for e in entries if e.kind == "ERROR"]
        if errors:
            for e in errors:
                log.warning("%s: %s", self._inbox_path, e.text)
            await self._persister.wait_written_quietly()
        await self.push_channel(entries)
        await self._server.notify_changed(self.uri)
        await self._server.notify_changed(self.status_uri)

    async def log_changed(self) -> None:
        await self._server.notify_changed(self.uri)

    async def status_changed(self) -> None:
        await self._server.notify_changed(self.status_uri)

    async def push_backlog(self, client: LegacyClient) -> None:
        """A channel client just initialized: push it the window, and the gap below it as one GAP message."""
        if not self.wants_channel(client):
            return
        shown = self._log.window()
        await self.push_channel(shown, [client])
        gap = self._log.gap(shown)
        if gap is not None:
            meta = {
                "type": "GAP",
                "inbox": self._log.agent,
                **{k: str(gap[k]) for k in ("count", "first_seq", "last_seq")},
            }
            await self._server.send_custom(
                client, CHANNEL_METHOD, [{"content": gap["message"], "meta": meta}]
            )

"""``agentd serve inbox``: an agent's message inbox (a JSON Lines file), delivered at least once.

General layout (a module imports only the ones listed below it)::

    server.py   the MCP side and the trio shell: file reads, rewrite recovery,
                the cursor's group commit, the channel push, the tools
    cursor.py   the cursor file: load (and migrate), its check and anchor digests
    files.py    who the inbox belongs to, its file names, the drainer lock and
                its sentinels

The delivery logic itself (sequence numbers, the window, acknowledgements) is
the pure :mod:`agentd.servers._inboxlog`, shared with the webhook server's
store. The user manual is docs/inbox.md; the design, rfcs/0140, 0141, 0144.
"""

from agentd.servers.inbox.server import HELP, SUMMARY, add_arguments, build

__all__ = ["HELP", "SUMMARY", "add_arguments", "build"]

"""``agentd serve inbox``: an agent's message inbox (a JSON Lines file), delivered at least once.

General layout (each module one idea; a module imports only the ones listed
below it, checked by ``lint-imports``)::

    server.py    InboxServer: the parts below wired in order, the resources
                 (inbox://AGENT, /status, /message/{id}) and the tools (ack,
                 ack_through, mark_handled, respond); flags and ``build``
    watcher.py   the change source: inotify on the directory and its parent,
                 the drainer task, a directory moved away or replaced
    tail.py      reading the file into the log: appended bytes, a rewrite
                 caught and recovered from, long lines, refills from disk
    lookup.py    walking the file for pending events of a range or an id,
                 and for every line with an id
    notify.py    telling clients: resources/updated and the channel push
    cursor.py    the cursor file: load (and migrate), its digests, the group
                 commit that makes an acknowledgement durable
    files.py     the agent's name and file names, the drainer lock and its
                 sentinels, the directory as the server holds it

What every decision comes from is the pure log,
:mod:`agentd.servers._inboxlog` (sequence numbers, the window,
acknowledgements); it stays beside the servers' other shared parts because
the webhook server's store keeps its positions with it too. One message's
path: a writer appends a line → inotify wakes the ``watcher`` → ``tail``
feeds the new bytes to the log → ``notify`` pushes the event → a client
calls ``ack`` → the ``cursor`` write covering it is on disk → the tool
returns. The user manual: docs/inbox.md; the design: rfcs/0140, 0141, 0144.
"""

from agentd.servers.inbox.server import HELP, SUMMARY, add_arguments, build

__all__ = ["HELP", "SUMMARY", "add_arguments", "build"]

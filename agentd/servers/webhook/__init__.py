"""``agentd serve webhook``: signed webhook deliveries as watchable MCP resources.

General layout (each module one idea; a module imports only the ones listed
below it, checked by ``lint-imports``)::

    server.py     the MCP side: flags and the TOML file, resources
                  (webhook://NAME/events, webhook://NAME/event/{id}, webhook://status),
                  ack / ack_through, the pending deliveries in resources/list,
                  notifications (both eras)
    listener.py   the HTTP intake on --listen: POST /hooks/NAME, bounded in
                  connections, time and size (h11 on trio)
    store.py      one source's durable log: append + group-committed fdatasync before
                  2xx, dedupe by delivery id, retention with GAP, acknowledgements
                  (the inbox's pure log, ``servers/_inboxlog.py``, keeps the positions)
    delivery.py   what an authentic request means (ids, event names, JSON body) and
                  how a delivery is stored and shown (pure)
    verify.py     each kind's signature / credential check (pure)
    sources.py    sources as configuration; secrets from env vars or files (pure)

One delivery's path: ``listener`` reads the request within its bounds →
``verify.check_headers`` / ``check_body`` → ``delivery.interpret`` →
``store.append`` (written, synced, then shown) → 200 → the ``server``'s
notifier tells subscribers of ``webhook://NAME/events`` and announces the new
``webhook://NAME/event/{id}`` in the resource list. Design: rfcs/0310.
"""

from agentd.servers.webhook.server import HELP, SUMMARY, add_arguments, build

__all__ = ["HELP", "SUMMARY", "add_arguments", "build"]

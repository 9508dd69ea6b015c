"""``agentd serve webhook``: signed webhook deliveries as watchable MCP resources.

General layout (each module one idea; a module imports only the ones listed
below it, checked by ``lint-imports``)::

    server.py     the MCP side: flags and the TOML file, resources
                  (webhook://NAME/events, webhook://NAME/event/{id}, webhook://status),
                  ack / ack_through, the pending deliveries in resources/list,
                  notifications (both eras)
    listener.py   the HTTP intake on --listen: POST /hooks/NAME, bounded in
                  connections, time and size, no client able to hold every slot
                  (a connection still arriving is cut for a new one); a request
                  that arrived whole is handled at once, any other connection
                  read by a task (h11 on trio); /healthz
    store.py      one source's durable log: append + group-committed fdatasync before
                  2xx, dedupe by delivery id, retention with GAP, acknowledgements
                  (the inbox's pure log, ``servers/_inboxlog.py``, keeps the positions)
    wire.py       the common webhook request read in one step (h11's grammar, every
                  doubt left to h11) and answers written (pure)
    delivery.py   what an authentic request means (ids, event names, JSON body) and
                  how a delivery is stored and shown (pure)
    verify.py     each kind's signature / credential check (pure)
    sources.py    sources as configuration; secrets from env vars or files (pure)

One delivery's path: ``listener`` reads the request (``wire.parse_post`` if it
arrived whole, else h11 within its bounds) → ``verify.check_headers`` /
``check_body`` → ``delivery.interpret`` → ``store.stage`` / ``append`` (written,
synced, then shown) → 200 → the ``server``'s
notifier tells subscribers of ``webhook://NAME/events`` and announces the new
``webhook://NAME/event/{id}`` in the resource list. Design: rfcs/0310, rfcs/0368,
rfcs/0373 (the intake under attack, the directory's rules, readiness), rfcs/0374
(replays, keys, bodies that are not JSON).
"""

from agentd.servers.webhook.server import HELP, SUMMARY, add_arguments, build

__all__ = ["HELP", "SUMMARY", "add_arguments", "build"]

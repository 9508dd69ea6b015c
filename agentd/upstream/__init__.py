"""Upstream MCP servers: one supervised connection per configured server.

The supervisor holds exactly one connection per server (stdio or Streamable
HTTP) and every agent reaches the server's tools and resources through it.
Its subscriptions ride on one listen stream per connection, replaced when the
set changes (``subscriptions.py``: the shell; ``uriset.py``: what is wanted,
carried and re-read, pure; rfcs/0260).
Its tools, resources and templates are kept by ``catalog.py``, refreshed on
connect and on list_changed; a list the server does not implement is empty,
and the optional templates list is given up when it is not answered in time
(rfcs/0378).

Public surface:

* :class:`Upstream` — one server: ``run``, ``call_tool``, ``read_resource``,
  ``list_resources``, ``list_resource_templates``, ``subscribe``,
  ``unsubscribe``, and the ``state`` / ``tools`` / ``resources`` /
  ``templates`` views.
* :func:`connect_all` — start one :class:`Upstream` per spec in a nursery.
* :class:`Negotiated` — how a connection was made (transport actually used,
  version, era, what became of the ``server/discover`` probe): the era and
  transport are found once per server and kept (``negotiate.py``, pure;
  ``handshake.py``, the SDK adapter); a stdio server that reads the probe and
  says nothing is found out in a second (``stdio.py``, rfcs/0378).
* :func:`resolve_server_for_uri` and :class:`Catalog` — which server owns a URI.
* :func:`namespaced`, :func:`split_namespaced`, :class:`ToolNameMap` —
  provider-safe ``server__tool`` names.

A server's tools that run only as MCP tasks are kept out of ``tools`` and
reported once (``tooluse.py``, rfcs/0296).
"""

from agentd.upstream.backoff import MAX_CONSECUTIVE_FAILURES, RECONNECT_BACKOFF, RESUBSCRIBE_BACKOFF
from agentd.upstream.connection import (
    INIT_TIMEOUT,
    MAX_READ_BYTES,
    REQUEST_TIMEOUT,
    Negotiated,
    ServerSpecLike,
    Upstream,
    body_size,
    connect_all,
)
from agentd.upstream.naming import ToolNameMap, namespaced, split_namespaced
from agentd.upstream.resolve import Catalog, resolve_server_for_uri

__all__ = [
    "INIT_TIMEOUT",
    "MAX_CONSECUTIVE_FAILURES",
    "MAX_READ_BYTES",
    "RECONNECT_BACKOFF",
    "REQUEST_TIMEOUT",
    "RESUBSCRIBE_BACKOFF",
    "Catalog",
    "Negotiated",
    "ServerSpecLike",
    "ToolNameMap",
    "Upstream",
    "body_size",
    "connect_all",
    "namespaced",
    "resolve_server_for_uri",
    "split_namespaced",
]

"""agentd's bundled MCP servers: ``agentd serve NAME`` (memo, inbox, files, kube, webhook).

The machinery they share (both subscription eras, event-log rings, source
readiness, stdio/HTTP transports, the plug-in contract) is in
:mod:`agentd.servers._base`; each server is one module named for it, or a
package of one-idea modules (``webhook/``) whose ``__init__`` is its map.
"""

from agentd.servers._base import SERVERS, main

__all__ = ["SERVERS", "main"]

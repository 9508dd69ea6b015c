"""agentd's bundled MCP servers: ``agentd serve NAME`` (memo, inbox, files, kube).

The machinery they share (both subscription eras, event-log rings, source
readiness, stdio/HTTP transports, the plug-in contract) is in
:mod:`agentd.servers._base`; each server is one module named for it.
"""

from agentd.servers._base import SERVERS, main

__all__ = ["SERVERS", "main"]

"""Defaults and choices that a setting configures and a lower layer applies (upstream connections).

The settings (:mod:`agentd.config`) and the upstream connections both import
them from here, so each is defined once and the upstream layer never imports
the settings.
"""

from __future__ import annotations

from typing import Literal

TokenAuthMethod = Literal["client_secret_basic", "client_secret_post"]
"""How an OAuth client authenticates at the token endpoint (``token_endpoint_auth_method``)."""

#: Default cap on one resource read: large enough for any sane state
#: document, small enough that a runaway resource cannot balloon memory.
DEFAULT_MAX_READ_BYTES = 8 * 1024 * 1024

#: Seconds one upstream tool call may take (``tool_timeout``; per server ``timeout``).
DEFAULT_TOOL_TIMEOUT = 30.0

#: Seconds for a server's start + handshake + first catalog fetch (per server ``startup_timeout``).
DEFAULT_STARTUP_TIMEOUT = 15.0

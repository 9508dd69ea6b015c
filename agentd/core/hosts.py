"""Host names as the HTTP listeners judge them: loopback, wildcard, and the host of a ``Host`` header.

Shared by the health address (agentd/observe/health.py) and the bundled
servers' ``--http`` guard (agentd/servers/_httpguard.py).
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """``localhost`` or a loopback address (``127.0.0.0/8``, ``::1``)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def is_wildcard(host: str) -> bool:
    """An unspecified address (``0.0.0.0``, ``::``): a bind on every interface."""
    try:
        return ipaddress.ip_address(host).is_unspecified
    except ValueError:
        return False


def host_of(value: str) -> str:
    """The host name of a ``Host`` header value (``[::1]:80`` -> ``::1``, ``a.b:80`` -> ``a.b``), lowercased."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        return value[1:end] if end > 0 else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value

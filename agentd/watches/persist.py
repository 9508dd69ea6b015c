"""``--watch-state`` as the watch manager uses it: spec names and what a restart tells a session.

The file itself (format, atomic writes, the lock, a damaged file moved
aside) is :mod:`agentd.watches.state`.
"""

from __future__ import annotations

import html
from collections.abc import Iterable
from typing import Final

#: ``--watch-state`` names of declared-route stages start with this (watch names cannot hold ``:``).
ROUTE_SPEC_PREFIX: Final = "route:"

#: The instruction after a restore notice.
RESTORE_INSTRUCTION: Final = (
    "agentd restarted and started again the watches you had set up (listed above). "
    "Changes made while it was down follow as watch events. "
    "If nothing here needs action, answer with exactly NO_REPLY and nothing else."
)


def route_spec_name(route_id: str, uri: str) -> str:
    """The ``--watch-state`` name of a declared route's stage for ``uri``."""
    return f"{ROUTE_SPEC_PREFIX}{route_id}:{uri}"


def render_restore(lines: Iterable[str]) -> str:
    """The restore notice: a ``<watches-restored>`` block, one watch per line, then the instruction."""
    body = "\n".join(html.escape(line, quote=False) for line in lines)
    return f"<watches-restored>\n{body}\n</watches-restored>\n{RESTORE_INSTRUCTION}"

"""What a watch filter may call: the read-only catalog, run on the event loop for the sandbox."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final, TypeAlias

#: An async catalog function: called with the filter's own arguments (checked
#: by the function), its result goes back into the sandbox.
AsyncCatalogFunction: TypeAlias = "Callable[..., Awaitable[object]]"

#: Bound on one catalog call a filter makes (``read_resource``, a read-only
#: tool), on top of the filter run's own time limit (which usually ends it
#: first, rfcs/0151): 5 s is far above a healthy call (~1 ms) and well below
#: the upstream's own 30 s request timeout, so a hung server costs a filter
#: an error line, not half a minute, even with a long ``filter_timeout``.
CATALOG_CALL_TIMEOUT_SECS: Final = 5.0

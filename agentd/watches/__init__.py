"""The watch stage: read → events → sandboxed filter → dedupe → debounce → notice.

Building blocks the supervisor plugs into a self-subscribe route (ARCHITECTURE
decision 8, seed ADR 0005):

* :mod:`agentd.watches.limits`   ``WatchLimits``, every number the stage obeys.
* :mod:`agentd.watches.extract`  pure: resource reads → event dicts (event-log
  ``seq``/``GAP`` or state diff), ``changed_paths``, serializable baselines.
* :mod:`agentd.watches.sandbox`  the ``on_event`` filter in ``pydantic-monty``
  (imports trio and the sandbox; import it explicitly).
* :mod:`agentd.watches.notices`  pure: default lines, per-object dedupe,
  trailing debounce, the notice text, ``NO_REPLY`` detection.
* :mod:`agentd.watches.state`    the ``--watch-state`` file (atomic writes).
* :mod:`agentd.watches.stage`    ``WatchStage``: all of the above for one watch
  (imports the sandbox).

This package's ``__init__`` imports nothing heavy on purpose: the pure parts
load without trio or the sandbox.
"""

from __future__ import annotations

__all__: list[str] = []

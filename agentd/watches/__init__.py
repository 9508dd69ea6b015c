"""The watch stage: read → events → sandboxed filter → dedupe → debounce → notice.

A watch is a self-subscribe route with an extraction and filter stage
(ARCHITECTURE decision 8, seed ADR 0005); a declared route can have the same
stage. General layout (each module one idea; a module imports only the ones
listed below it, checked by ``lint-imports``)::

    manager.py   WatchManager: every watch's lifecycle (watch_start / watch_stop /
                 watch_list, restore, caps, the owner exiting, the subscription's
                 state) and the host of the parts' tasks
    staged.py    the stages of declared routes with extract / on_event, per
                 (route id, URI)
    watch.py     one watch as the manager tracks it, and its task: wake → re-read →
                 stage → debounce → a notice posted to the reactor
    catalog.py   the sandbox's host side: what a filter may call (read-only) and
                 the pool its runs use
    persist.py   --watch-state as the manager keeps it: the writer task, spec
                 names, the restore notice
    stage.py     WatchStage: the steps below for one watch, no I/O; StagedRoute
    sandbox.py   the on_event filter in pydantic-monty (imports the sandbox;
                 loaded only when a watch filters)
    notices.py   pure: default lines, per-object dedupe, trailing debounce, the
                 notice text, NO_REPLY detection
    state.py     the --watch-state file (format, atomic writes, the lock)
    extract.py   pure: resource reads → event dicts (event-log seq/GAP or state
                 diff), changed paths, serializable baselines
    limits.py    WatchLimits, every number the stage obeys

One change's path: the reactor's route for the watch is due →
``WatchManager.on_changed`` wakes the watch's task → it re-reads the resource
→ ``WatchStage.process_read`` extracts and filters → the debounce deadline
passes → a ``WatchNotice`` goes into the reactor's channel → one turn of the
owning session.

This package's ``__init__`` imports nothing heavy on purpose: the pure parts
load without trio or the sandbox.
"""

from __future__ import annotations

__all__: list[str] = []

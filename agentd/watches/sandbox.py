"""The ``on_event`` filter, run in the ``pydantic-monty`` sandbox.

Size: one security surface (source checks, limits, read-only catalog, error spelling), kept in one place.

A watch may carry ``on_event``: Python source the model wrote. It runs once per
event in the watch's own sandbox session, with ``event`` bound to the event
dict, so variables it sets survive to the next event. Its result decides the
event's notice lines (see :class:`FilterOutcome`).

Safety model
------------
* The sandbox (Monty) is a separate interpreter in a worker subprocess: no
  filesystem, network, environment, subprocesses or host objects. Isolation is
  at the language level only (same uid, no seccomp), so the pod runs non-root.
* Per event: :attr:`WatchLimits.filter_time_secs` for the **whole run**, time
  spent waiting in catalog calls included (see "Time" below), a heap cap, a
  recursion cap, and ``sleep`` returning at once (Monty's time limit does not
  count sleeping, so a sleeping filter would otherwise hold its thread).
* The only host functions are the **read-only catalog** the supervisor hands
  in (``read_resource``, ``list_resources``, tools annotated read-only), at most
  :attr:`WatchLimits.filter_tool_calls` calls per event. Names in ``denied``
  (mutating tools, and always ``watch_start``/``watch_stop``/``subscribe``/
  ``unsubscribe``) are bound to stubs that refuse: the call is an error in the
  filter and nothing happens on the host. The event's outcome is an error even
  if the filter catches the refusal, and the ``watch_start`` dry run refuses a
  filter that made such a call, caught or not.
* A session that hit the time or memory limit, or whose worker died, is thrown
  away; the next event gets a fresh session. **The filter's variables are lost
  then** (the error says so): Monty gives no guarantee about a heap it stopped
  mid-operation, and a dump after every event would cost more than the filter.

Time
----
Monty's own clock counts only time the sandbox executes, never time it waits
for the host. So each run has a wall-clock deadline of ``filter_time_secs``
from its start, and:

* a catalog call made after the deadline is refused with ``TimeoutError``; one
  in flight is bounded by the time left (:func:`run_deadline` tells the
  catalog's implementation, in the calling thread, when the run must end);
* a run whose catalog call ran out of time is an error even if the filter
  caught the ``TimeoutError`` (its session is kept: nothing was interrupted);
* a run still going :data:`WATCHDOG_GRACE_SECS` after its deadline (a filter
  that caught the ``TimeoutError`` and kept computing) has its worker killed:
  the run is an error and the filter's variables are reset.

Threads
-------
Monty calls block, so :meth:`WatchFilter.run` runs them in a worker thread
(``trio.to_thread.run_sync``) and never blocks the reactor. Each filter has
its own thread limiter (one run at a time per watch) and nothing is shared
between filters, so one watch's slow filter never delays another's, in this
session or any other. Catalog callables are called in that worker thread; the
supervisor's wrappers re-enter trio with ``trio.from_thread.run``. Cancelling
``run`` waits for the feed to end, which the deadline bounds.
"""

from __future__ import annotations

import contextlib
import functools
import heapq
import os
import re
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal, NoReturn, TypeAlias, TypedDict, TypeVar, Unpack

import trio
from pydantic_monty import (
    Monty,
    MontyCrashedError,
    MontyError,
    MontyRuntimeError,
    MontySession,
    MontySyntaxError,
    OSPolicy,
    ResourceLimits,
)

from agentd.core.errors import FilterRejected as FilterRejected  # re-exported
from agentd.core.errors import SandboxError
from agentd.core.jsonvalue import JSONObject
from agentd.watches.extract import Event, Shape, compact_json
from agentd.watches.limits import WatchLimits

FilterOutcomeKind: TypeAlias = Literal["dropped", "lines", "error"]
"""What a filter run decided: drop the event, emit lines, or it failed."""

#: A host function a filter may call. The sandbox passes whatever arguments the
#: filter's code gives (the function checks them) and hands the result back into
#: Monty, whose API leaves both sides untyped: this is that boundary.
CatalogFunction: TypeAlias = Callable[..., Any]

_T = TypeVar("_T")

#: Self-tools a filter may never call, whatever the catalog says: a filter
#: cannot start or stop watches or subscriptions (seed ADR 0005, invariant 2).
ALWAYS_DENIED: Final = frozenset({"watch_start", "watch_stop", "subscribe", "unsubscribe"})

#: One notice line from a filter is cut here; a filter that returns a huge
#: value still yields one readable line, and the agent can read the resource.
MAX_LINE_CHARS: Final = 1000

#: Lines one event may produce (printed + returned); the rest become "+N more lines".
MAX_LINES_PER_EVENT: Final = 20

#: Printed output kept per event; the rest is ignored (without failing the filter).
MAX_PRINT_CHARS: Final = 64 * 1024

#: How long a filter waits for a free sandbox worker before the event fails.
#: Workers are held one per live watch, so waiting means the pool is too small
#: (raise ``max_sessions``), not that a worker is about to come back.
CHECKOUT_TIMEOUT_SECS: Final = 10.0

#: Parent-side backstop per sandbox turn: a worker that neither finishes nor
#: stops itself by then is killed. Must exceed any ``filter_time_secs`` in use
#: plus Monty's own 1 s grace.
DEFAULT_REQUEST_TIMEOUT_SECS: Final = 30.0

#: Monty caps external calls + name lookups per *checkout* (default 1000), which
#: a long-lived watch session would exhaust; agentd counts catalog calls per
#: event itself, so the per-checkout cap is set out of reach.
_UNBOUNDED_SUSPENSIONS: Final = 2**62

#: The repr a Python function gets when code mode passes it where text belongs.
_FUNCTION_REPR: Final = re.compile(r"^\s*<(?:bound method|function|built-in function)\b.*>\s*$", re.DOTALL)

#: Builtin exception types a catalog error keeps inside the sandbox (so a
#: filter can catch e.g. ``KeyError``); anything else becomes ``RuntimeError``.
_PASSTHROUGH_ERRORS: Final = frozenset(
    {
        KeyError,
        ValueError,
        TypeError,
        LookupError,
        IndexError,
        PermissionError,
        TimeoutError,
        FileNotFoundError,
    }
)

_SESSION_POLICY: Final[OSPolicy] = {"sleep": "zero"}

#: A run still going this long after its deadline has its sandbox worker
#: killed. Monty stops a filter that only computes at the limit by itself (a
#: ``TimeoutError`` with a precise position); the grace lets that happen first,
#: even on a loaded machine, and bounds a filter that caught a catalog call's
#: ``TimeoutError`` and went on computing.
WATCHDOG_GRACE_SECS: Final = 0.5

#: Part of the message of the ``TimeoutError`` a catalog call raises when the
#: run's time is up (so it is told apart from Monty's own time limit).
_OUT_OF_TIME: Final = "the filter's time per event ran out"

_run_state = threading.local()


def run_deadline() -> float | None:
    """The ``time.monotonic()`` deadline of the filter run in this thread, or ``None``.

    Catalog functions are called in the thread of the run that calls them;
    an implementation that waits (a tool call, a read) bounds its wait by this.
    """
    deadline: float | None = getattr(_run_state, "deadline", None)
    return deadline


def call_on_loop(afn: Callable[[], Awaitable[_T]], *, cap: float) -> _T:
    """Run ``afn`` on the trio loop from a filter's worker thread, and wait for it.

    The wait is bounded by what is left of the calling run's time
    (:func:`run_deadline`) and by ``cap`` seconds, whichever ends first.

    Raises:
        TimeoutError: the bound passed first (``afn`` is cancelled).
    """
    deadline = run_deadline()
    timeout = cap if deadline is None else min(cap, max(0.0, deadline - time.monotonic()))

    async def bounded() -> _T:
        with trio.fail_after(timeout):
            return await afn()

    try:
        return trio.from_thread.run(bounded)
    except trio.TooSlowError:
        raise TimeoutError(f"no answer within {timeout:.3g} s") from None


@dataclass(frozen=True, slots=True)
class FilterOutcome:
    """The result of running ``on_event`` on one event.

    Attributes:
        kind: ``dropped`` (the filter left ``None`` and printed nothing),
            ``lines`` (notice lines in :attr:`lines`), or ``error``.
        lines: Printed lines first, then the value's line(s). For an error, the
            lines printed before it failed.
        error: For ``error``: what failed, with line and column when known.
        tool_calls: Catalog calls made.
        session_reset: The session was thrown away (limit hit or worker died);
            the next event starts with no variables.
        seconds: Wall time of the run.
    """

    kind: FilterOutcomeKind
    lines: tuple[str, ...] = ()
    error: str | None = None
    tool_calls: int = 0
    session_reset: bool = False
    seconds: float = 0.0


# ----------------------------------------------------------------- the pool


class ValidateOptions(TypedDict, total=False):
    """What :meth:`FilterPool.validate` checks a source against, besides the source (see its arguments)."""

    limits: WatchLimits | None
    catalog_names: Collection[str]
    denied: Collection[str]
    sample: Event | None


class FilterPool:
    """One Monty worker pool shared by every watch filter of the process.

    Use as a context manager (``with FilterPool() as pool:``); it starts one
    warm worker and grows to ``max_sessions``. Each live watch holds one worker
    for its persistent session.

    There is no limiter shared by the filters: each :class:`WatchFilter` runs
    in its own thread (one run at a time), so a filter waiting on a slow tool
    never holds up another watch. Threads in use are bounded by the filters
    alive, which ``max_sessions`` bounds.

    Args:
        max_sessions: Cap on live sandbox workers (= watches with a filter).
        request_timeout: See :data:`DEFAULT_REQUEST_TIMEOUT_SECS`.
    """

    def __init__(
        self,
        *,
        max_sessions: int = 32,
        request_timeout: float = DEFAULT_REQUEST_TIMEOUT_SECS,
    ) -> None:
        self._monty = Monty(
            min_processes=1,
            max_processes=max_sessions,
            checkout_timeout=CHECKOUT_TIMEOUT_SECS,
            request_timeout=request_timeout,
        )
        self._entered = False

    def __enter__(self) -> FilterPool:
        self._monty.__enter__()
        self._entered = True
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop every worker. Filters still open fail their next run."""
        if self._entered:
            self._entered = False
            self._monty.__exit__(None, None, None)

    def checkout(self, limits: WatchLimits) -> MontySession:
        """A new, entered sandbox session with ``limits`` (the caller exits it)."""
        if not self._entered:
            raise SandboxError("the filter pool is closed; open it with `with FilterPool() as pool:`")
        session = self._monty.checkout(
            script_name="on_event",
            limits=_resource_limits(limits),
            os_policy=_SESSION_POLICY,
        )
        session.__enter__()
        return session

    # ---------------------------------------------------------- validation

    def validate(
        self,
        source: object,
        *,
        limits: WatchLimits | None = None,
        catalog_names: Collection[str] = (),
        denied: Collection[str] = (),
        sample: Event | None = None,
    ) -> str:
        """Check ``on_event`` at ``watch_start``; return the source text.

        The source must be text; it is compiled and dry-run once on ``sample``
        (default :func:`sample_event`) in a throwaway session where catalog
        functions return ``None`` and do no I/O. Missing keys and other
        run-time errors on the sample are fine: the sample is not a real event.

        Raises:
            FilterRejected: not text (e.g. a function object), empty, a
                ``SyntaxError``, a ``NameError``, a call to a denied function
                (whether or not the filter caught the refusal), or the dry run
                hit the time or memory limit. The message has the line and
                column when known and says how to fix it.
        """
        text = check_source(source)
        limits = limits or WatchLimits()
        denied_all = ALWAYS_DENIED | set(denied)
        attempted: list[str] = []

        def stub(*_args: object, **_kwargs: object) -> None:
            return None

        lookup: dict[str, CatalogFunction] = {name: stub for name in catalog_names if name not in denied_all}
        for name in denied_all:
            lookup[name] = _denier(name, attempted)
        session = self.checkout(limits)
        try:
            session.feed_run(
                text,
                inputs={"event": sample if sample is not None else sample_event()},
                external_lookup=lookup,
                print_callback=_discard_print,
            )
        except MontySyntaxError as exc:
            line, column = _position(exc)
            raise FilterRejected(
                f"on_event has a syntax error{_at(line, column)}: {exc.display('msg')}; "
                "fix the source (it is run as a module, with `event` bound to the event dict)",
                line=line,
                column=column,
            ) from None
        except MontyRuntimeError as exc:
            inner = exc.exception()
            line, column = _position(exc)
            if attempted:
                raise FilterRejected(
                    f"on_event calls {attempted[0]!r}{_at(line, column)}, which a watch filter may not use: "
                    "filters are read-only; act on the event in your turn instead",
                    line=line,
                    column=column,
                ) from None
            if isinstance(inner, NameError):
                raise FilterRejected(
                    f"on_event{_at(line, column)}: {exc.display('type-msg')}; "
                    "define the name in the source or use one the filter has: `event`"
                    + "".join(f", `{n}`" for n in sorted(k for k in lookup if k not in denied_all))
                    + (
                        " (it looks like a function name: pass the function's source text instead)"
                        if text.strip().isidentifier()
                        else ""
                    ),
                    line=line,
                    column=column,
                ) from None
            if isinstance(inner, TimeoutError | MemoryError):
                raise FilterRejected(
                    f"on_event{_at(line, column)} hit the sandbox limit on a sample event: "
                    f"{exc.display('type-msg')}; a filter must finish within "
                    f"{limits.filter_time_secs:g} s and {limits.filter_memory_bytes // 2**20} MiB per event",
                    line=line,
                    column=column,
                ) from None
            # KeyError, TypeError... on the sample are expected: it is not a real event.
        except MontyError as exc:
            raise FilterRejected(f"on_event could not be checked: {exc}") from None
        finally:
            _exit_quietly(session)
        if attempted:
            # The filter caught the refusal and carried on: every real event would fail the same way.
            raise FilterRejected(
                f"on_event calls {attempted[0]!r}, which a watch filter may not use (the call was refused "
                "even though the filter caught the error): filters are read-only; remove the call and act "
                "on the event in your turn instead"
            )
        return text

    async def avalidate(self, source: object, **options: Unpack[ValidateOptions]) -> str:
        """:meth:`validate` in a worker thread, for callers on the reactor."""
        # Its own limiter: a dry run never waits behind another watch's filter.
        return await trio.to_thread.run_sync(
            functools.partial(self.validate, source, **options), limiter=trio.CapacityLimiter(1)
        )


def check_source(source: object) -> str:
    """Return ``source`` if it is usable ``on_event`` text, else raise :class:`FilterRejected`.

    Refuses non-text values and the ``repr`` of a function (what a function
    object becomes when code mode passes it as a tool argument).
    """
    if callable(source) or (isinstance(source, str) and _FUNCTION_REPR.match(source)):
        raise FilterRejected(
            f"on_event must be Python source text, not a function ({_short(source)}): "
            'pass the body as a string, e.g. on_event=\'event["type"] if event["type"] != "MODIFIED" else None\''
        )
    if not isinstance(source, str):
        raise FilterRejected(
            f"on_event must be Python source text (a str), got {type(source).__name__} {_short(source)}; "
            "pass the filter code as a string, or None for the default lines"
        )
    if not source.strip():
        raise FilterRejected(
            "on_event is empty: pass Python source that leaves a value (or None to drop the event), "
            "or pass None to use the default lines"
        )
    return source


def sample_event(*, watch: str = "sample", uri: str = "sample://watch", shape: Shape = "event-log") -> Event:
    """A plausible event for the ``watch_start`` dry run (values are placeholders)."""
    obj: JSONObject = {
        "kind": "Sample",
        "metadata": {"name": "sample", "namespace": "default", "uid": "00000000-sample"},
        "status": {"phase": "Ready"},
    }
    if shape == "state":
        return {
            "watch": watch,
            "uri": uri,
            "type": "ADDED",
            "key": "sample",
            "old": None,
            "new": obj,
            "changed": None,
        }
    return {
        "watch": watch,
        "uri": uri,
        "type": "ADDED",
        "seq": 1,
        "object": obj,
        "old": None,
        "changed": None,
    }


# --------------------------------------------------------------- the filter


class WatchFilter:
    """One watch's ``on_event`` with its persistent sandbox session.

    Args:
        source: Validated ``on_event`` text (see :meth:`FilterPool.validate`).
        pool: The shared :class:`FilterPool`.
        limits: Per-event limits (time, memory, recursion, catalog calls).
        catalog: Read-only host functions by the name the filter calls them
            with. Each is called in a worker thread, with the filter's
            arguments; its return value must be convertible (JSON-like).
        denied: Further names (e.g. mutating tools) the filter must not call;
            :data:`ALWAYS_DENIED` is always added.

    The session is created on the first :meth:`run` and replaced after a run
    that hit a limit. Call :meth:`aclose` (or :meth:`close`) when the watch stops.
    """

    def __init__(
        self,
        source: str,
        *,
        pool: FilterPool,
        limits: WatchLimits | None = None,
        catalog: Mapping[str, CatalogFunction] | None = None,
        denied: Collection[str] = (),
    ) -> None:
        self.source = check_source(source)
        self.limits = limits or WatchLimits()
        self._pool = pool
        self._catalog = dict(catalog or {})
        self._denied = ALWAYS_DENIED | set(denied)
        for name in (
            self._denied & self._catalog.keys()
        ):  # a denied name never reaches the host, even if catalogued
            del self._catalog[name]
        self._session: MontySession | None = None
        self._lock = trio.Lock()
        # This filter's own: runs of other filters never wait for it, nor it for them.
        self._limiter = trio.CapacityLimiter(1)
        self._closed = False
        self.resets = 0

    async def run(self, event: Event) -> FilterOutcome:
        """Run the filter on one event in a worker thread (one run at a time per watch)."""
        async with self._lock:
            if self._closed:
                return FilterOutcome(kind="error", error="the watch filter is closed")
            return await trio.to_thread.run_sync(self.run_sync, event, limiter=self._limiter)

    async def run_batch(self, events: Sequence[Event]) -> list[FilterOutcome]:
        """Run the filter on each event of one read, in order, in one worker-thread hop.

        Same results as calling :meth:`run` per event; one thread hop per read
        instead of per event (the hop costs more than a warm filter run).
        """
        if not events:
            return []
        async with self._lock:
            if self._closed:
                return [FilterOutcome(kind="error", error="the watch filter is closed") for _ in events]
            return await trio.to_thread.run_sync(
                lambda: [self.run_sync(ev) for ev in events], limiter=self._limiter
            )

    def run_sync(self, event: Event) -> FilterOutcome:
        """Run the filter on one event in the calling thread (blocks; see :meth:`run`).

        The whole run, catalog calls included, is bounded by
        :attr:`WatchLimits.filter_time_secs` (see the module docstring, "Time").
        """
        started = time.perf_counter()
        deadline = time.monotonic() + self.limits.filter_time_secs
        watchdog = _Watchdog(deadline + WATCHDOG_GRACE_SECS)
        calls = _CallBudget(
            self.limits.filter_tool_calls, deadline, self.limits.filter_time_secs, on_call=watchdog.arm
        )
        lookup: dict[str, CatalogFunction] = {
            name: calls.wrap(name, fn) for name, fn in self._catalog.items()
        }
        for name in self._denied:
            lookup[name] = _denier(name, calls.denied)
        printed = _PrintSink()
        reset = False
        _run_state.deadline = deadline
        try:
            if self._session is None:
                self._session = self._pool.checkout(self.limits)
            watchdog.pid = self._session.worker_pid
            value = self._session.feed_run(
                self.source, inputs={"event": event}, external_lookup=lookup, print_callback=printed
            )
        except MontyRuntimeError as exc:
            inner = exc.exception()
            ours = calls.timed_out and _OUT_OF_TIME in str(inner)
            if isinstance(inner, TimeoutError | MemoryError) and not ours:
                reset = self._discard()
            if calls.denied:
                error = _denied_message(calls.denied[0], self._catalog)
            elif calls.over_limit:
                error = _over_limit_message(self.limits)
            elif calls.timed_out:
                error = _out_of_time_message(self.limits, calls.timed_out, reset=reset)
            else:
                error = _runtime_message(exc, reset=reset, limits=self.limits)
            return self._failed(error, printed, calls, reset, started)
        except MontySyntaxError as exc:
            line, column = _position(exc)
            return self._failed(
                f"on_event has a syntax error{_at(line, column)}: {exc.display('msg')}",
                printed,
                calls,
                False,
                started,
            )
        except MontyCrashedError as exc:
            reset = self._discard()
            if watchdog.fired:
                error = _out_of_time_message(self.limits, calls.timed_out, reset=reset, killed=True)
            else:
                error = f"the filter's sandbox worker died ({exc}); its variables were reset"
            return self._failed(error, printed, calls, reset, started)
        except (MontyError, SandboxError, TimeoutError) as exc:
            # TimeoutError here is the pool's checkout timeout: no free worker.
            return self._failed(f"on_event could not run: {exc}", printed, calls, False, started)
        finally:
            _run_state.deadline = None
            if watchdog.stop():
                # Killed just as the feed returned: the worker is gone either way.
                reset = self._discard() or reset
        if calls.denied:
            return self._failed(
                _denied_message(calls.denied[0], self._catalog), printed, calls, False, started
            )
        if calls.over_limit:
            return self._failed(_over_limit_message(self.limits), printed, calls, False, started)
        if calls.timed_out or watchdog.fired:
            # The filter caught the TimeoutError: the event still took too long.
            return self._failed(
                _out_of_time_message(self.limits, calls.timed_out, reset=reset, killed=watchdog.fired),
                printed,
                calls,
                reset,
                started,
            )
        lines = printed.lines()
        if value is not None:
            lines.extend(_value_lines(value))
        lines = _cap_lines(lines)
        seconds = time.perf_counter() - started
        if not lines:
            return FilterOutcome(kind="dropped", tool_calls=calls.count, seconds=seconds)
        return FilterOutcome(kind="lines", lines=tuple(lines), tool_calls=calls.count, seconds=seconds)

    def _failed(
        self, error: str, printed: _PrintSink, calls: _CallBudget, reset: bool, started: float
    ) -> FilterOutcome:
        return FilterOutcome(
            kind="error",
            lines=tuple(_cap_lines(printed.lines())),
            error=error,
            tool_calls=calls.count,
            session_reset=reset,
            seconds=time.perf_counter() - started,
        )

    def _discard(self) -> bool:
        session, self._session = self._session, None
        if session is None:
            return False
        _exit_quietly(session)
        self.resets += 1
        return True

    def close(self) -> None:
        """Return the session's worker to the pool (no run may be in flight)."""
        self._closed = True
        self._discard()

    async def aclose(self) -> None:
        """Wait for a run in flight, then :meth:`close`."""
        async with self._lock:
            self.close()


# ------------------------------------------------------------------ helpers


def _resource_limits(limits: WatchLimits) -> ResourceLimits:
    return {
        "max_feed_duration_secs": limits.filter_time_secs,
        "max_memory": limits.filter_memory_bytes,
        "max_recursion_depth": limits.filter_recursion_depth,
        "max_suspensions": _UNBOUNDED_SUSPENSIONS,
        "max_total_sleep_secs": 0.0,
    }


class _CallBudget:
    """Counts catalog calls for one event, refuses those over the limit, and keeps the deadline.

    ``timed_out`` names the call that ran out of the run's time (``None`` if none did).
    """

    def __init__(
        self, limit: int, deadline: float, seconds: float, *, on_call: Callable[[], None] = lambda: None
    ) -> None:
        self.limit = limit
        self._on_call = on_call
        self.count = 0
        self.over_limit = False
        self.denied: list[str] = []
        self.deadline = deadline
        self.seconds = seconds
        self.timed_out: str | None = None
        self._lock = threading.Lock()

    def _out_of_time(self, name: str) -> TimeoutError:
        self.timed_out = self.timed_out or name
        return TimeoutError(f"{name}: {_OUT_OF_TIME} ({self.seconds:g} s, tool calls included)")

    def wrap(self, name: str, fn: CatalogFunction) -> CatalogFunction:
        def call(*args: object, **kwargs: object) -> object:
            with self._lock:
                if self.count >= self.limit:
                    self.over_limit = True
                    raise RuntimeError(
                        f"{name}: this filter already made {self.limit} catalog calls for this event (the limit)"
                    )
                self.count += 1
            self._on_call()
            if time.monotonic() >= self.deadline:
                raise self._out_of_time(name)
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                if time.monotonic() >= self.deadline:
                    raise self._out_of_time(name) from None
                if type(exc) in _PASSTHROUGH_ERRORS:
                    raise type(exc)(f"{name}: {exc}") from None
                # Host exception types do not cross into the sandbox; keep the message.
                raise RuntimeError(f"{name} failed: {exc}") from None
            if time.monotonic() >= self.deadline:
                raise self._out_of_time(name)
            return result

        return call


class _Watchdog:
    """Kills the sandbox worker of a run that is still going at ``at`` (``time.monotonic()``).

    Armed by the run's first catalog call (:meth:`arm`): without catalog calls,
    Monty's own clock is the run's whole time and its limit stops the run.
    :meth:`stop` disarms it and says whether it fired. The waiting is done by
    one shared thread (:class:`_Reaper`), so arming costs a heap push, not a
    thread.
    """

    def __init__(self, at: float) -> None:
        self.at = at
        self.pid: int | None = None
        """The worker to kill (set once the run has its session)."""
        self.fired = False
        self._lock = threading.Lock()
        self._running = True
        self._armed = False

    def arm(self) -> None:
        with self._lock:
            if self._armed or not self._running:
                return
            self._armed = True
        _REAPER.arm(self)

    @property
    def running(self) -> bool:
        return self._running

    def fire(self) -> None:
        with self._lock:
            if not self._running or self.pid is None:
                return
            self.fired = True
            # The pool replaces a dead worker; the run sees MontyCrashedError at once.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def stop(self) -> bool:
        with self._lock:
            self._running = False
        return self.fired


class _Reaper:
    """One daemon thread that fires armed :class:`_Watchdog` s at their time (started on first use)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, _Watchdog]] = []
        self._count = 0
        self._thread: threading.Thread | None = None

    def arm(self, dog: _Watchdog) -> None:
        with self._cond:
            self._count += 1
            heapq.heappush(self._heap, (dog.at, self._count, dog))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentd-filter-watchdog", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while True:
                if not self._heap:
                    self._cond.wait()
                    continue
                at, _, dog = self._heap[0]
                if not dog.running:
                    heapq.heappop(self._heap)  # its run ended in time
                    continue
                left = at - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                heapq.heappop(self._heap)
                dog.fire()


_REAPER: Final = _Reaper()


def _denier(name: str, attempted: list[str]) -> CatalogFunction:
    def refuse(*_args: object, **_kwargs: object) -> NoReturn:
        attempted.append(name)
        raise PermissionError(f"{name} is not available in a watch filter: filters are read-only")

    return refuse


def _denied_message(name: str, catalog: Mapping[str, object]) -> str:
    allowed = ", ".join(sorted(catalog)) or "none"
    return (
        f"on_event called {name!r}, which a watch filter may not use: filters are read-only "
        f"and cannot start or stop watches (available: {allowed}); nothing was changed"
    )


def _out_of_time_message(
    limits: WatchLimits, during: str | None, *, reset: bool, killed: bool = False
) -> str:
    where = f"; it ran out while waiting for {during!r}" if during else ""
    if killed:
        where += f" and went on running, so its sandbox was stopped {WATCHDOG_GRACE_SECS:g} s later"
    suffix = "; the filter's variables were reset" if reset else ""
    return (
        f"on_event stopped after the {limits.filter_time_secs:g} s limit per event "
        f"(time spent in tool calls counts){where}{suffix}"
    )


def _over_limit_message(limits: WatchLimits) -> str:
    return (
        f"on_event made more than {limits.filter_tool_calls} catalog calls for one event; "
        "the extra calls were refused (keep results in a variable to reuse them across events)"
    )


class _PrintSink:
    """Collects printed output up to :data:`MAX_PRINT_CHARS`."""

    def __init__(self) -> None:
        self._parts: list[str] = []
        self._size = 0

    def __call__(self, _stream: Literal["stdout", "stderr"], text: str) -> None:
        room = MAX_PRINT_CHARS - self._size
        if room > 0:
            self._parts.append(text[:room])
            self._size += min(len(text), room)

    def lines(self) -> list[str]:
        return [line.rstrip() for line in "".join(self._parts).splitlines() if line.strip()]


def _discard_print(_stream: Literal["stdout", "stderr"], _text: str) -> None:
    return None


def _value_lines(value: object) -> list[str]:
    if isinstance(value, str):
        return [line.rstrip() for line in value.splitlines() if line.strip()]
    return [compact_json(value)]


def _cap_lines(lines: list[str]) -> list[str]:
    out = [line if len(line) <= MAX_LINE_CHARS else line[: MAX_LINE_CHARS - 1] + "…" for line in lines]
    if len(out) > MAX_LINES_PER_EVENT:
        extra = len(out) - (MAX_LINES_PER_EVENT - 1)
        out = [*out[: MAX_LINES_PER_EVENT - 1], f"+{extra} more lines"]
    return out


def _position(exc: MontySyntaxError | MontyRuntimeError) -> tuple[int | None, int | None]:
    """Line and column of the innermost frame in the filter's own source."""
    frames = exc.traceback()
    for frame in reversed(frames):
        if frame.filename.startswith("<python-input"):
            return frame.line, frame.column
    if frames:
        return frames[-1].line, frames[-1].column
    return None, None


def _at(line: int | None, column: int | None) -> str:
    if line is None:
        return ""
    return f" at line {line}, column {column}" if column is not None else f" at line {line}"


def _runtime_message(exc: MontyRuntimeError, *, reset: bool, limits: WatchLimits) -> str:
    line, column = _position(exc)
    inner = exc.exception()
    what = exc.display("type-msg")
    if isinstance(inner, TimeoutError):
        what = f"stopped after the {limits.filter_time_secs:g} s limit per event ({what})"
    elif isinstance(inner, MemoryError):
        what = f"stopped at the {limits.filter_memory_bytes // 2**20} MiB memory limit ({what})"
    suffix = "; the filter's variables were reset" if reset else ""
    return f"on_event failed{_at(line, column)}: {what}{suffix}"


def _exit_quietly(session: MontySession) -> None:
    # A dead worker cannot be returned; the pool replaces it on its own.
    with contextlib.suppress(MontyError):
        session.__exit__(None, None, None)


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"

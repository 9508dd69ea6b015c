"""``agentd serve kube``: Kubernetes objects as an event-log, pushed by ``kubectl get -w``.

Size: over 600 lines because one server's resources, its ``kubectl``
watchers and their event-log stay together.

Resource template::

    kube-events://watch/{resource}{?namespace,labelSelector,fieldSelector,context}

``namespace`` is a namespace name or ``*`` (all namespaces); left out, kubectl's
current-context namespace applies. The body is the event-log shape
(``EVENTS_MIME``): ``{"events": [{"seq", "type", "object", "old"?, "synthetic"?}]}``
with ``type`` one of ``ADDED`` / ``MODIFIED`` / ``DELETED`` / ``ERROR``.

How one watch works (one :class:`KubeWatcher` per URI, shared by every
subscriber of that URI, cancelled when the last one leaves):

1. **Seed** with ``kubectl get R -o json``; the :class:`KubeTracker` records
   every object by ``uid``. The first read of the URI waits for this (a
   :class:`~agentd.servers._base.SourceGate`, up to ``SOURCE_START_TIMEOUT``)
   and fails with kubectl's own error, plus ``did you mean: …`` when the
   resource type is unknown.
2. **Watch** ``kubectl get R -w --output-watch-events -o json
   --request-timeout=0``: the concatenated JSON on its stdout goes through
   :class:`~agentd.servers._jsonstream.JsonStreamParser`; each watch event goes
   through the tracker, which drops replays of what it already knows and adds
   ``old`` to ``MODIFIED``. Every batch of new events is one
   ``notify_changed``.
3. **Reconnect** when kubectl exits (server-side timeout, expired token,
   network): wait ``RECONNECT_BACKOFF_S`` (1, 2, 4, 8, 16 s, then 16 s),
   re-list, append synthetic ``ADDED`` / ``MODIFIED`` / ``DELETED`` events for
   whatever changed in the gap, and watch again. A failed re-list is an
   in-band ``ERROR`` event and another backoff step.

The pure part (URI parsing, argv, :class:`KubeTracker`, suggestions,
backoff) never awaits; the trio part is :class:`KubeWatcher` and
:func:`build`.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import subprocess
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Final, Literal
from urllib.parse import parse_qsl, urlsplit

import orjson
import trio
from mcp.server.mcpserver import Context

from agentd.core.errors import ConfigError
from agentd.core.jsonvalue import JSONObject, JSONValue, as_object, get_array, get_object, get_str, loads
from agentd.servers._base import (
    EVENTS_MIME,
    EventRing,
    ResourceError,
    SourceGate,
    WatchableServer,
    describe,
)
from agentd.servers._jsonstream import JsonStreamParser, Malformed
from agentd.servers.files import WatcherRegistry, add_max_watchers, max_watchers, request_uri

__all__ = [
    "RECONNECT_BACKOFF_S",
    "SCHEME",
    "STABLE_WATCH_S",
    "SUMMARY",
    "TEMPLATE",
    "KubeTracker",
    "KubeUriError",
    "KubeWatchSpec",
    "KubeWatcher",
    "add_arguments",
    "backoff_delay",
    "build",
    "did_you_mean",
    "list_argv",
    "parse_kube_uri",
    "strip_object",
    "watch_argv",
]

SUMMARY: Final = "Kubernetes objects as event-log resources, pushed by `kubectl get -w`"

#: ``agentd serve kube --help``: what it serves and how agentd uses it.
HELP: Final = """\
resources:
  kube-events://watch/{resource}{?namespace,labelSelector,fieldSelector,context}
                            ADDED / MODIFIED (with old) / DELETED / ERROR events of
                            one resource type, from kubectl get --watch (event-log);
                            namespace=* for all, default kubectl's current one
tools: none (read-only). Uses kubectl and its kubeconfig; a dropped watch is
re-listed and what changed meanwhile reported as synthetic events.

with agentd:
  agentd --mcp-stdio 'kube=agentd serve kube' --mode reactive \\
         --subscribe 'kube:kube-events://watch/pods?namespace=*' \\
         --route 'kube-events://*=spawn' "explain failing pods"
  mcpServers JSON: {"kube": {"command": "agentd", "args": ["serve", "kube"]}}"""
SCHEME: Final = "kube-events"
TEMPLATE: Final = "kube-events://watch/{resource}{?namespace,labelSelector,fieldSelector,context}"

RECONNECT_BACKOFF_S: Final = (1.0, 2.0, 4.0, 8.0, 16.0)
"""Waits before re-listing after the watch stream ended, by attempt. A stream
that ends at once again and again (expired credentials, API server down) then
costs one kubectl start per 16 s instead of a tight loop; the first retry after
a routine server-side timeout comes after 1 s."""

STABLE_WATCH_S: Final = 60.0
"""A watch that stayed up this long (or delivered an event) counts as healthy,
so the next reconnect starts the backoff again from its first step. API
servers end watches after 30-60 min, far longer than this."""

LIST_TIMEOUT_S: Final = 30.0
"""Bound on one ``kubectl get -o json`` / ``api-resources`` run. Matches the
first read's wait (``SOURCE_START_TIMEOUT``): a list slower than that would
fail the read anyway."""

STDERR_KEEP_BYTES: Final = 4096
"""Tail of kubectl's stderr kept for error messages; enough for its error line."""

SUGGESTIONS: Final = 3  # closest resource names offered after "did you mean"

EventType = Literal["ADDED", "MODIFIED", "DELETED", "ERROR"]
_WATCH_TYPES: Final = frozenset({"ADDED", "MODIFIED", "DELETED", "ERROR", "BOOKMARK"})

_QUERY_KEYS: Final = ("namespace", "labelSelector", "fieldSelector", "context")
_RESOURCE_RE: Final = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$")
_NAMESPACE_RE: Final = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_EXAMPLE_URI: Final = "kube-events://watch/configmaps?namespace=*"


# --------------------------------------------------------------------------- URIs and argv


class KubeUriError(ValueError):
    """A ``kube-events://`` URI that cannot be watched; the message says how to fix it."""


@dataclass(frozen=True, slots=True)
class KubeWatchSpec:
    """What one ``kube-events://`` URI asks kubectl for.

    Attributes:
        resource: Resource type as kubectl takes it (``pods``, ``deployments.apps``).
        namespace: A namespace, ``"*"`` for all, or None for kubectl's default.
        label_selector: ``-l`` value, or None.
        field_selector: ``--field-selector`` value, or None.
        context: kubeconfig context, or None for the current one.
    """

    resource: str
    namespace: str | None = None
    label_selector: str | None = None
    field_selector: str | None = None
    context: str | None = None


def parse_kube_uri(uri: str) -> KubeWatchSpec:
    """Parse and validate a ``kube-events://watch/...`` URI.

    Raises:
        KubeUriError: wrong scheme or shape, unknown or repeated query
            parameter, or a value kubectl would misread (e.g. starting with ``-``).
    """
    parts = urlsplit(uri)
    if parts.scheme != SCHEME or parts.netloc != "watch":
        raise KubeUriError(
            f"{uri!r} is not a kube watch URI: use kube-events://watch/RESOURCE, e.g. {_EXAMPLE_URI}"
        )
    resource = parts.path.removeprefix("/")
    if not _RESOURCE_RE.fullmatch(resource):
        raise KubeUriError(
            f"resource {resource!r} in {uri!r} is not a resource type name: give one type such as "
            "pods, configmaps or deployments.apps (kubectl api-resources lists them)"
        )
    seen: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key not in _QUERY_KEYS:
            raise KubeUriError(
                f"unknown query parameter {key!r} in {uri!r}: use only {', '.join(_QUERY_KEYS)}"
            )
        if key in seen:
            raise KubeUriError(f"query parameter {key!r} appears twice in {uri!r}: give it once")
        if not value:
            raise KubeUriError(f"query parameter {key!r} in {uri!r} is empty: give a value or leave it out")
        if value.startswith("-"):
            raise KubeUriError(f"{key}={value!r} in {uri!r} starts with '-': kubectl would read it as a flag")
        seen[key] = value
    namespace = seen.get("namespace")
    if namespace is not None and namespace != "*" and not _NAMESPACE_RE.fullmatch(namespace):
        raise KubeUriError(
            f"namespace {namespace!r} in {uri!r} is not a namespace name: give a DNS label such as "
            "'default', or '*' for all namespaces"
        )
    return KubeWatchSpec(
        resource=resource,
        namespace=namespace,
        label_selector=seen.get("labelSelector"),
        field_selector=seen.get("fieldSelector"),
        context=seen.get("context"),
    )


def _scope_args(spec: KubeWatchSpec) -> list[str]:
    args: list[str] = []
    if spec.context is not None:
        args.append(f"--context={spec.context}")
    return args


def _selection_args(spec: KubeWatchSpec) -> list[str]:
    args: list[str] = []
    if spec.namespace == "*":
        args.append("--all-namespaces")
    elif spec.namespace is not None:
        args.append(f"--namespace={spec.namespace}")
    if spec.label_selector is not None:
        args.append(f"--selector={spec.label_selector}")
    if spec.field_selector is not None:
        args.append(f"--field-selector={spec.field_selector}")
    return args


def list_argv(kubectl: str, spec: KubeWatchSpec) -> list[str]:
    """``kubectl get R -o json`` with the spec's scope (``--flag=value`` forms only)."""
    return [kubectl, *_scope_args(spec), "get", spec.resource, *_selection_args(spec), "--output=json"]


def watch_argv(kubectl: str, spec: KubeWatchSpec) -> list[str]:
    """``kubectl get R -w --output-watch-events -o json --request-timeout=0`` with the spec's scope."""
    return [
        kubectl,
        *_scope_args(spec),
        "get",
        spec.resource,
        *_selection_args(spec),
        "--watch",
        "--output-watch-events",
        "--output=json",
        "--request-timeout=0",
    ]


def api_resources_argv(kubectl: str, spec: KubeWatchSpec) -> list[str]:
    """``kubectl api-resources -o name`` in the spec's context (for suggestions)."""
    return [kubectl, *_scope_args(spec), "api-resources", "--output=name"]


def did_you_mean(resource: str, names: Iterable[str], n: int = SUGGESTIONS) -> list[str]:
    """Up to ``n`` resource names from ``api-resources -o name`` closest to ``resource``.

    Both the full name (``deployments.apps``) and its plural (``deployments``)
    are compared, so ``deploymnets`` finds ``deployments.apps``.
    """
    by_candidate: dict[str, str] = {}
    for name in names:
        name = name.strip()
        if not name:
            continue
        by_candidate.setdefault(name.lower(), name)
        by_candidate.setdefault(name.split(".", 1)[0].lower(), name)
    out: list[str] = []
    for match in difflib.get_close_matches(resource.lower(), list(by_candidate), n=n * 2, cutoff=0.6):
        full = by_candidate[match]
        if full not in out:
            out.append(full)
    return out[:n]


def backoff_delay(attempt: int, schedule: tuple[float, ...] = RECONNECT_BACKOFF_S) -> float:
    """Seconds to wait before reconnect ``attempt`` (0-based); the last step repeats."""
    return schedule[min(max(attempt, 0), len(schedule) - 1)]


# --------------------------------------------------------------------------- object tracking


def strip_object(obj: Mapping[str, JSONValue]) -> JSONObject:
    """A copy of ``obj`` without ``metadata.managedFields`` (noise for readers, often most of the bytes)."""
    out = dict(obj)
    meta = get_object(out, "metadata")
    if meta is not None and "managedFields" in meta:
        out["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
    return out


def _meta(obj: JSONObject) -> JSONObject:
    meta = get_object(obj, "metadata")
    return meta if meta is not None else {}


def _identity(obj: JSONObject) -> str:
    meta = _meta(obj)
    uid = meta.get("uid")
    if isinstance(uid, str) and uid:
        return uid
    # Objects without a uid (never from a real API server) fall back to namespace/name.
    return f"{meta.get('namespace', '')}/{meta.get('name', '')}"


def _version(obj: JSONObject) -> str | None:
    return get_str(_meta(obj), "resourceVersion")


Draft = JSONObject
"""An event without ``seq``: ``{"type": ..., "object": ..., "old"?: ..., "synthetic"?: True}``."""


class KubeTracker:
    """Known objects of one watch, by uid; turns watch events and re-lists into events.

    Pure and synchronous. Rules:

    * a watch ``ADDED`` whose uid and resourceVersion are already known is a
      replay (kubectl starts every watch by listing) and is dropped; a known
      uid with a new resourceVersion becomes ``MODIFIED`` with ``old``;
    * ``MODIFIED`` at an already-known resourceVersion is dropped; otherwise it
      carries ``old`` (the previous object) when there was one;
    * ``DELETED`` forgets the object and is always reported;
    * watch ``ERROR`` events become ``ERROR`` with the API's message;
      ``BOOKMARK`` is ignored.
    """

    def __init__(self) -> None:
        self.known: dict[str, JSONObject] = {}

    def seed(self, items: Iterable[JSONObject]) -> None:
        """Replace the known set with a list result; reports nothing."""
        self.known = {}
        for item in items:
            obj = strip_object(item)
            self.known[_identity(obj)] = obj

    def apply(self, value: JSONValue) -> list[Draft]:
        """Turn one decoded watch event (``{"type", "object"}``) into zero or more drafts."""
        event = as_object(value)
        if event is None:
            return [_error_draft(f"kubectl printed a {type(value).__name__} where a watch event belongs")]
        kind = event.get("type")
        raw = get_object(event, "object")
        if kind not in _WATCH_TYPES or raw is None:
            excerpt = orjson.dumps(event)[:120].decode("utf-8", "replace")
            return [_error_draft(f"unrecognised watch event from kubectl: {excerpt}")]
        if kind == "BOOKMARK":
            return []
        if kind == "ERROR":
            message = raw.get("message") or raw.get("reason") or "unknown error"
            return [_error_draft(f"the API server ended the watch with an error: {message}")]
        obj = strip_object(raw)
        uid = _identity(obj)
        old = self.known.get(uid)
        if kind == "DELETED":
            self.known.pop(uid, None)
            return [{"type": "DELETED", "object": obj}]
        self.known[uid] = obj
        if old is not None and _version(old) == _version(obj):
            return []  # replay of a state already reported (or seeded)
        if old is None and kind == "ADDED":
            return [{"type": "ADDED", "object": obj}]
        draft: Draft = {"type": "MODIFIED", "object": obj}
        if old is not None:
            draft["old"] = old
        return [draft]

    def reconcile(self, items: Iterable[JSONObject]) -> list[Draft]:
        """Compare a fresh list with what is known; synthetic drafts for every difference."""
        fresh: dict[str, JSONObject] = {}
        for item in items:
            obj = strip_object(item)
            fresh[_identity(obj)] = obj
        out: list[Draft] = []
        for uid, obj in fresh.items():
            old = self.known.get(uid)
            if old is None:
                out.append({"type": "ADDED", "object": obj, "synthetic": True})
            elif _version(old) != _version(obj):
                out.append({"type": "MODIFIED", "object": obj, "old": old, "synthetic": True})
        for uid, old in self.known.items():
            if uid not in fresh:
                out.append({"type": "DELETED", "object": old, "synthetic": True})
        self.known = fresh
        return out


def _error_draft(message: str) -> Draft:
    return {"type": "ERROR", "message": message}


def parse_list_output(stdout: bytes) -> list[JSONObject]:
    """Items of ``kubectl get -o json`` output (a ``List``, or one object for a named get).

    Raises:
        ValueError: not JSON, or not a list/object.
    """
    try:
        doc = as_object(loads(stdout))
    except orjson.JSONDecodeError as exc:
        excerpt = stdout[:120].decode("utf-8", "replace")
        raise ValueError(f"kubectl printed something that is not JSON ({exc}): {excerpt!r}") from exc
    items = get_array(doc, "items") if doc is not None else None
    if items is not None:
        return [obj for item in items if (obj := as_object(item)) is not None]
    if doc is not None and "metadata" in doc:
        return [doc]
    raise ValueError(f"kubectl printed JSON that is not a list of objects: {stdout[:120]!r}")


# --------------------------------------------------------------------------- the watcher (trio)


@dataclass(slots=True)
class _Run:
    """Outcome of one kubectl run."""

    returncode: int
    stdout: bytes
    stderr: str


def _stderr_text(raw: bytes) -> str:
    return raw[-STDERR_KEEP_BYTES:].decode("utf-8", "replace").strip()


class KubeWatcher:
    """Seeds, watches and reconnects one ``kube-events://`` URI (see the module docstring).

    Attributes:
        ring: The event-log served to readers.
        gate: Readiness for the first read: RUNNING after the seed, FAILED
            (with kubectl's error and suggestions) when the seed failed.
    """

    def __init__(
        self,
        spec: KubeWatchSpec,
        *,
        kubectl: str,
        changed: Callable[[], Awaitable[None]],
        backoff: tuple[float, ...] = RECONNECT_BACKOFF_S,
    ) -> None:
        self.spec = spec
        self.kubectl = kubectl
        self.ring = EventRing()
        self.gate = SourceGate(f"the kubectl watch of {spec.resource!r}")
        self.tracker = KubeTracker()
        self._changed = changed
        self._backoff = backoff

    async def run(self) -> None:
        """Seed, then watch and reconnect until cancelled; returns only when the seed failed."""
        try:
            items = await self._list()
        except _ListFailed as exc:
            self.gate.failed(await self._seed_error(exc))
            return
        self.tracker.seed(items)
        self.gate.running()
        attempt = 0
        while True:
            started = trio.current_time()
            delivered, ended = await self._watch()
            if delivered or trio.current_time() - started >= STABLE_WATCH_S:
                attempt = 0
            delay = backoff_delay(attempt, self._backoff)
            if ended:
                await self._emit([_error_draft(f"{ended}; reconnecting in {delay:g} s")])
            await trio.sleep(delay)
            attempt += 1
            try:
                items = await self._list()
            except _ListFailed as exc:
                await self._emit([_error_draft(f"re-list after the watch ended failed: {exc}")])
                continue
            await self._emit(self.tracker.reconcile(items))

    async def _emit(self, drafts: list[Draft]) -> None:
        if self.ring.append_drafts(drafts):
            await self._changed()

    async def _run_once(self, argv: list[str]) -> _Run:
        with trio.fail_after(LIST_TIMEOUT_S):
            done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
        return _Run(done.returncode, done.stdout, _stderr_text(done.stderr))

    async def _list(self) -> list[JSONObject]:
        argv = list_argv(self.kubectl, self.spec)
        try:
            run = await self._run_once(argv)
        except OSError as exc:
            raise _ListFailed(
                f"could not run {self.kubectl!r}: {exc}; install kubectl or pass --kubectl PATH", None
            ) from exc
        except trio.TooSlowError as exc:
            raise _ListFailed(
                f"`{' '.join(argv[1:])}` did not finish within {LIST_TIMEOUT_S:g} s", None
            ) from exc
        if run.returncode != 0:
            detail = run.stderr or "(no output on stderr)"
            raise _ListFailed(f"`kubectl {' '.join(argv[1:])}` failed (exit {run.returncode}): {detail}", run)
        try:
            return parse_list_output(run.stdout)
        except ValueError as exc:
            raise _ListFailed(str(exc), run) from exc

    async def _seed_error(self, exc: _ListFailed) -> str:
        message = str(exc)
        if exc.run is None or "resource type" not in exc.run.stderr:
            return message
        try:
            names = await self._run_once(api_resources_argv(self.kubectl, self.spec))
        except (OSError, trio.TooSlowError):
            return message
        if names.returncode != 0:
            return message
        close = did_you_mean(self.spec.resource, names.stdout.decode("utf-8", "replace").splitlines())
        if close:
            return f"{message}; did you mean: {', '.join(close)}?"
        return f"{message}; `kubectl api-resources -o name` lists the resource types"

    async def _watch(self) -> tuple[bool, str | None]:
        """Run one ``kubectl get -w``; returns (delivered any event, why it ended if abnormal)."""
        argv = watch_argv(self.kubectl, self.spec)
        parser = JsonStreamParser()
        delivered = False
        stderr_tail = bytearray()

        async def drain_stderr(stream: trio.abc.ReceiveStream) -> None:
            async for chunk in stream:
                stderr_tail.extend(chunk)
                del stderr_tail[:-STDERR_KEEP_BYTES]

        try:
            async with trio.open_nursery() as nursery:
                proc: trio.Process = await nursery.start(
                    _start_process, argv, subprocess.PIPE, subprocess.PIPE
                )
                assert proc.stdout is not None
                assert proc.stderr is not None
                nursery.start_soon(drain_stderr, proc.stderr)
                async for chunk in proc.stdout:
                    drafts: list[Draft] = []
                    for item in parser.feed(bytes(chunk)):
                        if isinstance(item, Malformed):
                            drafts.append(_error_draft(f"unreadable output from kubectl -w: {item.reason}"))
                        else:
                            drafts.extend(self.tracker.apply(item))
                    delivered = delivered or bool(drafts)
                    await self._emit(drafts)
                await self._emit(
                    [_error_draft(f"kubectl -w output ended mid-way: {m.reason}") for m in parser.close()]
                )
        except OSError as exc:
            return delivered, f"could not run {self.kubectl!r}: {exc}"
        code = proc.returncode
        if code == 0:
            return delivered, None
        detail = _stderr_text(bytes(stderr_tail)) or "(no output on stderr)"
        return delivered, f"`kubectl get {self.spec.resource} --watch` exited {code}: {detail}"


async def _start_process(
    argv: list[str], stdout: int, stderr: int, *, task_status: trio.TaskStatus[trio.Process]
) -> None:
    # run_process owns the child: on cancel it sends SIGTERM, waits a bounded
    # time, then SIGKILLs (trio's default deliver_cancel), all shielded.
    await trio.run_process(
        argv, stdin=subprocess.DEVNULL, stdout=stdout, stderr=stderr, check=False, task_status=task_status
    )


class _ListFailed(Exception):
    """A kubectl list did not give a usable result (internal; becomes a gate failure or ERROR event)."""

    def __init__(self, message: str, run: _Run | None) -> None:
        super().__init__(message)
        self.run = run


# --------------------------------------------------------------------------- the server


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Flags of ``agentd serve kube``."""
    parser.add_argument(
        "--kubectl",
        default="kubectl",
        metavar="PATH",
        help="kubectl executable (default: `kubectl` on PATH); uses its kubeconfig and contexts",
    )
    add_max_watchers(parser, "`kubectl get --watch` processes")


def build(args: argparse.Namespace) -> WatchableServer:
    """Construct the kube server.

    Raises:
        ConfigError: ``--kubectl`` does not name an executable, or ``--max-watchers`` is below 1.
    """
    cap = max_watchers(args)
    kubectl = shutil.which(args.kubectl)
    if kubectl is None:
        raise ConfigError(
            "--kubectl", args.kubectl, "give the path of a kubectl executable, or put kubectl on PATH"
        )
    server = WatchableServer(
        "kube",
        instructions=(
            "Kubernetes objects as event-log resources. Watch kube-events://watch/RESOURCE"
            "?namespace=NS (or * for all) and read it after each notification; events carry "
            "seq, type (ADDED/MODIFIED/DELETED/ERROR), object and, for MODIFIED, old."
        ),
    )

    def make(uri: str) -> KubeWatcher:
        return KubeWatcher(parse_kube_uri(uri), kubectl=kubectl, changed=registry.notifier(uri))

    registry: WatcherRegistry[KubeWatcher] = WatcherRegistry(
        server, key=_registry_key, factory=make, max_watchers=cap, watcher_noun="kubectl watchers"
    )
    registry.install()

    description = describe(
        "Events for one Kubernetes resource type, from `kubectl get RESOURCE --watch`: "
        "ADDED / MODIFIED (with `old`) / DELETED / ERROR, each with a `seq`, in a ring of the "
        "last 256. `namespace` is a name or * for all namespaces (default: kubectl's current "
        "namespace); `labelSelector`, `fieldSelector` and `context` are passed to kubectl. "
        "After a dropped watch the server re-lists and reports what changed meanwhile as "
        "events marked `synthetic`.",
        name="configmaps",
        uri=_EXAMPLE_URI,
    )

    @server.mcp.resource(TEMPLATE, name="kube-events", description=description, mime_type=EVENTS_MIME)
    async def read_events(
        resource: str,
        namespace: str | None = None,
        labelSelector: str | None = None,
        fieldSelector: str | None = None,
        context: str | None = None,
        ctx: Context | None = None,
    ) -> str:
        uri = (request_uri(ctx) if ctx is not None else None) or _rebuild(
            resource, namespace, labelSelector, fieldSelector, context
        )
        try:
            spec = parse_kube_uri(uri)
        except KubeUriError as exc:
            raise ResourceError(str(exc)) from exc
        watcher = registry.get(uri)
        if watcher is None:
            # Not subscribed: validate the resource with one list, report no events.
            probe = KubeWatcher(spec, kubectl=kubectl, changed=_nothing)
            try:
                await probe._list()
            except _ListFailed as exc:
                raise ResourceError(await probe._seed_error(exc)) from exc
            return orjson.dumps({"events": []}).decode()
        await watcher.gate.wait_ready()
        return watcher.ring.body()

    return server


async def _nothing() -> None:
    return None


def _registry_key(uri: str) -> str | None:
    if not uri.startswith(f"{SCHEME}://"):
        return None
    try:
        parse_kube_uri(uri)
    except KubeUriError:
        return None
    return uri


def _rebuild(resource: str, *params: str | None) -> str:
    query = "&".join(f"{k}={v}" for k, v in zip(_QUERY_KEYS, params, strict=True) if v is not None)
    return f"{SCHEME}://watch/{resource}" + (f"?{query}" if query else "")

"""``agentd status``: what a running daemon is doing, read from its ``GET /status`` (docs/status.md).

It prints the document for a person (a header line, then servers, routes,
agents and the latest routing decisions), passes it through with
``--json``, or refreshes it in place like ``top`` with ``--watch`` (Ctrl-C
ends it cleanly, exit 0). An address that cannot be reached, refuses the
request or is not agentd's health address gives one line that says what to
do (exit 1). Everything shown that came from outside (URIs, errors, names)
has its control characters escaped: a URI cannot move the cursor.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

from agentd.core.durations import ascii_int, ascii_number
from agentd.core.safetext import escape_controls
from agentd.observe.errorline import FIX_SEPARATOR, error_line

__all__ = ["main", "render"]

ADDR_ENV: Final = "AGENTD_HEALTH_ADDR"
TOKEN_FILE_ENV: Final = "AGENTD_STATUS_TOKEN_FILE"

REQUEST_TIMEOUT: Final = 5.0
"""Seconds one read of ``/status`` may take, all of it (connect, request, the whole answer): the
daemon answers in milliseconds (a pure snapshot); past this it is hung or it is not agentd."""

MAX_RESPONSE_BYTES: Final = 32 * 1024 * 1024
"""Most bytes of an answer to ``GET /status`` read: the document lists the running agents and at
most 50 finished ones and 50 decisions (a daemon with a thousand agents answers about 1 MiB); past
this it is not agentd's status, and reading on would only fill memory."""

MAX_JSON_INT_DIGITS: Final = 19
"""Digits of an integer in the document: every count and id fits 64 bits."""

_LISTS: Final = ("servers", "routes", "agents", "finished", "recent")
"""The document's sections the view reads as lists of objects."""

WATCH_INTERVAL: Final = 2.0
"""Seconds between refreshes of ``--watch`` (the status page refreshes as often)."""

RECENT_SHOWN: Final = 8
"""Routing decisions shown by the human view (the document has up to 50)."""

FINISHED_SHOWN: Final = 8
"""Finished agents shown in the human view, newest first (the document has up to 50)."""

UNCUT: Final = 1_000_000
"""The width of a view written to a pipe or a file: its lines are not cut."""

#: Terminal control for ``--watch``: the alternate screen, cursor home + clear, cursor hidden/shown.
_ENTER, _LEAVE, _HOME = "\x1b[?1049h\x1b[?25l", "\x1b[?25h\x1b[?1049l", "\x1b[H\x1b[2J"


FIX = FIX_SEPARATOR
"""Where a message's fix starts (the final line's separator)."""


class StatusUnavailable(Exception):
    """The daemon's status could not be read: the message is the one line the user sees."""


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="agentd status",
        description="Show what a running agentd daemon is doing (its --health-addr GET /status).",
        epilog="exit codes: 0 shown (or --watch ended with Ctrl-C), 1 the status could not be read, 2 usage",
    )
    p.add_argument(
        "--addr",
        metavar="HOST:PORT",
        help=f"the daemon's --health-addr (default: ${ADDR_ENV})",
    )
    p.add_argument("--json", action="store_true", help="print the status document as JSON")
    p.add_argument("-w", "--watch", action="store_true", help="refresh in place until Ctrl-C")
    p.add_argument(
        "--interval", type=_seconds, default=WATCH_INTERVAL, metavar="SECONDS", help="--watch refresh period"
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"file holding the bearer token (the daemon's --status-token-file; default: ${TOKEN_FILE_ENV})",
    )
    return p


def _seconds(text: str) -> float:
    """``--interval``: a number of seconds written in ASCII (argparse names the flag and exits 2)."""
    try:
        return ascii_number(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds: {exc}") from None


def _say(message: str) -> None:
    """The one line a failed ``agentd status`` ends with: ``agentd: error: status: WHAT — fix: HOW``."""
    what, _, fix = message.partition(FIX)
    print(error_line(f"status: {what}", fix or "agentd status --help lists the options"), file=sys.stderr)


def main(argv: Sequence[str]) -> int:
    """Run ``agentd status ARGV``; returns the exit code."""
    try:
        args = _parser().parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    addr = args.addr or os.environ.get(ADDR_ENV)
    if not addr:
        _say(
            f"no address{FIX}give --addr HOST:PORT (the --health-addr the daemon was started with) "
            f"or set ${ADDR_ENV}"
        )
        return 2
    if not args.interval > 0:
        _say(f"--interval {args.interval!r} is not valid{FIX}give a positive number of seconds, e.g. 2")
        return 2
    token_file = args.token_file or os.environ.get(TOKEN_FILE_ENV)
    try:
        token = _read_token(token_file) if token_file else None
        host, port = _split(addr, "--addr" if args.addr else f"${ADDR_ENV}")
    except StatusUnavailable as exc:
        _say(str(exc))
        return 2

    def fetch() -> dict[str, Any]:
        return read_status(host, port, addr, token)

    if args.watch:
        return _watch(fetch, args.interval, as_json=args.json)
    try:
        doc = fetch()
    except StatusUnavailable as exc:
        _say(str(exc))
        return 1
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        try:
            sys.stdout.write(_shown(doc, addr))
        except StatusUnavailable as exc:
            _say(str(exc))
            return 1
    return 0


def _shown(doc: dict[str, Any], addr: str) -> str:
    """The human view of ``doc``; a document the view cannot show is named, never a traceback."""
    try:
        return render(doc, _width())
    except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
        raise StatusUnavailable(
            f"{addr} answered a status document this agentd status cannot show ({type(exc).__name__}: "
            f"{escape_controls(str(exc))[:120]}){FIX}check that --addr is the daemon's --health-addr, "
            "or read it with --json"
        ) from None


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise StatusUnavailable(
            f"--token-file {path!r} cannot be read ({getattr(exc, 'strerror', None) or exc}){FIX}"
            "name the file the daemon's --status-token-file names"
        ) from exc


def _split(addr: str, setting: str = "--addr") -> tuple[str, int]:
    host, sep, port_text = addr.rpartition(":")
    try:
        port = ascii_int(port_text) if sep else 0
    except ValueError:
        port = 0  # ``²`` or ``١٢`` is no port: isdigit() says yes, int() raises or reads 12
    if not 0 < port < 65536:
        raise StatusUnavailable(
            f"{setting} {addr!r} is not valid{FIX}give HOST:PORT with the port in ASCII digits 1-65535, "
            "e.g. 127.0.0.1:8080 (the daemon's --health-addr)"
        )
    host = host.strip("[]") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):  # a wildcard bind is reached on loopback from this host
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    return host, port


class _TooLarge(Exception):
    """The answer passed :data:`MAX_RESPONSE_BYTES`."""


class _NotHttp(Exception):
    """The answer is not an HTTP/1.x response (or not a whole one)."""


_STATUS_LINE: Final = re.compile(rb"HTTP/1\.[01] ([0-9]{3})(?: [^\r\n]*)?")


def _parse(raw: bytes) -> tuple[int, bytes]:
    """An HTTP/1.x answer's status and body (de-chunked; to its ``Content-Length``, or to the end).

    Raises:
        _NotHttp: not an HTTP/1.x answer, or one cut short.
    """
    head, sep, body = raw.partition(b"\r\n\r\n")
    status = _STATUS_LINE.fullmatch(head.split(b"\r\n", 1)[0]) if sep else None
    if status is None:
        raise _NotHttp("no HTTP/1.x status line")
    fields: dict[bytes, bytes] = {}
    for line in head.split(b"\r\n")[1:]:
        name, colon, value = line.partition(b":")
        if not colon:
            raise _NotHttp("a malformed header line")
        fields.setdefault(name.strip().lower(), value.strip())
    if b"chunked" in fields.get(b"transfer-encoding", b"").lower():
        return int(status[1]), _dechunk(body)
    length = fields.get(b"content-length")
    if length is not None:
        if not (length.isdigit() and len(length) <= 12):  # bytes.isdigit(): ASCII digits only
            raise _NotHttp("a Content-Length that is not a number")
        if len(body) < int(length):
            raise _NotHttp("an answer cut short")
        body = body[: int(length)]
    return int(status[1]), body


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while True:
        size_line, sep, data = data.partition(b"\r\n")
        size_text = size_line.split(b";", 1)[0].strip()
        if (
            not sep
            or not size_text
            or len(size_text) > 8
            or not all(c in b"0123456789abcdefABCDEF" for c in size_text)
        ):
            raise _NotHttp("a malformed chunk")
        size = int(size_text, 16)
        if size == 0:
            return bytes(out)
        if len(data) < size + 2:
            raise _NotHttp("an answer cut short")
        out += data[:size]
        data = data[size + 2 :]


def _left(deadline: float) -> float:
    """Seconds to ``deadline``; raises ``TimeoutError`` when it passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def _expected(head: bytes) -> int | None:
    """The answer's length from its head (``Content-Length``), or None: read to the end."""
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            value = value.strip()
            # ASCII digits only (bytes.isdigit() is ASCII): anything else is read to the end.
            return int(value) if value.isdigit() and len(value) <= 12 else None
    return None


def _exchange(host: str, port: int, token: str | None, deadline: float) -> bytes:
    """``GET /status`` and the answer's bytes: at most :data:`MAX_RESPONSE_BYTES`, all of it by
    ``deadline`` (a peer that trickles its answer is cut there, whatever its pace)."""
    shown = f"[{host}]" if ":" in host else host
    lines = ["GET /status HTTP/1.1", f"Host: {shown}:{port}", "Accept: application/json", "Connection: close"]
    if token:
        lines.append(f"Authorization: Bearer {token}")
    request = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1", "replace")
    data = bytearray()
    whole: int | None = None  # the answer's size, once its head says it
    with socket.create_connection((host, port), timeout=_left(deadline)) as sock:
        sock.settimeout(_left(deadline))
        sock.sendall(request)
        while whole is None or len(data) < whole:
            sock.settimeout(_left(deadline))
            chunk = sock.recv(1 << 16)
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_RESPONSE_BYTES:
                raise _TooLarge
            if whole is None and (end := data.find(b"\r\n\r\n", max(0, len(data) - len(chunk) - 3))) >= 0:
                length = _expected(bytes(data[:end]))
                whole = end + 4 + length if length is not None else MAX_RESPONSE_BYTES + 1
    return bytes(data)


def _json_int(text: str) -> int:
    if len(text.lstrip("-")) > MAX_JSON_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits")
    return int(text)


def _json_float(text: str) -> float:
    value = float(text)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{text[:20]} is not a finite number")
    return value


def _no_constant(text: str) -> object:
    raise ValueError(f"{text} is not JSON's")


def _shape_problem(doc: dict[str, Any]) -> str | None:
    """What in ``doc`` is not the shape of agentd's status document (the parts the view reads), or None."""
    for key in _LISTS:
        value = doc.get(key)
        if value is not None and not (isinstance(value, list) and all(isinstance(x, dict) for x in value)):
            return f"{key!r} is not a list of objects"
    budget = doc.get("budget")
    if budget is not None and not isinstance(budget, dict):
        return "'budget' is not an object"
    for key in ("agents", "finished"):
        for agent in doc.get(key) or []:
            for name in ("id", "parent"):
                if not isinstance(agent.get(name), str | int | None):
                    return f"an agent's {name!r} is not a name"
            woken = agent.get("woken_by")
            if woken is not None and not (isinstance(woken, list) and all(isinstance(w, str) for w in woken)):
                return "an agent's 'woken_by' is not a list of URIs"
    return None


def read_status(host: str, port: int, addr: str, token: str | None) -> dict[str, Any]:
    """``GET /status`` from ``host:port``: bounded in size (:data:`MAX_RESPONSE_BYTES`) and in total
    time (:data:`REQUEST_TIMEOUT`), and checked to be agentd's status document.

    Raises:
        StatusUnavailable: with the one line that says what went wrong and the fix.
    """
    try:
        status, body = _parse(_exchange(host, port, token, time.monotonic() + REQUEST_TIMEOUT))
    except ConnectionRefusedError:
        raise StatusUnavailable(
            f"nothing listens on {addr} (connection refused) — fix: start agentd with --health-addr {addr}, "
            "or give --addr the address the daemon's --health-addr names"
        ) from None
    except TimeoutError:
        raise StatusUnavailable(
            f"{addr} did not answer whole within {REQUEST_TIMEOUT:g} s — fix: check that it is the daemon's "
            "--health-addr and that the daemon is not stopped (kill -CONT)"
        ) from None
    except _TooLarge:
        raise StatusUnavailable(
            f"{addr} answered more than {MAX_RESPONSE_BYTES // (1024 * 1024)} MiB, which is not agentd's "
            "status — fix: give --addr the daemon's --health-addr"
        ) from None
    except OSError as exc:
        raise StatusUnavailable(
            f"cannot reach {addr} ({exc.strerror or exc}) — fix: check the host and port "
            "(the daemon's --health-addr)"
        ) from None
    except _NotHttp as exc:
        raise StatusUnavailable(
            f"{addr} does not speak HTTP ({exc}) — fix: give --addr the daemon's --health-addr"
        ) from None
    reason = body.decode("utf-8", "replace").strip().splitlines()[0] if body.strip() else ""
    reason = escape_controls(reason)
    if status == 401:
        raise StatusUnavailable(
            f"{addr} needs a bearer token — fix: --token-file FILE, the file the daemon's --status-token-file names"
            if not token
            else f"{addr} refused the token — fix: give the file the daemon's --status-token-file names"
        )
    if status == 404:
        raise StatusUnavailable(
            f"{addr} serves no /status ({reason[:120]}) — fix: give --addr the daemon's --health-addr "
            "(not --metrics-addr), of an agentd that has the status view"
        )
    if status != 200:
        raise StatusUnavailable(
            f"{addr} answered {status}: {reason[:300]}{FIX}check that --addr is the daemon's --health-addr"
        )
    try:
        doc = json.loads(body, parse_int=_json_int, parse_float=_json_float, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        doc = None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("agentd.status/"):
        raise StatusUnavailable(f"{addr} answered something that is not agentd's status — fix: check --addr")
    problem = _shape_problem(doc)
    if problem is not None:
        raise StatusUnavailable(
            f"{addr} answered a status document of the wrong shape ({problem}) — fix: check that --addr is "
            "the daemon's --health-addr, and that agentd status is of the daemon's version"
        )
    return doc


def _watch(fetch: Callable[[], dict[str, Any]], interval: float, *, as_json: bool) -> int:
    """Redraw every ``interval`` seconds until Ctrl-C (SIGINT) or SIGTERM; exit 0 either way."""
    from agentd.core.heap import start_collector

    start_collector()  # a view that runs for hours (the command paused the collector for its imports)
    out: TextIO = sys.stdout
    tty = out.isatty()
    # Ctrl-C ends the view even when it was started with SIGINT ignored (a background job of a
    # script, nohup): the view says so, and the terminal is restored on the way out.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        if tty:
            out.write(_ENTER)
        while True:
            try:
                doc = fetch()
                frame = json.dumps(doc, indent=2) + "\n" if as_json else _shown(doc, "the daemon")
            except StatusUnavailable as exc:
                frame = f"agentd status: {escape_controls(str(exc))}\n(retrying every {interval:g} s; Ctrl-C ends)\n"
            out.write((_HOME if tty else "\n") + frame)
            out.flush()
            time.sleep(interval)  # the refresh period of a view, not a wait for a condition
    except KeyboardInterrupt:
        pass
    finally:
        if tty:
            out.write(_LEAVE)
            out.flush()
    return 0


# --------------------------------------------------------------------------- the human view


def _dur(seconds: object) -> str:
    if not isinstance(seconds, int | float):
        return "-"
    s = max(0, round(seconds))
    h, m, x = s // 3600, s % 3600 // 60, s % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{x:02d}s" if m else f"{x}s"


def _usd(value: object) -> str:
    if isinstance(value, int | float):
        return f"${value:.6f}" if value < 0.01 else f"${value:.4f}"
    return str(value)


def _ago(iso: object, now: object) -> str:
    import datetime as dt

    if not isinstance(iso, str) or not isinstance(now, str):
        return "-"
    try:
        delta = dt.datetime.fromisoformat(now) - dt.datetime.fromisoformat(iso)
    except ValueError:
        return "-"
    return _dur(delta.total_seconds()) + " ago"


def _doing(d: object) -> str:
    if not isinstance(d, dict):
        return "-"
    kind = d.get("kind")
    if kind == "tool":
        args = d.get("arguments")
        shown = f" {json.dumps(args)[:60]}" if args is not None else ""
        return f"tool {d.get('tool')} {_dur(d.get('since_s'))}{shown}"
    if kind == "model":
        return f"model call {_dur(d.get('since_s'))}"
    return str(kind)


def _width() -> int:
    """The terminal's width; no limit when the output is a pipe or a file (a script reads whole lines)."""
    if sys.stdout.isatty():
        return shutil.get_terminal_size((120, 40)).columns
    return UNCUT


def _table(title: str, heads: list[str], rows: list[list[object]], width: int) -> list[str]:
    cells = [[escape_controls(str(c if c is not None else "-")) for c in row] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) if cells else len(h) for i, h in enumerate(heads)]
    lines = [title.upper()]
    lines.append("  ".join(h.ljust(w) for h, w in zip(heads, widths, strict=True)).rstrip()[:width])
    if not cells:
        lines.append("(none)")
    for r in cells:
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip()[:width])
    return [*lines, ""]


def render(doc: dict[str, Any], width: int = 120) -> str:
    """The status document for a person: a header line, then servers, routes, agents and recent decisions."""
    budget = doc.get("budget") or {}
    agents = doc.get("agents") or []
    ready = "ready" if doc.get("ready") else f"NOT READY: {doc.get('ready_reason')}"
    head = (
        f"agentd {doc.get('version')} · {doc.get('mode')} · {doc.get('phase')} · {ready} · "
        f"up {_dur(doc.get('uptime_s'))} · pid {doc.get('pid')} · {len(agents)} running · "
        f"cost {_usd(budget.get('cost_usd'))} · {budget.get('tokens')} tokens · {budget.get('steps')} model calls"
    )
    now = doc.get("now")
    lines = [escape_controls(head)[:width], ""]
    lines += _table(
        "servers",
        ["server", "state", "transport", "protocol", "subs", "last error"],
        [
            [
                s.get("name"),
                s.get("state"),
                s.get("transport"),
                f"{s.get('protocol_version') or '-'}" + (f" ({s['era']})" if s.get("era") else ""),
                s.get("subscriptions"),
                s.get("last_error"),
            ]
            for s in doc.get("servers") or []
        ],
        width,
    )
    lines += _table(
        "routes",
        [
            "route",
            "kind",
            "match",
            "to",
            "queued",
            "in flight",
            "routed",
            "coalesced",
            "dropped",
            "last wake",
        ],
        [
            [
                r.get("id"),
                r.get("kind"),
                r.get("match"),
                f"session {r.get('session')}" if r.get("disposition") == "continue" else "spawn",
                f"{r.get('queued')}" + (f" +{r['held']} held" if r.get("held") else ""),
                f"{r.get('in_flight')}/{r.get('max_in_flight')}",
                r.get("routed"),
                r.get("coalesced"),
                r.get("dropped"),
                _ago(r.get("last_wake"), now),
            ]
            for r in doc.get("routes") or []
        ],
        width,
    )
    lines += _table(
        "agents",
        ["agent", "route", "woken by", "doing", "phase", "age", "steps", "tokens", "cost"],
        [
            [
                _in_tree(a),
                a.get("route") or a.get("role"),
                " ".join(a.get("woken_by") or []) or "-",
                _doing(a.get("doing")),
                a.get("phase"),
                _dur(a.get("age_s")),
                a.get("steps"),
                a.get("tokens"),
                _usd(a.get("cost_usd")),
            ]
            for a in tree_order(agents)
        ],
        width,
    )
    finished = list(reversed(doc.get("finished") or []))[:FINISHED_SHOWN]
    lines += _table(
        "finished agents",
        ["agent", "route", "woken by", "status", "ended", "took", "steps", "tokens", "cost"],
        [
            [
                _in_tree(a),
                a.get("route") or a.get("role"),
                " ".join(a.get("woken_by") or []) or "-",
                a.get("status") or "-",
                _ago(a.get("exited_at"), now),
                _dur(a.get("duration_s")),
                a.get("steps"),
                a.get("tokens"),
                _usd(a.get("cost_usd")),
            ]
            for a in finished
        ],
        width,
    )
    recent = list(reversed(doc.get("recent") or []))[:RECENT_SHOWN]
    lines += _table(
        "recent routing decisions",
        ["when", "uri", "route", "outcome"],
        [
            [
                _ago(d.get("at"), now),
                d.get("uri"),
                d.get("route"),
                f"{d.get('outcome')}" + (f" → {d['agent']}" if d.get("agent") else ""),
            ]
            for d in recent
        ],
        width,
    )
    if doc.get("content_shown"):
        for a in agents:
            if a.get("instruction"):
                lines.append(escape_controls(f"{a.get('id')} instruction: {a['instruction']}")[: width * 3])
    return "\n".join(lines).rstrip() + "\n"


def tree_order(agents: list[Any]) -> list[Any]:
    """Agents with each one's children right after it (rfcs/0370), otherwise in the order given."""
    ids = {a.get("id") for a in agents if isinstance(a, dict)}
    children: dict[object, list[Any]] = {}
    roots: list[Any] = []
    for a in agents:
        parent = a.get("parent") if isinstance(a, dict) else None
        if parent is not None and parent in ids:
            children.setdefault(parent, []).append(a)
        else:
            roots.append(a)
    out: list[Any] = []
    stack = list(reversed(roots))
    seen: set[int] = set()
    while stack:
        a = stack.pop()
        if id(a) in seen:  # a cycle in a document that came over the wire: show each once
            continue
        seen.add(id(a))
        out.append(a)
        stack.extend(reversed(children.get(a.get("id") if isinstance(a, dict) else None, [])))
    # Parents that name each other (a document that came over the wire): each shown once all the same.
    out += [a for a in agents if id(a) not in seen]
    return out


def _in_tree(agent: Any) -> object:
    """An agent's id, indented under its parent's (``└`` per level of depth)."""
    depth = agent.get("depth") if isinstance(agent, dict) else None
    ident = agent.get("id") if isinstance(agent, dict) else agent
    if isinstance(depth, int) and not isinstance(depth, bool) and 0 < depth <= 16:
        return f"{'  ' * (depth - 1)}└ {ident}"
    return ident

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
import http.client
import json
import os
import shutil
import signal
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

from agentd.core.safetext import escape_controls
from agentd.observe.errorline import FIX_SEPARATOR, error_line

__all__ = ["main", "render"]

ADDR_ENV: Final = "AGENTD_HEALTH_ADDR"
TOKEN_FILE_ENV: Final = "AGENTD_STATUS_TOKEN_FILE"

REQUEST_TIMEOUT: Final = 5.0
"""Seconds one read of ``/status`` may take: the daemon answers in milliseconds (a pure snapshot);
past this it is hung or it is not agentd."""

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
        "--interval", type=float, default=WATCH_INTERVAL, metavar="SECONDS", help="--watch refresh period"
    )
    p.add_argument(
        "--token-file",
        metavar="FILE",
        help=f"file holding the bearer token (the daemon's --status-token-file; default: ${TOKEN_FILE_ENV})",
    )
    return p


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
        host, port = _split(addr)
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
        sys.stdout.write(render(doc, _width()))
    return 0


def _read_token(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise StatusUnavailable(
            f"--token-file {path!r} cannot be read ({getattr(exc, 'strerror', None) or exc}){FIX}"
            "name the file the daemon's --status-token-file names"
        ) from exc


def _split(addr: str) -> tuple[str, int]:
    host, sep, port = addr.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise StatusUnavailable(
            f"--addr {addr!r} is not valid{FIX}give HOST:PORT, e.g. 127.0.0.1:8080 (the daemon's --health-addr)"
        )
    host = host.strip("[]") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):  # a wildcard bind is reached on loopback from this host
        host = "127.0.0.1" if host == "0.0.0.0" else "::1"
    return host, int(port)


def read_status(host: str, port: int, addr: str, token: str | None) -> dict[str, Any]:
    """``GET /status`` from ``host:port``.

    Raises:
        StatusUnavailable: with the one line that says what went wrong and the fix.
    """
    conn = http.client.HTTPConnection(host, port, timeout=REQUEST_TIMEOUT)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        conn.request("GET", "/status", headers=headers)
        response = conn.getresponse()
        body = response.read()
    except ConnectionRefusedError:
        raise StatusUnavailable(
            f"nothing listens on {addr} (connection refused) — fix: start agentd with --health-addr {addr}, "
            "or give --addr the address the daemon's --health-addr names"
        ) from None
    except TimeoutError:
        raise StatusUnavailable(
            f"{addr} did not answer within {REQUEST_TIMEOUT:g} s — fix: check that it is the daemon's "
            "--health-addr and that the daemon is not stopped (kill -CONT)"
        ) from None
    except OSError as exc:
        raise StatusUnavailable(
            f"cannot reach {addr} ({exc.strerror or exc}) — fix: check the host and port "
            "(the daemon's --health-addr)"
        ) from None
    except http.client.HTTPException as exc:
        raise StatusUnavailable(
            f"{addr} does not speak HTTP ({type(exc).__name__}) — fix: give --addr the daemon's --health-addr"
        ) from None
    finally:
        conn.close()
    reason = body.decode("utf-8", "replace").strip().splitlines()[0] if body.strip() else ""
    if response.status == 401:
        raise StatusUnavailable(
            f"{addr} needs a bearer token — fix: --token-file FILE, the file the daemon's --status-token-file names"
            if not token
            else f"{addr} refused the token — fix: give the file the daemon's --status-token-file names"
        )
    if response.status == 404:
        raise StatusUnavailable(
            f"{addr} serves no /status ({reason[:120]}) — fix: give --addr the daemon's --health-addr "
            "(not --metrics-addr), of an agentd that has the status view"
        )
    if response.status != 200:
        raise StatusUnavailable(
            f"{addr} answered {response.status}: {reason[:300]}{FIX}check that --addr is the daemon's --health-addr"
        )
    try:
        doc = json.loads(body)
    except ValueError:
        doc = None
    if not isinstance(doc, dict) or not str(doc.get("schema", "")).startswith("agentd.status/"):
        raise StatusUnavailable(f"{addr} answered something that is not agentd's status — fix: check --addr")
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
                frame = json.dumps(doc, indent=2) + "\n" if as_json else render(doc, _width())
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
    return out


def _in_tree(agent: Any) -> object:
    """An agent's id, indented under its parent's (``└`` per level of depth)."""
    depth = agent.get("depth") if isinstance(agent, dict) else None
    ident = agent.get("id") if isinstance(agent, dict) else agent
    if isinstance(depth, int) and not isinstance(depth, bool) and 0 < depth <= 16:
        return f"{'  ' * (depth - 1)}└ {ident}"
    return ident

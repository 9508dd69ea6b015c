"""Agents that start agents: ``agent_start`` → the child's first model request (rfcs/0370, issue 36 item 8).

Run: ``.venv/bin/python bench/bench_subagents.py [--quick] [--timeline FILE] [--skip once,naive]``
(about 4 min on an idle machine, 10 at load 10, most of it the naive rows; ``--quick`` 1-3 min).

Every model is ``openai:gpt-4o-mini`` at a loopback fake of the OpenAI wire
(``tests/fakes/provider_server.py``) running in this process: it notes each
request's arrival on this process's clock (``time.perf_counter``, and the
wall clock beside it for agentd's telemetry ``ts``) and tells requests apart
by their first user message. A child's is ``CHILD t=T k=K``; anything else is
the root's, answered by the plan of the trial under way:

* fan-out of K: first reply, K tool calls of ``agent_start``
  (``{"instruction": "CHILD ...", "notify": false}``) in one message; second,
  ``agent_wait`` on the ids the starts answered; third, a final text. The
  trial's origin is the moment the fake hands the first reply to the socket
  (the parent's tool call); a child answers ``done`` at once and exits.
  "The model thinks" (``think``): the same, the first reply held
  :data:`THINK_S` first, as a real model takes time (the zygote's next spare
  is warm by then; with the instant fake it is not).
* sequential (the same 8 subtasks in one agent): 8 steps, each one tool call
  of the bundled memo server's ``memo_get`` and the model call after it
  (origin: the first tool-call reply; figure: the 8th request after it); and
  one reply with 8 ``memo_get`` calls, which the loop runs one after another
  (figure: the request after them).

Rows:

* (a) one ``agent_start`` → the child's first request, and (b) 8 in one reply
  → the 8th child's first request, in ``--mode reactive`` with a warm zygote:
  the root is started by a spawn route (memo over Streamable HTTP, a
  ``memo_set`` per trial, debounce 0), as a spawn route's agent is; each trial
  starts once every agent of the one before exited. (a), (b), their "model
  thinks" variants and the sequential trials are interleaved in one agentd.
* the same in ``--mode once``: a fresh ``agentd`` per trial, whose root is
  pre-forked and whose zygote starts lazily at the first ``agent_start``
  (reported apart: it includes the zygote's start).
* (c) the naive way: 8 ``agentd --mode once`` processes (the real console
  script) started in parallel by ``sh -c 'for ...; do agentd ... & done;
  wait'``: from the shell's start to the 8th process's first request.
* (d) the sequential rows above.

Floors, measured in the same run (in chunks between the reactive trials, agentd idle meanwhile):
``bench_spawn``'s path, the :class:`~agentd.supervisor.children.tree.Tree`
driven directly in a process of its own, a pre-warmed zygote, spawn → the
child's first request at the same kind of fake (1 child, and 8 spawned at
once → the 8th request); and, inside the reactive run, each child's own
``subagent.spawn`` (the reactor's decision) → its request. Stages come from
agentd's NDJSON telemetry (``--log-format json``): ``tool.call`` of
``agent_start`` (its ``ts`` minus ``latency_ms`` is when the hub took the
call), ``subagent.spawn``, ``subagent.start``, ``subagent.started`` (payload
handed to the forked child), the root's first ``model.call`` (the supervisor
took its usage report); ``ts`` has millisecond resolution (truncated, so 0.5 ms
is added). Each trial's CPU: agentd's tree (the supervisor, and the zygote with
the agents it reaped) and the memo server, ``psutil`` before the trigger and
after the last exit; for the once and naive runs every reaped process
(``RUSAGE_CHILDREN``). CPU does not move with the machine's load as the
latencies do: on a shared 2-core machine it says what a row costs.

``--timeline FILE`` (diagnosis): the reactive run writes ``AGENTD_TIMELINE``
and the stages of the (a) trials are printed (the root's own process is left
out, so its next model call does not hide the child's), with each process's
CPU in the (b) trials. The zygote is then a fresh interpreter
(``AGENTD_ZYGOTE_PREFORK=0``): one forked from the supervisor closes every
inherited descriptor, the timeline's with them, and its marks and its
children's are lost. ``--skip once,naive`` leaves those rows out.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import os
import resource
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil
import trio
from _util import ENV, PY, STEP_TIMEOUT, Agentd, fmt, machine_note, p50, pct, run_agentd, table

#: The model every agent uses (a name the price database knows, so pricing runs too).
SPEC = "openai:gpt-4o-mini"

#: Children in a fan-out, and subtasks of the sequential rows.
FAN = 8

#: Trials of each kind discarded before timing.
WARMUP = 3

#: The kinds of trial that fan out: ``fan`` (the fake answers at once) and ``think`` (the
#: root's tool-call reply is handed over after :data:`THINK_S`, as a real model takes time).
FANS = ("fan", "think")

#: How long the fake "thinks" before the ``think`` trials' tool-call reply: a fast real
#: model's latency. The zygote forks its next spare once the root's first request has left,
#: so by then it is warm (with the instant fake it is still warming when agent_start comes).
THINK_S = 0.25

#: The root's instruction (any request whose first user message is not a child's is the root's).
ROOT_INSTRUCTION = "bench-root: start the agents the plan says"

REACTIVE_CONFIG = """
mode = "reactive"
model = "{model}"
instruction = "{instruction}"
subscribe = ["memo:memo://notes"]

[[routes]]
name = "bench"
match = "memo://notes"
disposition = "spawn"
debounce = "0"
reread_on_start = false
"""


# ----------------------------------------------------------------------------- the fake's plans


@dataclass
class Trial:
    """One trial: what the root is told to do, and when each request came (this process's clocks)."""

    t: int
    kind: str
    """``fan`` (K ``agent_start``), ``think`` (the same after :data:`THINK_S`), ``steps`` (8 × memo_get +
    model call), ``tools`` (8 memo_get, one reply)."""
    k: int = 1
    reply_at: float | None = None
    """perf_counter when the fake handed the root its first (tool-call) reply to the socket: the origin."""
    reply_wall: float | None = None
    child_at: dict[int, float] = field(default_factory=dict)
    """Child k's first request (perf_counter)."""
    child_wall: dict[int, float] = field(default_factory=dict)
    child_ids: list[str] = field(default_factory=list)
    """The agent ids the starts answered, in call order."""
    root_at: list[float] = field(default_factory=list)
    """The root's requests after the origin (perf_counter)."""
    done: trio.Event = field(default_factory=trio.Event)
    """The root got its final reply."""
    cpu_ms: float | None = None
    """CPU the trial cost: agentd's whole tree (and the memo server), from the trigger until every agent exited."""


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


class Scripted:
    """The fake's handler: children answer at once; the root follows :attr:`trial`'s plan."""

    def __init__(self) -> None:
        self.trial: Trial | None = None
        self.by_t: dict[int, Trial] = {}
        self.unexpected: list[str] = []
        self.origins: dict[int, Trial] = {}
        """Replies not yet sent that are a trial's origin, by id."""

    def begin(self, trial: Trial) -> Trial:
        self.trial = trial
        self.by_t[trial.t] = trial
        return trial

    def __call__(self, request: Any) -> Any:
        from tests.fakes.provider_server import openai_reply

        return self._answer(request, time.perf_counter(), time.time(), openai_reply)

    def _answer(self, request: Any, now: float, wall: float, openai_reply: Callable[..., Any]) -> Any:
        body = request.json
        messages = body.get("messages", [])
        first = next((_text(m) for m in messages if m.get("role") == "user"), "")
        if first.startswith("CHILD "):
            fields = dict(part.split("=", 1) for part in first.split()[1:3])
            trial = self.by_t.get(int(fields["t"]))
            if trial is None:
                self.unexpected.append(first[:80])
            else:
                trial.child_at.setdefault(int(fields["k"]), now)
                trial.child_wall.setdefault(int(fields["k"]), wall)
            return openai_reply("done")
        trial = self.trial
        if trial is None:
            self.unexpected.append(first[:80])
            return openai_reply("NO_REPLY")
        replies = sum(1 for m in messages if m.get("role") == "assistant")
        if replies:
            trial.root_at.append(now)
        if trial.kind in FANS:
            if replies == 0:
                calls = [
                    (
                        f"call_{k}",
                        "agent_start",
                        json.dumps({"instruction": f"CHILD t={trial.t} k={k}", "notify": False}),
                    )
                    for k in range(trial.k)
                ]
                return self._origin(trial, openai_reply(None, tool_calls=calls))
            if replies == 1:
                results = [_text(m) for m in messages if m.get("role") == "tool"]
                try:
                    trial.child_ids = [json.loads(r)["id"] for r in results]
                except (ValueError, KeyError, TypeError):
                    self.unexpected.append(f"agent_start answered: {results[:1]}")
                    return self._final(trial, openai_reply("done"))
                return openai_reply(
                    None, tool_calls=[("wait", "agent_wait", json.dumps({"ids": trial.child_ids}))]
                )
            return self._final(trial, openai_reply("done"))
        memo_get = next(
            (
                t["function"]["name"]
                for t in body.get("tools", [])
                if t["function"]["name"].endswith("memo_get")
            ),
            None,
        )
        if memo_get is None:
            self.unexpected.append("the root has no memo_get tool")
            return self._final(trial, openai_reply("done"))

        def get(i: int) -> tuple[str, str, str]:
            return (f"get_{i}", memo_get, json.dumps({"key": f"k{i}"}))

        if trial.kind == "tools":
            if replies == 0:
                return self._origin(trial, openai_reply(None, tool_calls=[get(i) for i in range(FAN)]))
            return self._final(trial, openai_reply("done"))
        # steps: one tool call per model call
        if replies < FAN:
            reply = openai_reply(None, tool_calls=[get(replies)])
            return self._origin(trial, reply) if replies == 0 else reply
        return self._final(trial, openai_reply("done"))

    def _origin(self, trial: Trial, reply: Any) -> Any:
        """``reply`` is the trial's first tool-call reply: stamped when it is handed to the socket."""
        self.origins[id(reply)] = trial
        return reply

    def think_for(self, reply: Any) -> float:
        """Seconds to wait before sending ``reply`` (a ``think`` trial's first reply)."""
        trial = self.origins.get(id(reply))
        return THINK_S if trial is not None and trial.kind == "think" else 0.0

    def handing_over(self, reply: Any) -> None:
        trial = self.origins.pop(id(reply), None)
        if trial is not None:
            trial.reply_at, trial.reply_wall = time.perf_counter(), time.time()

    @staticmethod
    def _final(trial: Trial, reply: Any) -> Any:
        trial.done.set()
        return reply


@contextlib.asynccontextmanager
async def scripted_provider(tmp: Path) -> AsyncIterator[tuple[Scripted, dict[str, str]]]:
    """The fake in this trio run: ``(handler, environment pointing openai: at it)``."""
    from _providers import provider_env

    from tests.fakes.provider_server import ProviderServer

    class Server(ProviderServer):
        """Stamps a trial's origin as its reply goes to the socket (a ``think`` trial's after a wait)."""

        async def _send(self, stream: trio.SocketStream, reply: Any) -> bool:
            delay = handler.think_for(reply)
            if delay:
                await trio.sleep(delay)  # the model's latency, not a wait for a condition
            handler.handing_over(reply)
            return await super()._send(stream, reply)

    handler = Scripted()
    server = Server(handler=handler)
    async with trio.open_nursery() as nursery:
        await nursery.start(server.serve)
        yield handler, provider_env("openai", server.base_url, tmp)
        nursery.cancel_scope.cancel()


# ----------------------------------------------------------------------------- telemetry


def _wall(ev: dict[str, Any]) -> float:
    """An event's ``ts`` as epoch seconds, + 0.5 ms (``ts`` is truncated to the millisecond)."""
    return dt.datetime.fromisoformat(ev["ts"].replace("Z", "+00:00")).timestamp() + 0.0005


def _events(a: Agentd, mark: int, name: str) -> list[dict[str, Any]]:
    return [ln.ev for ln in a.lines[mark:] if ln.ev.get("event") == name]


async def settled(a: Agentd, mark: int, agents: int) -> None:
    """Until ``agents`` agents were spawned after ``mark`` and every one of them exited (bounded)."""
    with trio.fail_after(STEP_TIMEOUT):
        while True:
            spawned = {e["agent"] for e in _events(a, mark, "subagent.spawn")}
            exited = {e["agent"] for e in _events(a, mark, "subagent.exit")}
            if len(spawned) >= agents and spawned <= exited:
                return
            if a._eof:
                raise RuntimeError("agentd ended during a trial:\n" + "\n".join(a.raw[-20:]))
            await a._changed.wait()


def stages(a: Agentd, mark: int, trial: Trial) -> dict[str, list[float]]:
    """A fan-out trial's telemetry stages, ms after the origin (wall clocks), for its first and last child."""
    assert trial.reply_wall is not None
    ids = trial.child_ids
    out: dict[str, list[float]] = {}

    def put(name: str, wall: float) -> None:
        out.setdefault(name, []).append((wall - trial.reply_wall) * 1000)  # type: ignore[operator]

    roots = {e["agent"] for e in _events(a, mark, "subagent.spawn") if not e.get("parent")}
    calls = [e for e in _events(a, mark, "model.call") if e.get("agent") in roots]
    if calls:
        put("root: its first model.call (the supervisor took its usage report)", _wall(calls[0]))
    starts = [e for e in _events(a, mark, "tool.call") if e.get("tool") == "agent_start"]
    if starts:
        put(
            "hub took the first agent_start call (tool.call ts - latency_ms)",
            min(_wall(e) - e["latency_ms"] / 1000 for e in starts),
        )
        put("hub answered the last agent_start (tool.call)", max(_wall(e) for e in starts))
    # The children by their requests' arrival (ids are minted in the order the starts reach the reactor).
    order = sorted(trial.child_wall, key=trial.child_wall.__getitem__)
    picks = [("first", order[0])] if trial.k == 1 else [("first", order[0]), ("last", order[-1])]
    for tag, k in picks:
        if k >= len(ids):
            continue
        cid = ids[k]
        spawn = [e for e in _events(a, mark, "subagent.spawn") if e.get("agent") == cid]
        started = [e for e in _events(a, mark, "subagent.started") if e.get("agent") == cid]
        if spawn:
            put(f"{tag} child: subagent.spawn (the reactor's decision)", _wall(spawn[0]))
        if started:
            put(f"{tag} child: subagent.started (payload handed to the forked child)", _wall(started[0]))
        put(f"{tag} child: its first request at the provider", trial.child_wall[k])
    return out


# ----------------------------------------------------------------------------- reactive: a warm zygote


def _lat(trial: Trial, which: str) -> float:
    """ms from the origin to the first or last child's request (fan), or the last root request (sequential)."""
    assert trial.reply_at is not None
    if trial.kind in FANS:
        got = sorted(trial.child_at.values())
        if len(got) != trial.k:
            raise RuntimeError(f"trial {trial.t}: {len(got)} of {trial.k} children's requests arrived")
        return ((got[0] if which == "first" else got[-1]) - trial.reply_at) * 1000
    return (trial.root_at[FAN - 1 if trial.kind == "steps" else 0] - trial.reply_at) * 1000


def tree_cpu(pids: list[int]) -> float:
    """CPU seconds of ``pids`` and of their children they reaped (an agent is reaped by the zygote)."""
    total = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            t = psutil.Process(pid).cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def reaped_cpu() -> float:
    """CPU seconds of this process's reaped descendants (``RUSAGE_CHILDREN``)."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


async def reactive(
    tmp: Path,
    plan: list[tuple[str, int]],
    timeline: Path | None,
    before: Callable[[int], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """One reactive agentd (spawn route on memo://notes); ``plan``'s trials one after another.

    ``before(i)`` runs before trial ``i`` (the floors, interleaved, while agentd idles).
    """
    from bench_reactive import memo_http
    from mcp import Client

    cfg = tmp / "reactive.toml"
    cfg.write_text(REACTIVE_CONFIG.format(model=SPEC, instruction=ROOT_INSTRUCTION))
    results: dict[str, Any] = {"trials": [], "stages": {}, "spawn_to_request": []}
    async with scripted_provider(tmp) as (fake, env), memo_http() as url:
        if timeline is not None:
            from _providers import TIMELINE_ENV

            await trio.Path(timeline).unlink(missing_ok=True)
            # A zygote forked from the supervisor (rfcs/0365) closes every inherited descriptor,
            # the timeline's too, so its marks and its children's would be lost: a fresh one here.
            env = {**env, TIMELINE_ENV: str(timeline), "AGENTD_ZYGOTE_PREFORK": "0"}
        args = ["--config", str(cfg), "--mcp-http", f"memo={url}", "--log-format", "json"]
        async with run_agentd(args, env=env) as a, Client(url) as trigger:
            await a.wait_for("reactor.start")
            # A change before the listen stream is acknowledged would wake nobody.
            await a.wait_for("subscription.synced", lambda e: e.get("server") == "memo")
            await a.wait_for("zygote.ready")
            memo = [
                p.pid
                for p in psutil.Process().children()
                if "serve" in (cmd := " ".join(p.cmdline())) and "memo" in cmd
            ]
            seen: dict[str, int] = {}
            for i, (kind, k) in enumerate(plan):
                if before is not None:
                    await before(i)
                trial = fake.begin(Trial(i, kind, k))
                mark = len(a.lines)
                zygotes = [int(e["pid"]) for e in _events(a, 0, "zygote.ready")][-1:]
                pids = [a.proc.pid, *zygotes, *memo]
                cpu0 = tree_cpu(pids)
                await trigger.call_tool("memo_set", {"key": "trial", "value": i})
                try:
                    with trio.fail_after(STEP_TIMEOUT):
                        await trial.done.wait()
                    await settled(a, mark, 1 + (k if kind in FANS else 0))
                except trio.TooSlowError:
                    seen_lines = "\n".join(json.dumps(ln.ev) for ln in a.lines[mark:])
                    raise RuntimeError(
                        f"trial {i} ({kind} {k}) did not end in {STEP_TIMEOUT:g} s; the fake saw {trial}; "
                        f"agentd said:\n{seen_lines}\n" + "\n".join(a.raw[-20:])
                    ) from None
                trial.cpu_ms = (tree_cpu(pids) - cpu0) * 1000
                if fake.unexpected:
                    raise RuntimeError(f"unexpected requests at the fake: {fake.unexpected[:3]}")
                name = f"{kind}{k}" if kind in FANS else kind
                seen[name] = seen.get(name, 0) + 1
                if seen[name] <= WARMUP:
                    continue
                results["trials"].append(trial)
                if kind in FANS:
                    for stage, ms in stages(a, mark, trial).items():
                        results["stages"].setdefault((kind, k, stage), []).extend(ms)
                    for cid, kk in zip(trial.child_ids, range(trial.k), strict=False):
                        spawn = [e for e in _events(a, mark, "subagent.spawn") if e.get("agent") == cid]
                        if spawn and kk in trial.child_wall:
                            results["spawn_to_request"].append(
                                (kind, k, (trial.child_wall[kk] - _wall(spawn[0])) * 1000)
                            )
                    if timeline is not None and kind == "fan":
                        results.setdefault("timeline_trials", []).append(
                            (k, trial.reply_at, max(trial.child_at.values()), _root_pid(a, mark))
                        )
            results["zygote_fallbacks"] = a.count("subagent.spawn_fallback")
            await a.stop_and_wait()
    return results


def _root_pid(a: Agentd, mark: int) -> int | None:
    roots = {e["agent"] for e in _events(a, mark, "subagent.spawn") if not e.get("parent")}
    for e in _events(a, mark, "subagent.started"):
        if e["agent"] in roots:
            return int(e["pid"])
    return None


def _timeline_lines(path: Path) -> list[tuple[float, float, str, str]]:
    """The timeline's lines: (monotonic s, process CPU s, pid, mark name)."""
    out = []
    for raw in path.read_text().splitlines():
        parts = raw.split(" ", 4)
        if len(parts) >= 4:
            out.append((float(parts[0]), float(parts[1]), parts[2], parts[3]))
    return out


def timeline_report(path: Path, samples: list[tuple[int, float, float, int | None]]) -> None:
    """Stages of the (a) trials, and the CPU each process spent in the (b) trials, from the timeline.

    ``samples``: (K, origin, last child's request, the root's pid), perf_counter
    (the timeline's clock). The root's own marks (its next model call) are left
    out of (a)'s stages, so they do not stand for the child's.
    """
    from _timeline import report

    lines = _timeline_lines(path)
    one = path.with_name(path.name + ".a")
    with one.open("w") as f:
        for k, t0, t1, root in samples:
            if k != 1:
                continue
            f.write(f"{t0:.6f} 0 bench bench.t0\n")
            for t, cpu, pid, name in lines:
                if t0 <= t <= t1 and pid != str(root):
                    f.write(f"{t:.6f} {cpu:.6f} {pid} {name}\n")
            f.write(f"{t1:.6f} 0 bench provider.received\n")
    report(one, "(a) timeline, ms after the parent's agent_start reply (the root's process left out)")
    # (b): CPU per process from its first to its last mark inside the trial's window.
    per_kind: dict[str, list[float]] = {}
    for k, t0, t1, root in samples:
        if k == 1:
            continue
        spans: dict[str, list[float]] = {}
        names: dict[str, set[str]] = {}
        for t, cpu, pid, name in lines:
            if t0 <= t <= t1:
                spans.setdefault(pid, []).append(cpu)
                names.setdefault(pid, set()).add(name)
        children = [p for p, n in names.items() if n & {"child.forked", "child.assigned"}]
        for pid, cpus in spans.items():
            kind = (
                "root (its next model call)"
                if pid == str(root)
                else "children, all"
                if pid in children
                else "zygote"
                if "zygote.request" in names[pid]
                else "supervisor"
            )
            per_kind.setdefault(f"{kind}|{t0}", []).append((max(cpus) - min(cpus)) * 1000)
    summed: dict[str, list[float]] = {}
    for key, ms in per_kind.items():
        summed.setdefault(key.split("|")[0], []).append(sum(ms))
    table(
        f"(b) CPU ms per trial between each process's first and last mark before the {FAN}th request "
        "(timeline; a lower bound: the fork itself and work before a process's first mark are not seen)",
        ["process", "trials", "p50 CPU ms"],
        [[kind, len(ms), fmt(p50(ms))] for kind, ms in sorted(summed.items())],
    )


# ----------------------------------------------------------------------------- once: a lazy zygote


async def once(tmp: Path, plan: list[int]) -> list[tuple[Trial, float, float | None]]:
    """A fresh ``agentd --mode once`` per trial fanning out to K children: (trial, exec at, zygote.ready wall)."""
    out: list[tuple[Trial, float, float | None]] = []
    async with scripted_provider(tmp) as (fake, env):
        for i, k in enumerate(plan):
            trial = fake.begin(Trial(10_000 + i, "fan", k))
            args = ["--mode", "once", "-m", SPEC, "--ephemeral", "--log-format", "json", ROOT_INSTRUCTION]
            exec_at, cpu0 = time.perf_counter(), reaped_cpu()
            async with run_agentd(args, env=env, cwd=tmp) as a:
                rc = await a.proc.wait()
                await a.wait_eof()
            trial.cpu_ms = (reaped_cpu() - cpu0) * 1000
            if rc != 0:
                raise RuntimeError(f"agentd --mode once exited {rc}:\n" + "\n".join(a.raw[-20:]))
            if fake.unexpected:
                raise RuntimeError(f"unexpected requests at the fake: {fake.unexpected[:3]}")
            ready = [_wall(e) for e in _events(a, 0, "zygote.ready")]
            if i >= 2:  # the first runs warm the page cache
                out.append((trial, exec_at, ready[0] if ready else None))
    return out


# ----------------------------------------------------------------------------- (c) the naive way


def agentd_command() -> list[str]:
    """The real command: the console script next to this interpreter, else ``python -m agentd``."""
    script = Path(PY).parent / "agentd"
    return [str(script)] if script.exists() else [PY, "-m", "agentd"]


async def naive(tmp: Path, n: int) -> list[tuple[float, float, float, float]]:
    """8 ``agentd --mode once`` started by a shell loop: (first request, 8th request, all exited) ms
    after the shell's start, and the CPU ms they took (every process, reaped)."""
    out: list[tuple[float, float, float, float]] = []
    cmd = " ".join(shlex.quote(c) for c in agentd_command())
    async with scripted_provider(tmp) as (fake, env):
        for i in range(1 + n):
            trial = fake.begin(Trial(20_000 + i, "fan", FAN))
            script = (
                f"for k in {' '.join(str(k) for k in range(FAN))}; do "
                f'{cmd} --mode once -m {SPEC} --ephemeral -q "CHILD t={trial.t} k=$k" >/dev/null 2>&1 & '
                "done; wait"
            )
            t0, cpu0 = time.perf_counter(), reaped_cpu()
            await trio.run_process(
                ["sh", "-c", script], env={**ENV, **env}, cwd=str(tmp), stdin=subprocess.DEVNULL
            )
            end, cpu = time.perf_counter(), (reaped_cpu() - cpu0) * 1000
            got = sorted(trial.child_at.values())
            if len(got) != FAN:
                raise RuntimeError(f"naive: {len(got)} of {FAN} processes reached the provider")
            if i >= 1:
                out.append(((got[0] - t0) * 1000, (got[-1] - t0) * 1000, (end - t0) * 1000, cpu))
    return out


# ----------------------------------------------------------------------------- floors: bench_spawn's path


async def tree_fanout(k: int, n: int) -> dict[str, list[float]]:
    """bench_spawn's path (the Tree, a pre-warmed zygote): k spawns at once → the first and k-th request, ms."""
    import orjson
    from _providers import SPECS, fake_provider, provider_env
    from bench_spawn import WARMUP as SPAWN_WARMUP
    from bench_spawn import start_timed, tree_and_tools

    from agentd.events import ChildExited, TurnEnded, UsageReported
    from agentd.selfmcp.protocol import NextTurn, SpawnPayload, UsageVerdict

    first: list[float] = []
    last: list[float] = []
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        async with fake_provider("openai") as (fake, server):
            os.environ.update(provider_env("openai", server.base_url, Path(tmp)))
            send, recv = trio.open_memory_channel[Any](1000)
            prewarm = {"AGENTD_PREWARM_MODELS": orjson.dumps([SPECS["openai"]]).decode()}
            tree, tools = tree_and_tools(send, use_zygote=True, zygote_env=prewarm)
            async with trio.open_nursery() as nursery:
                await start_timed(nursery, tree)
                for i in range(SPAWN_WARMUP + n):
                    before = len(fake.arrivals)
                    alive = {f"f{i}_{j}" for j in range(k)}
                    t0 = time.perf_counter()
                    for agent in sorted(alive):
                        tree.spawn(
                            agent,
                            SpawnPayload(agent=agent, model=SPECS["openai"], instruction="hi", tools=tools),
                        )
                    with trio.fail_after(STEP_TIMEOUT):
                        while alive:
                            ev = await recv.receive()
                            if isinstance(ev, UsageReported):
                                ev.reply.answer(UsageVerdict(id=ev.report.id, proceed=True))
                            elif isinstance(ev, TurnEnded):
                                ev.reply.answer(NextTurn(id=ev.end.id, action="exit"))
                            elif isinstance(ev, ChildExited):
                                alive.discard(ev.agent)
                    got = fake.arrivals[before:]
                    if len(got) != k:
                        raise RuntimeError(f"floor: {len(got)} of {k} requests arrived")
                    if i >= SPAWN_WARMUP:
                        first.append((min(got) - t0) * 1000)
                        last.append((max(got) - t0) * 1000)
                nursery.cancel_scope.cancel()
    return {"first": first, "last": last}


async def floor(k: int, n: int) -> dict[str, list[float]]:
    """:func:`tree_fanout` in a process of its own (as bench_spawn --measure runs it)."""
    out = await trio.run_process(
        [PY, SELF, "--floor", str(k), "-n", str(n)], env=ENV, capture_stdout=True, stderr=sys.stderr
    )
    return json.loads(out.stdout.decode().strip().splitlines()[-1])


# ----------------------------------------------------------------------------- the run


def _row(
    name: str, xs: list[float], ref: float | None, b: float | None, cpu: list[float] | None = None
) -> list[object]:
    return [
        name,
        len(xs),
        fmt(p50(xs)),
        fmt(pct(xs, 0.9)),
        fmt(p50(xs) / ref) if ref else "",
        fmt(p50(xs) / b) if b else "",
        fmt(p50(cpu), 0) if cpu else "",
    ]


def reactive_plan(n_a: int, n_b: int, n_seq: int) -> list[tuple[str, int]]:
    """Rounds of interleaved trials, warm-ups included: (a) every round; (b) and (a) after a
    thinking model every other; (b) after a thinking model and the two sequential kinds every fourth."""
    plan: list[tuple[str, int]] = []
    for i in range(max(WARMUP + n_a, 2 * (WARMUP + n_b), 4 * (WARMUP + n_seq))):
        if i < WARMUP + n_a:
            plan.append(("fan", 1))
        if i % 2 == 0 and i // 2 < WARMUP + n_b:
            plan.append(("fan", FAN))
        if i % 2 == 1 and i // 2 < WARMUP + n_b:
            plan.append(("think", 1))
        if i % 4 == 1 and i // 4 < WARMUP + n_seq:
            plan.append(("steps", FAN))
        if i % 4 == 2 and i // 4 < WARMUP + n_seq:
            plan.append(("think", FAN))
        if i % 4 == 3 and i // 4 < WARMUP + n_seq:
            plan.append(("tools", FAN))
    return plan


async def main(quick: bool, timeline: str | None, skip: frozenset[str] = frozenset()) -> None:
    n_a, n_b, n_seq, n_once, n_naive = (10, 5, 3, 3, 1) if quick else (40, 20, 10, 10, 5)
    chunks = 2 if quick else 4
    print(
        f"bench_subagents: {machine_note()}; (a) n={n_a}, (b) n={n_b}, sequential n={n_seq} each, "
        f"once n={n_once} each, naive n={n_naive}; floors in {chunks} chunks between the reactive trials"
    )
    plan = reactive_plan(n_a, n_b, n_seq)
    floors: dict[int, dict[str, list[float]]] = {1: {"first": [], "last": []}, FAN: {"first": [], "last": []}}
    at = {j * len(plan) // chunks for j in range(chunks)}

    async def floors_chunk(i: int) -> None:
        if i not in at:
            return
        for k, n in ((1, max(2, n_a // chunks)), (FAN, max(2, n_b // chunks))):
            got = await floor(k, n)
            floors[k]["first"] += got["first"]
            floors[k]["last"] += got["last"]

    started = machine_note()
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp_s:
        tmp = Path(tmp_s)
        r = await reactive(tmp, plan, Path(timeline) if timeline else None, floors_chunk)
        t_reactive, mid = time.monotonic(), machine_note()
        # Two warm-up runs (page cache), then K = 1 and K = 8 in turn.
        o = [] if "once" in skip else await once(tmp, [1, FAN] * (1 + n_once))
        nv = [] if "naive" in skip else await naive(tmp, n_naive)
    ended = machine_note()

    def fan(kind: str, k: int) -> list[Trial]:
        return [t for t in r["trials"] if t.kind == kind and t.k == k]

    def cpu(trials: list[Trial]) -> list[float]:
        return [t.cpu_ms for t in trials if t.cpu_ms is not None]

    ta, tb, ts, tt = fan("fan", 1), fan("fan", FAN), fan("steps", FAN), fan("tools", FAN)
    ta2, tb2 = fan("think", 1), fan("think", FAN)
    a = [_lat(t, "first") for t in ta]
    b = [_lat(t, "last") for t in tb]
    f1, f8 = floors[1]["first"], floors[FAN]["last"]

    def s2r(kind: str, k: int) -> list[float]:
        return [ms for kd, kk, ms in r["spawn_to_request"] if kd == kind and kk == k]

    o1 = [t for t, _, _ in o if t.k == 1]
    o8 = [t for t, _, _ in o if t.k == FAN]
    once8_exec = [(max(t.child_at.values()) - ex) * 1000 for t, ex, _ in o if t.k == FAN]
    zready = [(z - t.reply_wall) * 1000 for t, _, z in o if z is not None and t.reply_wall is not None]
    pb = p50(b)
    think = f"the parent's model took {THINK_S * 1000:.0f} ms"
    print(
        f"\nload at the start: {started}; after the reactive run ({t_reactive - t_start:.0f} s): {mid}; "
        f"at the end: {ended}"
    )
    table(
        "agent_start -> the child's first request at a loopback openai: provider; ms after the parent's tool-call "
        "reply was handed to the socket; x floor = p50 / its floor's p50; x (b) = p50 / (b)'s p50; CPU = the "
        "trial's CPU ms (agentd's tree and the memo server, trigger to the last exit; once/naive: every process)",
        ["what", "n", "p50 ms", "p90 ms", "x floor", "x (b)", "CPU ms p50"],
        [
            _row("(a) reactive, warm zygote: 1 agent_start -> the child's request", a, p50(f1), pb, cpu(ta)),
            _row(f"(a) ... when {think} (its spare is warm)", [_lat(t, "first") for t in ta2], p50(f1), pb),
            _row("floor: Tree spawn (pre-warmed zygote) -> request (bench_spawn's path)", f1, None, pb),
            _row(
                "in-run: the child's subagent.spawn -> its request ((a) trials)", s2r("fan", 1), p50(f1), pb
            ),
            _row(f"in-run: the same when {think}", s2r("think", 1), p50(f1), pb),
            _row(
                f"(b) reactive: {FAN} agent_start in one reply -> the {FAN}th child's request",
                b,
                p50(f8),
                1.0,
                cpu(tb),
            ),
            _row("(b) ... -> the first child's request", [_lat(t, "first") for t in tb], None, pb),
            _row(f"(b) ... when {think}", [_lat(t, "last") for t in tb2], p50(f8), pb),
            _row(f"floor: Tree, {FAN} spawns at once -> the {FAN}th request", f8, None, pb),
            _row(
                "in-run: each child's subagent.spawn -> its request ((b) trials)",
                s2r("fan", FAN),
                p50(f8),
                pb,
            ),
            _row(
                "once, lazy zygote: 1 agent_start -> the child's request",
                [_lat(t, "first") for t in o1],
                None,
                pb,
                cpu(o1),
            ),
            _row(
                f"once, lazy zygote: {FAN} agent_start -> the {FAN}th child's request",
                [_lat(t, "last") for t in o8],
                None,
                pb,
                cpu(o8),
            ),
            _row(f"once: exec of agentd -> the {FAN}th child's request", once8_exec, None, pb),
            _row("once: the agent_start reply -> zygote.ready (ts)", zready, None, None),
            _row(
                f"(c) naive: {FAN} agentd once processes from a shell loop -> the {FAN}th's first request",
                [x[1] for x in nv],
                None,
                pb,
                [x[3] for x in nv],
            ),
            _row("(c) ... -> the first process's first request", [x[0] for x in nv], None, pb),
            _row(f"(c) ... -> all {FAN} exited", [x[2] for x in nv], None, pb),
            _row(
                f"(d) one agent, {FAN} steps (memo_get + model call each) -> the {FAN}th request",
                [_lat(t, "last") for t in ts],
                None,
                pb,
                cpu(ts),
            ),
            _row(
                f"(d) one agent, one reply with {FAN} memo_get (run in turn) -> the next request",
                [_lat(t, "last") for t in tt],
                None,
                pb,
                cpu(tt),
            ),
        ],
    )
    kinds = [
        ("fan", 1, "(a)"),
        ("think", 1, "(a), model thinks"),
        ("fan", FAN, "(b)"),
        ("think", FAN, "(b), model thinks"),
    ]
    names = {st for _, _, st in r["stages"]}

    def order(stage: str) -> float:
        got = r["stages"].get(("fan", FAN, stage)) or r["stages"].get(("fan", 1, stage))
        return p50(got) if got else float("inf")

    table(
        f"where the time goes: p50 ms after the parent's tool-call reply (telemetry ts; 'first' and 'last' child "
        f"by their requests' arrival; 'model thinks': {think})",
        ["stage", *(label for _, _, label in kinds)],
        [
            [st, *(fmt(p50(r["stages"].get((kd, k, st), []))) for kd, k, _ in kinds)]
            for st in sorted(names, key=order)
        ],
    )
    pa = p50(a)
    print(
        f"\ngoals: (a) p50 <= 10 ms: {'met' if pa <= 10 else 'NOT met'} ({pa:.2f} ms; floor {p50(f1):.2f} ms, "
        f"{pa / p50(f1):.2f}x); (b) p50 <= 50 ms: {'met' if pb <= 50 else 'NOT met'} ({pb:.2f} ms; floor "
        f"{p50(f8):.2f} ms, {pb / p50(f8):.2f}x); zygote fallbacks in the reactive run: {r['zygote_fallbacks']}"
    )
    if timeline and r.get("timeline_trials"):
        timeline_report(Path(timeline), r["timeline_trials"])


#: This script, run again to measure a floor in a process of its own.
SELF = str(Path(__file__).resolve())

if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer trials (1-3 min)")
    ap.add_argument(
        "--timeline", metavar="FILE", help="write agentd's timeline to FILE and print (a)'s stages"
    )
    ap.add_argument(
        "--skip",
        default="",
        metavar="PARTS",
        help="comma-separated parts not to run: once, naive (diagnosis; the reactive run and floors always run)",
    )
    ap.add_argument("--floor", type=int, metavar="K", help=argparse.SUPPRESS)
    ap.add_argument("-n", type=int, default=10, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.floor:
        print(json.dumps(trio.run(tree_fanout, args.floor, args.n)))
    else:
        trio.run(main, args.quick, args.timeline, frozenset(filter(None, args.skip.split(","))))

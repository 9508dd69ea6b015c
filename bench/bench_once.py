"""``agentd --mode once`` start → result, against the bare SDK floor, in the same run.

Run: ``/work/venv/bin/python bench/bench_once.py [-n 5]`` (about 20-30 s).

agentd: the whole command, wall time from exec to exit (exit code 0 checked):
``python -m agentd --mode once --model script:S --mcp-stdio 'memo=python -m agentd serve memo' TEXT``,
where the script makes one ``memo__memo_set`` call and then answers.

Floors, interleaved with the agentd runs so they see the same machine load:

* ``sdk in-process``: this process (``mcp`` already imported) starts the same
  memo server with ``mcp.Client(StdioServerParameters(...))`` and makes one
  ``call_tool("memo_set")``: the cost of the server plus one call.
* ``sdk fresh process``: the same as a fresh ``python -c`` (interpreter start
  and ``import mcp`` included): the floor of any Python CLI doing this job.

The phase table splits agentd's median run by telemetry arrival time.

``--providers`` (about 2 min) runs the same command with ``openai:`` and
``anthropic:`` models against a loopback fake provider (one tool call, then
the answer: two model requests), with this checkout's code and with the code
of ``--prev-ref`` (default: the merge base with ``main``), runs of the two
alternating; and with ``bedrock:`` (the official SDK) on this checkout's
code. It reports the whole command, ``supervisor.start`` → the root's
``subagent.spawn`` (start-up: zygote and memo server ready) and spawn →
first ``model.call``, the last two from agentd's own timestamps (ms).

``--job`` (about 1-2 min) is the Kubernetes Job case side by side with the
floor a user would write instead: a bare script (``mcp`` SDK + ``httpx2`` in
a fresh interpreter) that starts the same memo server, lists its tools, asks
a loopback ``openai:`` provider (real Chat Completions wire format), makes
the one tool call the model asks for, asks again and prints the answer. The
two run alternately, ``-n`` times each; with ``--llm PATH`` a peer too:
the ``llm`` CLI with its ``llm-tools-mcp`` plugin (installed in a throwaway
virtualenv: it needs ``mcp<2``), the fake declared as an extra OpenAI model
and the memo server in its ``mcp.json``; with ``--fast-agent PATH`` another:
``fast-agent go --message`` (it needs Python >= 3.12: a virtualenv of its
own) with the fake as its ``generic`` provider and the memo server in a
``fastagent.config.yaml`` (it streams, so the fake answers it as server-sent
events). Every side's last request must carry ``memo_set``'s result. Reported: wall time (exec → exit),
the final answer → process exit (the fake's answer to the last request →
the exit seen here), and the PSS of each side's own process tree (agentd:
supervisor, zygote, agents; not the MCP server), sampled when the last model
request arrives (every process is alive then; the fake answers after the
sample), also as its anonymous part alone (``Pss_Anon``: file-backed pages
are left out, whose PSS moves with how many other processes on the machine
map the same libraries). ``--prev-ref REF`` adds agentd at commit REF as a
side of its own ("agentd previous", run from its own extracted code), so a
change is measured before and after in one run.
"""

from __future__ import annotations

import argparse
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import trio
from _util import ENV, PY, REPO, STEP_TIMEOUT, MiB, fmt, machine_note, p50, run_agentd, table, write_script
from mcp import Client, StdioServerParameters

SERVER = [PY, "-m", "agentd", "serve", "memo"]

FLOOR_SCRIPT = f"""
import trio
from mcp import Client, StdioServerParameters
async def main():
    async with Client(StdioServerParameters(command={SERVER[0]!r}, args={SERVER[1:]!r})) as c:
        r = await c.call_tool("memo_set", {{"key": "task", "value": "bench"}})
        assert not r.is_error, r
trio.run(main)
"""

PHASES = [
    ("supervisor.start", "interpreter + agentd imports"),
    ("subagent.spawn", "zygote + memo server ready, root spawned"),
    ("model.call", "child forked, self-MCP connected, 1st model call"),
    ("tool.call", "memo__memo_set through the supervisor"),
    ("turn.end", "2nd model call, answer"),
    ("supervisor.exit", "reactor done (root answered)"),
    ("exit", "teardown: kill ladder, server and zygote stop, interpreter exit"),
]


async def run_agentd_once(
    model: str, env: dict[str, str] | None = None, cwd: Path = REPO
) -> tuple[float, dict[str, float]]:
    """One ``agentd --mode once``; returns (wall seconds, first arrival of each telemetry event in s).

    ``ts:EVENT`` keys hold agentd's own timestamp of each event's first
    occurrence (Unix seconds, millisecond resolution): arrival here can batch
    lines that were written apart.
    """
    args = ["--mode", "once", "--model", model, "--mcp-stdio", "memo=" + " ".join(SERVER), "save it"]
    t0 = time.perf_counter()
    async with run_agentd(args, env=env, cwd=cwd) as a:
        with trio.fail_after(STEP_TIMEOUT):
            code = await a.proc.wait()
        wall = time.perf_counter() - t0
        await a.wait_eof()
    if code != 0:
        raise RuntimeError(f"agentd --mode once exited {code}:\n" + "\n".join(a.raw[-20:]))
    firsts: dict[str, float] = {"exit": wall}
    for ln in a.lines:
        firsts.setdefault(ln.ev["event"], ln.t - t0)
        if "ts" in ln.ev:
            firsts.setdefault("ts:" + ln.ev["event"], _unix(ln.ev["ts"]))
    return wall, firsts


def _unix(ts: str) -> float:
    import datetime as dt

    return dt.datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


async def sdk_in_process() -> float:
    t0 = time.perf_counter()
    with trio.fail_after(STEP_TIMEOUT):
        async with Client(StdioServerParameters(command=SERVER[0], args=SERVER[1:], env=ENV)) as client:
            result = await client.call_tool("memo_set", {"key": "task", "value": "bench"})
    if result.is_error:
        raise RuntimeError(f"memo_set failed: {result}")
    return time.perf_counter() - t0


async def sdk_fresh_process() -> float:
    t0 = time.perf_counter()
    with trio.fail_after(STEP_TIMEOUT):
        await trio.run_process([PY, "-c", FLOOR_SCRIPT], env=ENV, stdin=subprocess.DEVNULL)
    return time.perf_counter() - t0


BARE_SCRIPT = """
import os, sys
import httpx2, orjson, trio
from mcp import Client, StdioServerParameters

async def main():
    base, key = os.environ["OPENAI_BASE_URL"], os.environ["OPENAI_API_KEY"]
    async with Client(StdioServerParameters(command=sys.argv[1], args=sys.argv[2:-1])) as mcp:
        tools = [
            {"type": "function", "function": {"name": t.name, "description": t.description or "",
             "parameters": t.input_schema}}
            for t in (await mcp.list_tools()).tools
        ]
        messages = [{"role": "user", "content": sys.argv[-1]}]
        async with httpx2.AsyncClient(timeout=60) as http:
            while True:
                r = await http.post(base + "/chat/completions", headers={"authorization": "Bearer " + key},
                                    json={"model": "gpt-4o-mini", "messages": messages, "tools": tools})
                r.raise_for_status()
                msg = r.json()["choices"][0]["message"]
                messages.append(msg)
                if not msg.get("tool_calls"):
                    print(msg["content"])
                    return
                for call in msg["tool_calls"]:
                    res = await mcp.call_tool(call["function"]["name"], orjson.loads(call["function"]["arguments"]))
                    text = "\\n".join(getattr(c, "text", "") for c in res.content)
                    messages.append({"role": "tool", "tool_call_id": call["id"], "content": text})

trio.run(main)
"""


def tree_pss(pid: int) -> tuple[int, dict[str, int], int]:
    """PSS of ``pid`` and its descendants, MCP servers left out: (bytes, by role, anonymous bytes).

    The anonymous part (``Pss_Anon``) leaves out the file-backed pages
    (interpreter, libraries): their PSS also depends on how many other
    processes on the machine map the same files at that moment.
    """
    import psutil
    from _util import descendants, role_of

    by_role: dict[str, int] = {}
    anon = 0
    root = psutil.Process(pid)
    command = root.cmdline()
    procs = [root, *descendants(pid)]
    for p in procs:
        if p.pid == pid:
            role = "supervisor"
        elif p.ppid() == pid and p.cmdline() == command:
            role = "agent"  # forked from the supervisor (a once root): its command line is agentd's
        else:
            role = role_of(p)
        if role.startswith("server:"):
            continue
        try:
            pss = p.memory_full_info().pss
            anon += _pss_anon(p.pid)
        except (psutil.Error, OSError):
            continue
        by_role[role] = by_role.get(role, 0) + pss
    return sum(by_role.values()), by_role, anon


def _pss_anon(pid: int) -> int:
    with open(f"/proc/{pid}/smaps_rollup") as f:
        for line in f:
            if line.startswith("Pss_Anon:"):
                return int(line.split()[1]) * 1024
    return 0


def _set_call(request: Any) -> Any:
    """The model's first answer: call the offered tool whose name ends in ``memo_set``."""
    from tests.fakes.provider_server import openai_reply

    names = [t["function"]["name"] for t in request.json.get("tools") or []]
    tool = next(n for n in names if n.endswith("memo_set"))
    return openai_reply(tool_calls=[("c1", tool, '{"key": "task", "value": "bench"}')])


def _llm_setup(tmp: Path, base_url: str) -> dict[str, str]:
    """The environment of an ``llm`` run: the fake as an extra OpenAI model, the memo server for llm-tools-mcp."""
    import json

    home = tmp / "llm-home"
    (home / "mcp").mkdir(parents=True, exist_ok=True)
    (home / "extra-openai-models.yaml").write_text(
        f'- model_id: fake-mini\n  model_name: gpt-4o-mini\n  api_base: "{base_url}/v1"\n  supports_tools: true\n'
    )
    servers = {"mcpServers": {"memo": {"command": SERVER[0], "args": SERVER[1:]}}}
    (home / "mcp" / "mcp.json").write_text(json.dumps(servers))
    return {"LLM_USER_PATH": str(home), "LLM_TOOLS_MCP_CONFIG_DIR": str(home / "mcp")}


def _fast_agent_setup(tmp: Path, base_url: str) -> Path:
    """A directory holding a ``fastagent.config.yaml``: the fake as the ``generic`` provider, the memo server.

    fast-agent runs with this directory as its working directory (its home,
    sessions and logs stay there); its log is off and its console output quiet.
    """
    import json

    home = tmp / "fast-agent"
    home.mkdir(parents=True, exist_ok=True)
    config = {  # JSON is YAML
        "default_model": "generic.gpt-4o-mini",
        "generic": {"api_key": "sk-bench", "base_url": base_url + "/v1"},
        "mcp": {"servers": {"memo": {"command": SERVER[0], "args": SERVER[1:]}}},
        "logger": {"type": "none", "progress_display": False, "show_chat": False, "show_tools": False},
    }
    (home / "fastagent.config.yaml").write_text(json.dumps(config))
    return home


def _as_sse(request: Any, reply: Any) -> Any:
    """``reply`` (a Chat Completions body) as a streamed answer when ``request`` asks for one (fast-agent does)."""
    import json

    from tests.fakes.provider_server import Reply

    if not request.json.get("stream"):
        return reply
    body = reply.json
    message = body["choices"][0]["message"]
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content")}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    head = {k: body[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    chunks = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {
            **head,
            "choices": [{"index": 0, "delta": {}, "finish_reason": body["choices"][0]["finish_reason"]}],
        },
    ]
    if "usage" in body and (request.json.get("stream_options") or {}).get("include_usage"):
        chunks.append({**head, "choices": [], "usage": body["usage"]})
    sse = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
    return Reply(body=sse.encode(), headers={"content-type": "text/event-stream"})


async def job_run(
    side: str, tmp: Path, llm: str | None = None, prev: Path | None = None, fast_agent: str | None = None
) -> dict[str, Any]:
    """One Job-shaped run of ``side`` ("agentd", "agentd previous", "bare", "llm" or "fast-agent").

    Returns wall, answer → exit and PSS. Every side must send both model
    requests (the first one offering ``memo_set``) and print the answer;
    the last request must carry ``memo_set``'s result (the tool was called).
    """
    from _providers import fake_provider, provider_env

    from tests.fakes.provider_server import openai_reply

    replies: list[Any] = [_set_call, openai_reply("saved")]
    out: dict[str, Any] = {}
    pid_box: list[int] = []

    async with fake_provider("openai", None) as (fake, server):

        def handler(request: Any) -> Any:
            fake.arrivals.append(time.perf_counter())
            if len(replies) == 1 and pid_box:  # the last request: every process is alive
                out["pss"], out["pss_by_role"], out["pss_anon"] = tree_pss(pid_box[0])
            reply = replies.pop(0)
            if callable(reply):
                reply = reply(request)
            if len(replies) == 0:
                out["final_request"] = request.json
            out["answered"] = time.perf_counter()
            return _as_sse(request, reply)

        server._handler = handler
        env = {**ENV, **provider_env("openai", server.base_url, tmp)}
        cwd = REPO
        if side == "agentd previous":
            from _providers import code_env

            assert prev is not None
            env.update(code_env(prev))
            cwd = prev  # python -m imports the package in its working directory first
        if side.startswith("agentd"):
            argv = [
                PY,
                "-m",
                "agentd",
                "--mode",
                "once",
                "--model",
                "openai:gpt-4o-mini",
                "--mcp-stdio",
                "memo=" + " ".join(SERVER),
                "save it",
            ]
        elif side == "llm":
            assert llm is not None
            env.update(_llm_setup(tmp, server.base_url))
            argv = [llm, "-m", "fake-mini", "-T", "MCP", "--no-stream", "save it"]
        elif side == "fast-agent":
            assert fast_agent is not None
            cwd = _fast_agent_setup(tmp, server.base_url)
            argv = [
                fast_agent,
                "go",
                "--config-path",
                str(cwd / "fastagent.config.yaml"),
                "--servers",
                "memo",
                "--model",
                "generic.gpt-4o-mini",
                "--quiet",
                "--message",
                "save it",
            ]
        else:
            argv = [PY, "-c", BARE_SCRIPT, *SERVER, "save it"]
        t0 = time.perf_counter()
        proc = await trio.lowlevel.open_process(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            cwd=str(cwd),
        )
        pid_box.append(proc.pid)
        assert proc.stdout is not None
        stdout = b""
        with trio.fail_after(STEP_TIMEOUT):
            while chunk := await proc.stdout.receive_some(65536):
                stdout += chunk
            code = await proc.wait()
        end = time.perf_counter()
    tool_results = [
        str(m.get("content"))
        for m in out.get("final_request", {}).get("messages", [])
        if m.get("role") == "tool"
    ]
    if code != 0 or b"saved" not in stdout or replies or not any("bench" in t for t in tool_results):
        raise RuntimeError(
            f"{side} run failed: exit {code}, stdout {stdout[:200]!r}, replies left {len(replies)}, "
            f"tool results in the last request {tool_results!r}"
        )
    out.update(wall=end - t0, answer_to_exit=end - out["answered"])
    return out


async def job_main(n: int, llm: str | None, prev_ref: str | None, fast_agent: str | None = None) -> None:
    import contextlib

    from _providers import code_env, previous_code

    print(f"bench_once --job: {machine_note()}; n={n} per side (+1 warm-up each), alternating")
    sides = [
        "agentd",
        *(["agentd previous"] if prev_ref else []),
        "bare",
        *(["llm"] if llm else []),
        *(["fast-agent"] if fast_agent else []),
    ]
    runs: dict[str, list[dict[str, Any]]] = {side: [] for side in sides}
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="agentd-bench-"))
        prev = stack.enter_context(previous_code(prev_ref)) if prev_ref else None
        if prev is not None:
            print(f"agentd previous: {prev_ref}")
            _check_code("previous", prev, code_env(prev))
        for i in range(n + 1):
            for side in sides if i % 2 == 0 else sides[::-1]:
                r = await job_run(side, Path(tmp), llm, prev, fast_agent)
                if i:
                    runs[side].append(r)
    print(f"load average at the end: {machine_note()}")
    bare_wall = p50([r["wall"] for r in runs["bare"]])
    bare_pss = max(r["pss"] for r in runs["bare"])
    bare_anon = max(r["pss_anon"] for r in runs["bare"])
    rows = []
    for side, rs in runs.items():
        walls = [r["wall"] for r in rs]
        tails = [r["answer_to_exit"] for r in rs]
        pss = [r["pss"] for r in rs]
        roles = rs[-1]["pss_by_role"]
        rows.append(
            [
                side,
                len(rs),
                fmt(p50(walls) * 1000, 0),
                fmt(min(walls) * 1000, 0),
                fmt(p50(walls) / bare_wall),
                fmt(p50(tails) * 1000, 1),
                fmt(max(pss) / MiB, 1),
                fmt(max(pss) / bare_pss),
                fmt(p50(pss) / MiB, 1),
                fmt(max(r["pss_anon"] for r in rs) / MiB, 1),
                fmt(max(r["pss_anon"] for r in rs) / bare_anon),
                " ".join(f"{k} {v / MiB:.1f}" for k, v in sorted(roles.items())),
            ]
        )
    table(
        "--mode once, one stdio tool call + two openai: model calls at a loopback provider, vs a bare "
        "mcp SDK + httpx2 script doing the same (fresh process each)",
        [
            "side",
            "n",
            "wall p50 ms",
            "wall min ms",
            "x bare",
            "answer->exit p50 ms",
            "peak PSS MiB",
            "x bare PSS",
            "PSS p50 MiB",
            "peak anon PSS MiB",
            "x bare anon",
            "PSS by process (last run)",
        ],
        rows,
    )
    agentd_wall = p50([r["wall"] for r in runs["agentd"]])
    for peer in ("llm", "fast-agent"):
        if peer in runs:
            print(
                f"agentd wall p50 / {peer} wall p50: {agentd_wall / p50([r['wall'] for r in runs[peer]]):.2f}"
            )


async def main(n: int) -> None:
    print(f"bench_once: {machine_note()}; n={n} (+1 warm-up each)")
    agentd: list[float] = []
    phases: list[dict[str, float]] = []
    inproc: list[float] = []
    fresh: list[float] = []
    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp:
        model = write_script(
            Path(tmp) / "once.json",
            [
                {
                    "tool_calls": [
                        {"name": "memo__memo_set", "arguments": {"key": "task", "value": "{instruction}"}}
                    ]
                },
                {"text": "saved: {last_tool_result}"},
            ],
            then="stop",
        )
        for i in range(n + 1):
            wall, firsts = await run_agentd_once(model)
            a = await sdk_in_process()
            b = await sdk_fresh_process()
            if i:
                agentd.append(wall)
                phases.append(firsts)
                inproc.append(a)
                fresh.append(b)
    ref = p50(fresh)
    table(
        "agentd --mode once (script model, one memo_set over stdio) vs the SDK doing the same; ms",
        ["what", "n", "p50 ms", "min ms", "max ms", "x sdk fresh process"],
        [
            [
                name,
                len(xs),
                fmt(p50(xs) * 1000, 0),
                fmt(min(xs) * 1000, 0),
                fmt(max(xs) * 1000, 0),
                fmt(p50(xs) / ref),
            ]
            for name, xs in (
                ("agentd --mode once (whole command)", agentd),
                ("floor: sdk fresh process (python -c, server, 1 call)", fresh),
                ("floor: sdk in-process (server start + 1 call)", inproc),
            )
        ],
    )
    rows = []
    prev = 0.0
    for event, what in PHASES:
        at = p50([f[event] for f in phases if event in f])
        rows.append([event, what, fmt(at * 1000, 0), fmt((at - prev) * 1000, 0)])
        prev = at
    table(
        "where agentd's time goes (median first arrival of each telemetry event)",
        ["event", "phase", "at ms", "+ms"],
        rows,
    )
    print(f"agentd overhead over the fresh-process SDK floor: {(p50(agentd) - ref) * 1000:.0f} ms (p50)")


def _check_code(side: str, root: Path, env: dict[str, str]) -> None:
    """Refuse to compare unless ``python -m agentd`` from ``root`` imports the package under ``root``."""
    probe = [PY, "-c", "import agentd; print(agentd.__file__)"]
    found = subprocess.check_output(probe, cwd=root, env=env, text=True).strip()
    if not Path(found).resolve().is_relative_to(root.resolve()):
        raise RuntimeError(f"the {side} side would run {found}, not the code under {root}")


async def providers_main(n: int, prev_ref: str | None) -> None:
    from _providers import SPECS, code_env, fake_provider, merge_base, previous_code, provider_env

    from tests.fakes.provider_server import anthropic_reply, openai_reply

    ref = prev_ref or merge_base()
    print(
        f"bench_once --providers: {machine_note()}; n={n} per side (+1 warm-up each); previous code: {ref[:12]}"
    )
    walls: dict[tuple[str, str], list[float]] = {}
    spawn_to_call: dict[tuple[str, str], list[float]] = {}
    start_to_spawn: dict[tuple[str, str], list[float]] = {}

    def replies(provider: str) -> list[Any]:
        if provider == "openai":
            call = ("c1", "memo__memo_set", '{"key": "task", "value": "bench"}')
            return [openai_reply(tool_calls=[call]), openai_reply("saved")]
        return [
            anthropic_reply(None, tool_uses=[("t1", "memo__memo_set", {"key": "task", "value": "bench"})]),
            anthropic_reply("saved"),
        ]

    async def once(
        provider: str, side: str, code: tuple[Path, dict[str, str]], tmp: Path, record: bool
    ) -> None:
        root, code_vars = code
        async with fake_provider(provider, replies(provider)) as (_fake, server):
            env = {**code_vars, **provider_env(provider, server.base_url, tmp)}
            wall, firsts = await run_agentd_once(SPECS[provider], env, cwd=root)
        if record:
            walls.setdefault((provider, side), []).append(wall)
            spawn_to_call.setdefault((provider, side), []).append(
                firsts["ts:model.call"] - firsts["ts:subagent.spawn"]
            )
            start_to_spawn.setdefault((provider, side), []).append(
                firsts["ts:subagent.spawn"] - firsts["ts:supervisor.start"]
            )

    with tempfile.TemporaryDirectory(prefix="agentd-bench-") as tmp, previous_code(ref) as prev:
        # Each side runs from its own code's root: ``python -m`` imports the package in its
        # working directory first, so from this checkout both sides would run this code.
        sides = [("this", (REPO, code_env(REPO))), ("previous", (prev, code_env(prev)))]
        for side, (root, code_vars) in sides:
            _check_code(side, root, code_vars)
        for i in range(n + 1):
            for provider in ("openai", "anthropic"):
                for side, code in sides if i % 2 == 0 else sides[::-1]:
                    await once(provider, side, code, Path(tmp), record=i > 0)
            await once("bedrock", "this", sides[0][1], Path(tmp), record=i > 0)

    rows = []
    for (provider, side), xs in walls.items():
        base = walls.get((provider, "previous"), xs)
        calls = spawn_to_call[(provider, side)]
        starts = start_to_spawn[(provider, side)]
        rows.append(
            [
                SPECS[provider].split(":")[0] + ":",
                side,
                len(xs),
                fmt(p50(xs) * 1000, 0),
                fmt(min(xs) * 1000, 0),
                fmt(p50(xs) / p50(base)),
                fmt(p50(starts) * 1000, 0),
                fmt(p50(calls) * 1000, 1),
            ]
        )
    table(
        "agentd --mode once against a loopback provider (tool call + answer); ms; ratio = p50 / previous code's p50",
        [
            "model",
            "code",
            "n",
            "p50 ms",
            "min ms",
            "x previous",
            "start -> root spawned ms",
            "spawn -> 1st model.call ms",
        ],
        rows,
    )


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("-n", type=int, default=5, help="timed repetitions of each (default 5)")
    ap.add_argument(
        "--providers", action="store_true", help="openai:/anthropic: vs the previous code, and bedrock:"
    )
    ap.add_argument(
        "--prev-ref",
        help="--providers: the commit to compare with (default: merge base with main); "
        "--job: also run agentd at this commit (an 'agentd previous' side)",
    )
    ap.add_argument("--job", action="store_true", help="the Job case vs a bare mcp + httpx2 script")
    ap.add_argument(
        "--llm", metavar="PATH", help="--job: also run `llm` + llm-tools-mcp (the `llm` executable of a venv)"
    )
    ap.add_argument(
        "--fast-agent",
        metavar="PATH",
        help="--job: also run fast-agent (`fast-agent go --message`, the `fast-agent` executable of a venv)",
    )
    args = ap.parse_args()
    if args.job:
        trio.run(job_main, args.n, args.llm, args.prev_ref, args.fast_agent)
    elif args.providers:
        trio.run(providers_main, args.n, args.prev_ref)
    else:
        trio.run(main, args.n)

"""Caps on what a model may create (rfcs/0265), through the real ``agentd`` command.

A scripted model asks for far more than the caps allow in one reply: 100
``subscribe`` calls against an SDK-written server, 60 against the bundled kube
server (with the fake kubectl of ``tests/fakes``). Each call past a cap comes
back to the model as a tool error naming the cap, the setting that raises it
and what to do; ``/metrics`` counts the refusals; telemetry says it once; the
daemon keeps working (the next change still reaches the agent) and nothing
reconnects.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.support.agentd_proc import PY, REPO, drain
from tests.support.files import edit
from tests.support.kube import Cluster
from tests.support.leftovers import AllowedFiles, tagged_env
from tests.support.routing import (
    START,
    STEP,
    health_base,
    memo_server,
    scrape,
    script,
    sdk_server,
    supervised,
)
from tests.support.supervised import alive

pytestmark = pytest.mark.fault

FAKES = REPO / "tests" / "fakes"

ENDPOINTS = ["--health-addr", "127.0.0.1:0", "--metrics-addr", "127.0.0.1:0"]


def subscribe(uri: str) -> dict[str, Any]:
    return {"name": "subscribe", "arguments": {"uri": uri}}


def tool_results(out: str) -> list[dict[str, Any]]:
    """The ``tool_result`` lines of a ``--output stream-json`` run, in call order."""
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [line for line in lines if line["type"] == "tool_result"]


def replies(out: str) -> list[str]:
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    return [line["result"] for line in lines if line["type"] == "reply"]


# --------------------------------------------------------------------------- L1: agentd's own caps


@pytest.mark.parametrize(
    ("cap", "env", "allowed", "refusal"),
    [
        (
            "max_self_subscriptions_per_session",
            {},
            64,
            "subscribe 'note://k63' refused: this session already holds 64 subscriptions, the limit "
            "(max_self_subscriptions_per_session = 64); unsubscribe from a URI you no longer need and try "
            "again (an operator raises the limit with --max-self-subscriptions-per-session / "
            "AGENTD_MAX_SELF_SUBSCRIPTIONS_PER_SESSION)",
        ),
        (
            "max_self_subscriptions",
            {"AGENTD_MAX_SELF_SUBSCRIPTIONS": "10"},
            10,
            "subscribe 'note://k9' refused: the sessions of this agentd already hold 10 subscriptions "
            "together, the limit (max_self_subscriptions = 10); unsubscribe from a URI you no longer need "
            "and try again (an operator raises the limit with --max-self-subscriptions / "
            "AGENTD_MAX_SELF_SUBSCRIPTIONS)",
        ),
    ],
)
async def test_l1_a_hundred_subscribes_in_one_reply_stop_at_the_cap_and_the_daemon_goes_on(
    tmp_path: Path, cap: str, env: dict[str, str], allowed: int, refusal: str
) -> None:
    memo_file = tmp_path / "memo.json"
    # The first call is the memo notes (inside the cap), then 99 notes of the SDK server.
    calls = [subscribe("memo://notes"), *(subscribe(f"note://k{i}") for i in range(99))]
    model = script(tmp_path, [{"tool_calls": calls}, {"text": "subscribed"}, {"text": "woken: {input}"}])
    args = [
        "--mode", "schedule", "--interval", "1h", "--output", "stream-json", *ENDPOINTS,
        "--mcp-stdio", sdk_server(tmp_path, "notes"), "--mcp-stdio", memo_server(memo_file),
        "--model", model, "subscribe to every note",
    ]  # fmt: skip
    async with supervised(args, env=env) as a:
        base = await health_base(a)
        await a.wait_event("turn.end", timeout=START)
        metrics = await scrape(base)
        # The daemon keeps working: a change to a URI the session holds wakes it.
        edit(memo_file, {"todo": "ship it"})
        await a.wait_event("turn.end", count=2, timeout=STEP)
        await drain(a)
    results = tool_results(a.out)
    assert len(results) == 100
    assert [r["is_error"] for r in results] == [False] * allowed + [True] * (100 - allowed)
    refused = [r["content"] for r in results if r["is_error"]]
    assert refused[0] == refusal
    assert all(text.startswith("subscribe 'note://k") and f"({cap} = " in text for text in refused)
    assert metrics[("agentd_limit_refusals_total", (("limit", cap),))] == 100 - allowed
    others = [v for (name, labels), v in metrics.items() if name == "agentd_limit_refusals_total"]
    assert sum(others) == 100 - allowed
    # Said once, however often the model hit it; counted every time.
    [reached] = a.find("limit.reached")
    assert (reached["limit"], reached["value"], reached["uri"]) == (cap, allowed, f"note://k{allowed - 1}")
    assert a.find("supervisor.exit")[0]["counters"]["limit_refusals"] == 100 - allowed
    # Nothing else was disturbed: no reconnect, every allowed subscription established once.
    assert not a.find("server.state", lambda e: e["state"] in ("restarting", "failed"))
    assert len(a.find("upstream.connected")) == 2
    assert len(a.find("self.subscribe")) == allowed
    assert replies(a.out) == [
        "subscribed",
        "woken: These resources changed (re-read what you need; act on the current state):\n"
        "- memo://notes on memo (updated)",
    ]


# --------------------------------------------------------------------------- L2: the kube server's cap


@pytest.fixture
def cluster(tmp_path: Path, allow_files: AllowedFiles) -> Any:
    control = tmp_path / "cluster"
    control.mkdir()
    allow_files("cluster/*")  # the fake cluster: list files, watch FIFOs, the run log
    c = Cluster(control)
    yield c
    c.close()


def pod(name: str, rv: str) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "uid": name, "resourceVersion": rv},
    }


@pytest.mark.slow
async def test_l2_sixty_subscribes_to_the_kube_server_start_at_most_32_kubectl_watchers(
    tmp_path: Path, cluster: Cluster
) -> None:
    resources = [f"r{i}" for i in range(60)]
    for r in resources:
        cluster.set_list(r, [pod(f"{r}-pod", "1")])
    uris = [f"kube-events://watch/{r}" for r in resources]
    model = script(
        tmp_path,
        [
            {"tool_calls": [subscribe(uri) for uri in uris]},
            {"text": "subscribed; the last one said: {last_tool_result}"},
            {"text": "woken"},
        ],
    )
    fake = f"KUBECTL_FAKE_DIR={cluster.root} KUBECTL_FAKE_PYTHON={PY}"
    server = f"kube=env {fake} {PY} -m agentd serve kube --kubectl {FAKES / 'kubectl'}"
    args = [
        "--mode", "schedule", "--interval", "1h", "--output", "stream-json", *ENDPOINTS,
        "--mcp-stdio", server, "--model", model, "watch every resource",
    ]  # fmt: skip
    async with supervised(args) as a:
        base = await health_base(a)
        await a.wait_event("turn.end", timeout=START)
        # One change on every resource: each running watcher pushes it (a refused URI has none).
        for r in resources:
            cluster.event(r, "MODIFIED", pod(f"{r}-pod", "2"), pretty=False)
        await a.wait_event("resource.updated", lambda e: e["kind"] == "updated", count=32, timeout=STEP)
        watching = [run for run in cluster.runs() if "--watch" in run["argv"]]
        running = [run for run in watching if alive(run["pid"]) is not None]
        metrics = await scrape(base)
        # The daemon keeps working: those changes wake the session.
        await a.wait_event("turn.end", count=2, timeout=STEP)
        await drain(a)
    # The cap held: 32 kubectl watchers, for the first 32 URIs; none ever for the other 28.
    assert len(running) == 32
    assert sorted(run["argv"][1] for run in watching) == sorted(resources[:32])
    updated = {e["uri"] for e in a.find("resource.updated", lambda e: e["kind"] == "updated")}
    assert updated == set(uris[:32])
    results = tool_results(a.out)
    assert [r["is_error"] for r in results] == [False] * 32 + [True] * 28
    refusal = (
        "subscription to 'kube-events://watch/r32' refused: this server already runs 32 kubectl watchers "
        "(one per subscribed URI), its limit (--max-watchers 32 of `agentd serve kube`); unsubscribe from a "
        "URI you no longer need and subscribe again, or start the server with a higher --max-watchers"
    )
    assert results[32]["content"] == (
        "subscribe 'kube-events://watch/r32' failed: server 'kube' could not subscribe to "
        f"'kube-events://watch/r32': the server refused it: {refusal}"
    )
    # The calls share one listen stream: the server refuses it whole, naming the first URI
    # past its cap; each refused call is told that refusal, with its fix (rfcs/0261).
    cap = refusal.partition(" refused: ")[2]
    assert all(r["content"].endswith(cap) for r in results[32:])
    assert replies(a.out)[0].startswith("subscribed; the last one said: subscribe 'kube-events://watch/r59'")
    assert replies(a.out)[0].endswith(cap)
    assert metrics[("agentd_subscribe_failures_total", (("server", "kube"),))] == 28
    # Ten lines per 10 s window, the rest folded into telemetry.suppressed (rfcs/0113): 28 in all.
    said = len(a.find("self.subscribe_failed"))
    folded = sum(
        e["count"] for e in a.find("telemetry.suppressed", lambda e: e["of"] == "self.subscribe_failed")
    )
    assert said + folded == 28
    assert said >= 10  # the first ten of a window always pass
    assert not a.find("server.state", lambda e: e["state"] in ("restarting", "failed"))
    assert len(a.find("upstream.connected")) == 1
    assert replies(a.out)[1] == "woken"


# --------------------------------------------------------------------------- L3: the cap across a SIGKILL


async def test_l3_a_session_restored_after_sigkill_still_holds_its_count(
    tmp_path: Path, allow_files: AllowedFiles
) -> None:
    """The cap counts the subscriptions a journaled session gets back at start (rfcs/0265)."""
    allow_files("memo.json", "notes.json", "agentd.toml", "state/*", "script.json")
    memo_file = tmp_path / "memo.json"
    # Every child of the session plays the script from its first turn: the restored one asks again.
    calls = [subscribe("memo://notes"), *(subscribe(f"note://k{i}") for i in range(4))]
    model = script(tmp_path, [{"tool_calls": calls}, {"text": "watching"}])
    toml = tmp_path / "agentd.toml"
    toml.write_text(
        'subscribe = ["memo:memo://notes"]\n'
        '[[routes]]\nname = "start"\nmatch = "memo://notes"\ndisposition = "spawn"\ndebounce = "50ms"\n'
    )
    args = [
        "--mode", "reactive", "--config", str(toml), "--state-dir", str(tmp_path / "state"),
        "--max-self-subscriptions-per-session", "3", "--output", "stream-json",
        "--mcp-stdio", memo_server(memo_file), "--mcp-stdio", sdk_server(tmp_path, "notes"),
        "--model", model, "watch the notes",
    ]  # fmt: skip
    env = tagged_env(tmp_path)
    async with supervised(args, env=env) as a:
        # The start-up re-read spawns a1: memo://notes, k0 and k1 fit; k2 and k3 are refused.
        await a.wait_event("turn.end", timeout=START)
        a.proc.send_signal(signal.SIGKILL)  # no drain: the session's journal and routes are all that is left
        assert await a.wait_exit(START) == -signal.SIGKILL
    async with supervised(args, env=env) as b:
        # The restored session is woken by the start-up re-read and its new child asks for all five again.
        await b.wait_event("turn.end", timeout=START)
        await drain(b)
    first, second = ([r["is_error"] for r in tool_results(run.out)] for run in (a, b))
    assert first == second == [False, False, False, True, True]
    [restored] = b.find("journal.restored")
    assert restored["session"] == "a1"
    assert {e["uri"] for e in b.find("journal.subscription_restored")} == {
        "memo://notes",
        "note://k0",
        "note://k1",
    }
    assert tool_results(b.out)[3]["content"].startswith(
        "subscribe 'note://k2' refused: this session already holds 3 subscriptions, the limit "
        "(max_self_subscriptions_per_session = 3)"
    )

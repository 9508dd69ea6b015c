"""Webhooks end to end: signed POSTs drive a ``--mode reactive`` agentd through ``agentd serve webhook``.

agentd runs with the webhook server as its stdio server (started by agentd
from its configuration, as in production); the test is the webhook sender.
It checks that exactly one agent starts per delivery, that a redelivery
starts nothing, and that the examples in ``examples/webhooks/`` work as
shipped (``agentd`` on PATH is this checkout). Every wait is on telemetry
or a response, bounded; nothing sleeps.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

from tests.support.agentd_proc import REPO, Agentd, drain, run_agentd
from tests.support.webhooks import (
    alertmanager_firing,
    alertmanager_headers,
    dumps,
    example_env,
    free_port,
    generic_deploy,
    generic_headers,
    github_headers,
    github_issue_labeled,
    post,
    slack_headers,
    slack_message_event,
)

EXAMPLES = REPO / "examples"
#: agentd starts the webhook server (an interpreter and the SDK) and connects: seconds on a busy box.
CONNECT_BOUND = 60.0


def all_kinds_config(tmp_path: Path, port: int) -> Path:
    """One agentd, one webhook server with a source of each kind, one spawn route over every delivery."""
    config = tmp_path / "agentd.toml"
    config.write_text(
        f"""
mode = "reactive"
model = "script:{EXAMPLES / "scripts" / "webhook-issue.json"}"
system = "Read the delivery named by your task, then acknowledge it."
subscribe = ["webhook:webhook://*/event/*"]

[[routes]]
name = "deliveries"
match = "webhook://*/event/*"
disposition = "spawn"
debounce = "0s"
template = "{{uri}}"

[servers.webhook]
command = "agentd"
args = [
  "serve", "webhook", "--listen", "127.0.0.1:{port}", "--dir", "{tmp_path / "deliveries"}",
  "--source", "github=github,secret_env=GITHUB_WEBHOOK_SECRET",
  "--source", "slack=slack,secret_env=SLACK_SIGNING_SECRET",
  "--source", "alerts=alertmanager,token_env=ALERTMANAGER_TOKEN",
  "--source", "deploys=generic,secret_env=DEPLOY_HOOK_SECRET,signature_header=X-Signature-256,signature_prefix=sha256=,event_header=X-Event",
]
env = {{ GITHUB_WEBHOOK_SECRET = "${{GITHUB_WEBHOOK_SECRET}}", SLACK_SIGNING_SECRET = "${{SLACK_SIGNING_SECRET}}", ALERTMANAGER_TOKEN = "${{ALERTMANAGER_TOKEN}}", DEPLOY_HOOK_SECRET = "${{DEPLOY_HOOK_SECRET}}" }}
required = true
"""
    )
    return config


async def connected(a: Agentd) -> None:
    await a.wait_event("upstream.connected", lambda e: e["server"] == "webhook", timeout=CONNECT_BOUND)


async def handled(a: Agentd, uri: str, *, count: int) -> dict[str, Any]:
    """Wait for the ``count``-th spawn, check it was for ``uri``, and for that agent's turn to end."""
    deliver = await a.wait_event("route.deliver", count=count, timeout=CONNECT_BOUND)
    assert deliver["uris"] == [uri]
    spawn = await a.wait_event("subagent.spawn", count=count, timeout=CONNECT_BOUND)
    await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], timeout=CONNECT_BOUND)
    return spawn


#: How long one primer delivery may take to come out of a watch as a ``watch.event``.
PRIMER_BOUND = 20.0


async def primed(a: Agentd, send_primer: Callable[[int], Awaitable[None]]) -> None:
    """Wait until the route's watch has read its baseline: a delivery its filter drops comes out as a
    ``watch.event``. A watch takes its first read as the baseline, so a primer that lands before that
    read is history to it; then the next primer shows the watch is live (at most three)."""
    for attempt in range(3):
        seen = len(a.find("watch.event"))
        await send_primer(attempt)
        try:
            await a.wait_event("watch.event", count=seen + 1, timeout=PRIMER_BOUND)
            return
        except trio.TooSlowError:
            continue
    raise AssertionError(f"no primer came out of the watch:\n{a.tail()}")


async def test_each_kind_spawns_exactly_one_agent_per_delivery_and_none_for_a_redelivery(
    tmp_path: Path,
) -> None:
    port = free_port()
    args = ["--config", str(all_kinds_config(tmp_path, port)), "--verbose"]
    gh = dumps(github_issue_labeled())
    sl = dumps(slack_message_event("Ev0PV52K21"))
    am = dumps(alertmanager_firing())
    gen = dumps(generic_deploy())
    async with run_agentd(args, env=example_env(tmp_path, port)) as a:
        await connected(a)
        # GitHub: the delivery, then GitHub's "Redeliver" (same X-GitHub-Delivery).
        assert (await post(port, "/hooks/github", gh, github_headers(gh, "d-gh-1"))).json()[
            "duplicate"
        ] is False
        await handled(a, "webhook://github/event/d-gh-1", count=1)
        assert (await post(port, "/hooks/github", gh, github_headers(gh, "d-gh-1"))).json()[
            "duplicate"
        ] is True
        # Slack: the event, then Slack's retry (same event_id, X-Slack-Retry-Num).
        assert (await post(port, "/hooks/slack", sl, slack_headers(sl))).status == 200
        await handled(a, "webhook://slack/event/Ev0PV52K21", count=2)
        retry = {**slack_headers(sl), "X-Slack-Retry-Num": "1", "X-Slack-Retry-Reason": "http_timeout"}
        assert (await post(port, "/hooks/slack", sl, retry)).json()["duplicate"] is True
        # Alertmanager: one notification (alerts inside), then its retry (the same body).
        first = await post(port, "/hooks/alerts", am, alertmanager_headers())
        alert_id = first.json()["id"]
        await handled(a, f"webhook://alerts/event/{alert_id}", count=3)
        assert (await post(port, "/hooks/alerts", am, alertmanager_headers())).json() == {
            "ok": True, "id": alert_id, "duplicate": True,
        }  # fmt: skip
        # Generic: an Idempotency-Key, sent twice.
        assert (await post(port, "/hooks/deploys", gen, generic_headers(gen, key="run-42"))).status == 200
        await handled(a, "webhook://deploys/event/run-42", count=4)
        assert (await post(port, "/hooks/deploys", gen, generic_headers(gen, key="run-42"))).json()[
            "duplicate"
        ]
        # The pipeline is live and started nothing for the redeliveries: the next delivery is the 5th agent.
        gh2 = dumps(github_issue_labeled(number=1348))  # another event: another body
        assert (await post(port, "/hooks/github", gh2, github_headers(gh2, "d-gh-2"))).status == 200
        await handled(a, "webhook://github/event/d-gh-2", count=5)
        await drain(a)
    assert [e["uris"] for e in a.find("route.deliver")] == [
        ["webhook://github/event/d-gh-1"],
        ["webhook://slack/event/Ev0PV52K21"],
        [f"webhook://alerts/event/{alert_id}"],
        ["webhook://deploys/event/run-42"],
        ["webhook://github/event/d-gh-2"],
    ]
    assert len(a.find("subagent.spawn")) == 5
    acks = [c for c in a.find("tool.call") if c["tool"] == "ack"]
    assert [(c["server"], c["error"]) for c in acks] == [("webhook", None)] * 5
    # Each agent read its own delivery: the body it quoted is the one that was sent.
    out = a.out
    assert '"title":"Crash when the config file is empty"' in out
    assert '"text":"deploy is stuck, can someone look?"' in out
    assert '"alertname":"HighErrorRate"' in out
    assert '"url":"https://ci.example/run/42"' in out


async def test_the_github_example_as_shipped(tmp_path: Path) -> None:
    """examples/webhooks/github-issues.toml: a labelled issue starts one agent that reads and acknowledges it;
    a restart of agentd offers nothing again (the acknowledgement was kept)."""
    port = free_port()
    env = example_env(tmp_path, port)
    args = ["--config", str(EXAMPLES / "webhooks" / "github-issues.toml"), "--verbose"]
    body = dumps(github_issue_labeled(number=1347))
    async with run_agentd(args, env=env) as a:
        await connected(a)
        assert (
            await post(port, "/hooks/github", body, github_headers(body, "72d3162e-cc78-11e3"))
        ).status == 200
        await handled(a, "webhook://github/event/72d3162e-cc78-11e3", count=1)
        await drain(a)
    assert "Handled webhook://github/event/72d3162e-cc78-11e3" in a.out
    assert '"number":1347' in a.out
    async with run_agentd(args, env=env) as again:
        await connected(again)
        second = dumps(github_issue_labeled(number=1348))
        assert (await post(port, "/hooks/github", second, github_headers(second, "next-1"))).status == 200
        await handled(again, "webhook://github/event/next-1", count=1)  # the first one was not offered again
        await drain(again)


async def test_the_filtered_github_example_starts_an_agent_only_for_issues_labelled_agent(
    tmp_path: Path,
) -> None:
    port = free_port()
    args = ["--config", str(EXAMPLES / "webhooks" / "github-issues-filtered.toml"), "--verbose"]
    async with run_agentd(args, env=example_env(tmp_path, port)) as a:
        await connected(a)
        await a.wait_event(
            "watch.started", lambda e: e["uri"] == "webhook://github/events", timeout=CONNECT_BOUND
        )

        async def push(n: int) -> None:
            body = dumps({"ref": "refs/heads/main", "commits": []})
            assert (
                await post(port, "/hooks/github", body, github_headers(body, f"p-{n}", event="push"))
            ).status == 200

        await primed(a, push)
        bug = dumps(github_issue_labeled(number=5, label="bug"))
        assert (await post(port, "/hooks/github", bug, github_headers(bug, "b-1"))).status == 200
        agent = dumps(github_issue_labeled(number=7))
        assert (await post(port, "/hooks/github", agent, github_headers(agent, "a-1"))).status == 200
        spawn = await a.wait_event("subagent.spawn", timeout=CONNECT_BOUND)
        await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], timeout=CONNECT_BOUND)
        await drain(a)
    assert len(a.find("subagent.spawn")) == 1
    assert "issue #7 labelled agent: webhook://github/event/a-1" in a.out
    assert "#5" not in a.out


async def test_the_alertmanager_example_wakes_one_warm_on_call_session(tmp_path: Path) -> None:
    port = free_port()
    args = ["--config", str(EXAMPLES / "webhooks" / "alertmanager-oncall.toml"), "--verbose"]
    async with run_agentd(args, env=example_env(tmp_path, port)) as a:
        await connected(a)
        await a.wait_event(
            "watch.started", lambda e: e["uri"] == "webhook://alerts/events", timeout=CONNECT_BOUND
        )

        async def resolved(n: int) -> None:
            body = dumps({**alertmanager_firing(f"Resolved{n}"), "status": "resolved"})
            assert (await post(port, "/hooks/alerts", body, alertmanager_headers())).status == 200

        await primed(a, resolved)
        first = dumps(alertmanager_firing("HighErrorRate"))
        assert (await post(port, "/hooks/alerts", first, alertmanager_headers())).status == 200
        spawn = await a.wait_event("subagent.spawn", timeout=CONNECT_BOUND)
        assert (spawn["role"], spawn["session"]) == ("session", "oncall")
        await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], timeout=CONNECT_BOUND)
        second = dumps(alertmanager_firing("PodCrashLooping"))
        assert (await post(port, "/hooks/alerts", second, alertmanager_headers())).status == 200
        await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"], count=2, timeout=CONNECT_BOUND)
        await drain(a)
    assert len(a.find("subagent.spawn")) == 1  # the same warm session took both alerts
    out = a.out
    assert "HighErrorRate firing (1 alerts): 5xx ratio above 5% for 10 minutes" in out
    assert "PodCrashLooping firing (1 alerts)" in out
    acks = [(c["server"], c["error"]) for c in a.find("tool.call") if c["tool"] == "ack_through"]
    assert acks == [("webhook", None)] * 2

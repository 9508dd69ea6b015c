"""``agentd serve webhook`` through the real command: signed POSTs in, MCP resources out.

Each test starts the server (``--http`` for its MCP side, ``--listen`` for the
hooks, one source of each kind), sends real HTTP requests on fresh
connections as webhook senders do, and reads what the server shows with an
SDK client. Nothing sleeps: waits are on responses, pushes and process exits,
each bounded.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.client.subscriptions import ResourcesListChanged, ResourceUpdated

from tests.support.rawmcp import REPO, server_env
from tests.support.webhooks import (
    ALERTMANAGER_TOKEN,
    GENERIC_SECRET,
    GITHUB_EXAMPLE_BODY,
    GITHUB_EXAMPLE_SIGNATURE,
    GITHUB_SECRET,
    SECRET_ENV,
    SLACK_EXAMPLE_BODY,
    SLACK_EXAMPLE_SIGNATURE,
    SLACK_EXAMPLE_TIMESTAMP,
    SLACK_SECRET,
    alertmanager_firing,
    alertmanager_headers,
    dumps,
    free_port,
    generic_deploy,
    generic_headers,
    github_headers,
    github_issue_labeled,
    post,
    read_reply,
    slack_headers,
    slack_message_event,
    webhook_argv,
    webhook_server,
)

#: Bound on a push reaching a client after the POST that caused it was answered.
PUSH_BOUND = 20.0
#: Bound on the server cutting a slow client off (its --request-timeout is 1 s here).
CUT_BOUND = 30.0


async def read_json(client: Client, uri: str) -> object:
    result = await client.read_resource(uri)
    return json.loads(result.contents[0].text)  # type: ignore[union-attr]


async def delivery_events(client: Client, source: str) -> list[dict[str, object]]:
    doc = await read_json(client, f"webhook://{source}/events")
    assert isinstance(doc, dict)
    return [e for e in doc["events"] if e["type"] == "DELIVERY"]


async def status(client: Client) -> dict[str, object]:
    doc = await read_json(client, "webhook://status")
    assert isinstance(doc, dict)
    return doc


# --------------------------------------------------------------------------- published examples


async def test_the_published_examples_through_the_real_command(tmp_path: Path) -> None:
    """GitHub's example signature verifies and its body, text and no JSON, is stored as text (was:
    400, issue 37); Slack's example is signed right but from 2018: refused as stale, stored nowhere."""
    async with webhook_server(webhook_argv(str(tmp_path))) as server:
        headers = {
            "X-Hub-Signature-256": GITHUB_EXAMPLE_SIGNATURE,
            "X-GitHub-Event": "push",
            "X-GitHub-Delivery": "ex-1",
        }
        ok_sig = await post(server.hooks_port, "/hooks/github", GITHUB_EXAMPLE_BODY, headers)
        assert ok_sig.json() == {"ok": True, "id": "ex-1", "duplicate": False}
        bad = dict(headers, **{"X-Hub-Signature-256": "sha256=" + "0" * 64})
        refused = await post(server.hooks_port, "/hooks/github", GITHUB_EXAMPLE_BODY, bad)
        assert refused.status == 401
        assert refused.json()["error"].startswith("X-Hub-Signature-256 does not match the body")
        slack = {
            "Content-Type": "application/x-www-form-urlencoded",
            "X-Slack-Request-Timestamp": SLACK_EXAMPLE_TIMESTAMP,
            "X-Slack-Signature": SLACK_EXAMPLE_SIGNATURE,
        }
        stale = await post(server.hooks_port, "/hooks/slack", SLACK_EXAMPLE_BODY, slack)
        assert stale.status == 401
        assert "more than 300 s from this server's clock" in stale.json()["error"]
        async with Client(server.mcp_url) as client:
            delivery = await read_json(client, "webhook://github/event/ex-1")
            assert isinstance(delivery, dict)
            assert (delivery["body"], delivery["format"]) == ("Hello, World!", "text")
            assert [e["id"] for e in await delivery_events(client, "github")] == ["ex-1"]
            assert await delivery_events(client, "slack") == []
            st = await status(client)
            sources = st["sources"]
            assert isinstance(sources, dict)
            assert sources["github"]["refused"] == {"bad_signature": 1}
            assert sources["slack"]["refused"] == {"stale": 1}


# --------------------------------------------------------------------------- each kind


async def test_each_kind_stores_one_delivery_shown_as_resources_and_listed_while_pending(
    tmp_path: Path,
) -> None:
    async with webhook_server(webhook_argv(str(tmp_path))) as server, Client(server.mcp_url) as client:
        port = server.hooks_port
        gh = dumps(github_issue_labeled())
        r = await post(port, "/hooks/github", gh, github_headers(gh, "4d1a6c00-cc78-11e3-81ab-4c9367dc0958"))
        assert (r.status, r.json()) == (
            200,
            {"ok": True, "id": "4d1a6c00-cc78-11e3-81ab-4c9367dc0958", "duplicate": False},
        )
        sl = dumps(slack_message_event("Ev0PV52K21"))
        assert (await post(port, "/hooks/slack", sl, slack_headers(sl))).status == 200
        am = dumps(alertmanager_firing())
        r = await post(port, "/hooks/alerts", am, alertmanager_headers())
        assert r.status == 200
        alert_id = r.json()["id"]
        gen = dumps(generic_deploy())
        assert (await post(port, "/hooks/deploys", gen, generic_headers(gen, key="run-42"))).status == 200

        github = await delivery_events(client, "github")
        assert [(e["seq"], e["event"], e["id"]) for e in github] == [
            (1, "issues", "4d1a6c00-cc78-11e3-81ab-4c9367dc0958")
        ]
        assert github[0]["body"] == github_issue_labeled()
        assert [(e["event"], e["id"]) for e in await delivery_events(client, "slack")] == [
            ("message", "Ev0PV52K21")
        ]
        assert [(e["event"], e["id"]) for e in await delivery_events(client, "alerts")] == [
            ("firing", alert_id)
        ]
        assert [(e["event"], e["id"]) for e in await delivery_events(client, "deploys")] == [
            ("deploy.failed", "run-42")
        ]

        whole = await read_json(client, "webhook://github/event/4d1a6c00-cc78-11e3-81ab-4c9367dc0958")
        assert isinstance(whole, dict)
        assert (whole["event"], whole["seq"], whole["pending"], whole["kind"]) == (
            "issues",
            1,
            True,
            "github",
        )
        assert whole["headers"]["x-github-delivery"] == "4d1a6c00-cc78-11e3-81ab-4c9367dc0958"
        assert "x-hub-signature-256" not in whole["headers"]
        assert whole["body"]["label"]["name"] == "agent"
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert {
            "webhook://github/event/4d1a6c00-cc78-11e3-81ab-4c9367dc0958",
            "webhook://slack/event/Ev0PV52K21",
            f"webhook://alerts/event/{alert_id}",
            "webhook://deploys/event/run-42",
        } <= listed

        acked = await client.call_tool("ack", {"uri": "webhook://slack/event/Ev0PV52K21"})
        assert json.loads(acked.content[0].text)["acked"] == [1]  # type: ignore[union-attr]
        again = await client.call_tool("ack", {"uri": "webhook://slack/event/Ev0PV52K21"})
        assert json.loads(again.content[0].text)["already"] is True  # type: ignore[union-attr]
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert "webhook://slack/event/Ev0PV52K21" not in listed
        unknown = await client.call_tool("ack", {"uri": "webhook://slack/event/nope"})
        assert unknown.is_error
        assert "no delivery 'nope' in webhook://slack/events" in unknown.content[0].text  # type: ignore[union-attr]


async def test_answered_but_not_stored_ping_and_url_verification(tmp_path: Path) -> None:
    async with webhook_server(webhook_argv(str(tmp_path))) as server, Client(server.mcp_url) as client:
        ping = dumps({"zen": "Design for failure.", "hook_id": 292430182})
        r = await post(server.hooks_port, "/hooks/github", ping, github_headers(ping, "p-1", event="ping"))
        assert (r.status, r.json()["zen"]) == (200, "Design for failure.")
        challenge = dumps({"token": "x", "challenge": "3eZbrw1aBm2rZgRN", "type": "url_verification"})
        r = await post(server.hooks_port, "/hooks/slack", challenge, slack_headers(challenge))
        assert (r.status, r.json()) == (200, {"challenge": "3eZbrw1aBm2rZgRN"})
        assert await delivery_events(client, "github") == []
        assert await delivery_events(client, "slack") == []


# --------------------------------------------------------------------------- refusals


async def test_invalid_requests_are_refused_and_store_nothing(tmp_path: Path) -> None:
    argv = webhook_argv(str(tmp_path), "--max-body", "64KiB")
    async with webhook_server(argv) as server, Client(server.mcp_url) as client:
        port = server.hooks_port
        body = dumps(github_issue_labeled())
        cases: list[tuple[str, bytes, dict[str, str], int, str]] = [
            ("/hooks/github", body, github_headers(body, "b-1", secret="wrong"), 401, "does not match"),
            ("/hooks/github", body, {"X-GitHub-Event": "issues", "X-GitHub-Delivery": "b-2"}, 401, "no X-Hub-Signature-256"),
            ("/hooks/alerts", b"{}", alertmanager_headers("x" * 24), 401, "bearer token is wrong"),
            ("/hooks/deploys", b"{}", generic_headers(b"{other}", key="k"), 401, "does not match"),
            ("/hooks/nowhere", body, {}, 404, "no webhook source at '/hooks/nowhere'"),
            ("/hooks/github", b"x" * (64 * 1024 + 1), github_headers(b"x" * (64 * 1024 + 1), "b-3"), 413, "over this endpoint's limit of 65536 bytes"),
        ]  # fmt: skip
        deep = b"[" * 200 + b"]" * 200
        cases.append(("/hooks/github", deep, github_headers(deep, "b-4"), 400, "deeper than 64 levels"))
        bad_utf8 = b'{"title": "\xff\xfe"}'
        cases.append(
            ("/hooks/github", bad_utf8, github_headers(bad_utf8, "b-5"), 400, "not valid JSON in UTF-8")
        )
        for path, data, headers, code, reason in cases:
            r = await post(port, path, data, headers)
            assert (r.status, path) == (code, path), r.body
            assert reason in r.json()["error"]
            assert r.headers["connection"] == "close"
        r = await post(port, "/hooks/github", b"", {}, method="GET")
        assert (r.status, r.headers["allow"]) == (405, "POST")
        huge = {f"X-Filler-{i}": "y" * 1000 for i in range(40)}
        r = await post(port, "/hooks/github", body, huge)
        assert r.status == 431
        assert (await post(port, "/healthz", b"", {}, method="GET")).status == 200
        for source in ("github", "slack", "alerts", "deploys"):
            assert await delivery_events(client, source) == []
    assert all(p.stat().st_size == 0 for p in tmp_path.rglob("seg-*.jsonl"))  # noqa: ASYNC240


async def test_a_chunked_body_over_the_cap_is_refused_while_it_streams(tmp_path: Path) -> None:
    """The 413 comes once the cap is passed, long before the 8 MiB the client would send."""
    argv = webhook_argv(str(tmp_path), "--max-body", "64KiB")
    async with webhook_server(argv) as server:
        stream = await trio.open_tcp_stream("127.0.0.1", server.hooks_port)
        sent = 0
        head = (
            "POST /hooks/github HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nX-GitHub-Event: issues\r\n"
            "X-GitHub-Delivery: c-1\r\nX-Hub-Signature-256: sha256=" + "0" * 64 + "\r\n\r\n"
        ).encode()
        async with stream:
            await stream.send_all(head)
            chunk = b"10000\r\n" + b"z" * 0x10000 + b"\r\n"
            with trio.fail_after(CUT_BOUND):
                try:
                    for _ in range(128):
                        await stream.send_all(chunk)
                        sent += 0x10000
                except trio.BrokenResourceError:
                    pass  # the server answered and closed while we were still sending
                reply = await read_reply(stream)
        assert reply.status == 413
        assert sent < 128 * 0x10000


# --------------------------------------------------------------------------- slow and many clients


async def test_a_slowloris_is_cut_off_and_a_sender_gets_through_afterwards(tmp_path: Path) -> None:
    argv = webhook_argv(str(tmp_path), "--request-timeout", "1s")
    async with webhook_server(argv) as server, Client(server.mcp_url) as client:
        stream = await trio.open_tcp_stream("127.0.0.1", server.hooks_port)
        start = trio.current_time()
        trickle = (
            b"POST /hooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Event: issues\r\nX-Padding: " + b"a" * 2000
        )
        async with stream:
            with trio.fail_after(CUT_BOUND):
                try:
                    for byte in trickle:  # one byte at a time, forever if allowed
                        await stream.send_all(bytes([byte]))
                        await trio.sleep(0.05)
                except trio.BrokenResourceError:
                    pass
                reply = await read_reply(stream)
        assert reply.status == 408
        assert "did not arrive within 1 s" in reply.json()["error"]
        assert trio.current_time() - start >= 1.0
        body = dumps(github_issue_labeled())
        assert (
            await post(server.hooks_port, "/hooks/github", body, github_headers(body, "after-1"))
        ).status == 200
        assert [e["id"] for e in await delivery_events(client, "github")] == ["after-1"]
        connections = (await status(client))["connections"]
        assert isinstance(connections, dict)
        assert connections["timeouts"] >= 1


async def test_connections_still_sending_their_head_are_cut_for_a_sender(tmp_path: Path) -> None:
    """Every slot held by a connection that sent half a request line: a signed delivery is still
    answered 200, and the oldest held connection is the one cut (closed without an answer). Was: 503
    to every sender while the slots were held (issue 37)."""
    argv = webhook_argv(str(tmp_path), "--max-connections", "3", "--request-timeout", "60s")
    async with webhook_server(argv) as server, Client(server.mcp_url) as client:
        held = []
        for _ in range(3):
            s = await trio.open_tcp_stream("127.0.0.1", server.hooks_port)
            await s.send_all(b"POST /hooks/github HT")
            held.append(s)
        try:  # the listener accepts in the order of connecting: the three hold the slots first
            body = dumps(github_issue_labeled())
            reply = await post(server.hooks_port, "/hooks/github", body, github_headers(body, "ok-1"))
            assert reply.json() == {"ok": True, "id": "ok-1", "duplicate": False}
            with trio.fail_after(CUT_BOUND):
                assert await held[0].receive_some() == b""  # the oldest: cut, no answer
        finally:
            for s in held:
                await s.aclose()
        connections = (await status(client))["connections"]
        assert isinstance(connections, dict)
        assert connections["evicted"] >= 1
        assert connections["overloaded"] == 0


# --------------------------------------------------------------------------- secrets


async def test_secrets_appear_nowhere(tmp_path: Path) -> None:
    async with webhook_server(webhook_argv(str(tmp_path))) as server, Client(server.mcp_url) as client:
        body = dumps(github_issue_labeled())
        await post(server.hooks_port, "/hooks/github", body, github_headers(body, "s-1"))
        await post(server.hooks_port, "/hooks/github", body, github_headers(body, "s-2", secret="wrong"))
        await post(server.hooks_port, "/hooks/alerts", b"{}", alertmanager_headers("x" * 24))
        shown = [
            json.dumps(await read_json(client, uri))
            for uri in ("webhook://status", "webhook://github/events", "webhook://github/event/s-1")
        ]
        listed = (await client.list_resources()).model_dump_json()
        tools = (await client.list_tools()).model_dump_json()
    stored = b"".join(p.read_bytes() for p in tmp_path.rglob("*") if p.is_file())  # noqa: ASYNC240
    for secret in (GITHUB_SECRET, SLACK_SECRET, ALERTMANAGER_TOKEN, GENERIC_SECRET):
        assert secret not in server.text
        assert secret.encode() not in stored
        assert all(secret not in text for text in [*shown, listed, tools])
    assert "refused a request" in server.text  # the refusal was logged, its secret hidden
    assert "(bad_signature)" in server.text


# --------------------------------------------------------------------------- both eras


@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_new_deliveries_reach_subscribers_of_both_eras(tmp_path: Path, era: str) -> None:
    """Over stdio (the transport agentd uses): a 2026-07-28 listener and a handshake-era subscriber
    each hear the log change and the resource-list change a stored delivery makes."""
    port = free_port()
    argv = webhook_argv(str(tmp_path), listen=f"127.0.0.1:{port}")
    argv.remove("--http")
    argv.remove("127.0.0.1:0")
    params = StdioServerParameters(command=argv[0], args=argv[1:], env=server_env(**SECRET_ENV))
    send, seen = trio.open_memory_channel[str](100)

    async def on_message(message: object) -> None:
        root = getattr(message, "root", message)
        method = getattr(root, "method", None)
        if method == "notifications/resources/list_changed":
            send.send_nowait("list_changed")
        elif method == "notifications/resources/updated":
            send.send_nowait(str(root.params.uri))  # type: ignore[attr-defined]

    legacy = era == "legacy"
    async with (
        Client(
            params, mode="legacy" if legacy else "auto", message_handler=on_message if legacy else None
        ) as client,
        trio.open_nursery() as nursery,
    ):
        if legacy:
            caps = client.server_capabilities
            assert caps is not None
            assert caps.resources is not None
            assert caps.resources.list_changed
            await client.subscribe_resource("webhook://github/events")
        else:
            ready = trio.Event()

            async def pump() -> None:
                async with client.listen(
                    resource_subscriptions=["webhook://github/events"], resources_list_changed=True
                ) as sub:
                    ready.set()
                    async for event in sub:
                        if isinstance(event, ResourcesListChanged):
                            send.send_nowait("list_changed")
                        elif isinstance(event, ResourceUpdated):
                            send.send_nowait(str(event.uri))

            nursery.start_soon(pump)
            await ready.wait()
        body = dumps(github_issue_labeled())
        assert (await post(port, "/hooks/github", body, github_headers(body, "e-1"))).status == 200
        got: set[str] = set()
        with trio.fail_after(PUSH_BOUND):
            while not {"list_changed", "webhook://github/events"} <= got:
                got.add(await seen.receive())
        listed = {str(r.uri) for r in (await client.list_resources()).resources}
        assert "webhook://github/event/e-1" in listed
        nursery.cancel_scope.cancel()


# --------------------------------------------------------------------------- restarts


async def test_a_restart_keeps_dedupe_positions_and_acknowledgements(tmp_path: Path) -> None:
    bodies = {d: dumps(github_issue_labeled(number=n)) for n, d in enumerate(("k-1", "k-2"))}
    async with webhook_server(webhook_argv(str(tmp_path))) as server, Client(server.mcp_url) as client:
        port = server.hooks_port
        for d, body in bodies.items():
            assert (await post(port, "/hooks/github", body, github_headers(body, d))).status == 200
        await client.call_tool("ack", {"source": "github", "id": "k-1"})
    async with (
        webhook_server(webhook_argv(str(tmp_path), listen=f"127.0.0.1:{port}")) as again,
        Client(again.mcp_url) as client,
    ):
        body = bodies["k-1"]
        r = await post(port, "/hooks/github", body, github_headers(body, "k-1"))
        assert r.json() == {"ok": True, "id": "k-1", "duplicate": True}
        # The replay key of a signed body is read back too: k-1's body under a fresh id is k-1.
        r = await post(port, "/hooks/github", body, github_headers(body, "k-fresh"))
        assert r.json() == {"ok": True, "id": "k-1", "duplicate": True, "replay": True}
        assert [(e["seq"], e["id"]) for e in await delivery_events(client, "github")] == [(2, "k-2")]


# --------------------------------------------------------------------------- configuration


def serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentd", "serve", "webhook", *args],
        cwd=REPO,
        env=server_env(**(env or {})),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        ((), 2, "--source: None is not valid: configure at least one source"),
        (("--source", "gh=github,secret_env=GITHUB_WEBHOOK_SECRET", "--listen", "0.0.0.0:0"), 2, "--listen: '0.0.0.0:0' is not valid: bind a loopback address"),
        (("--source", "gh=github,secret=hunter2"), 2, "secrets never go on the command line"),
        (("--source", "gh=github,secret_env=UNSET_FOR_TEST"), 2, "the environment variable UNSET_FOR_TEST is not set"),
    ],
)  # fmt: skip
def test_bad_configuration_exits_2_before_anything_runs(
    tmp_path: Path, args: tuple[str, ...], code: int, message: str
) -> None:
    result = serve("--dir", str(tmp_path), *args, env=SECRET_ENV)
    assert result.returncode == code, result.stderr
    assert message in result.stderr
    assert "hunter2" not in result.stderr
    assert not (tmp_path / "gh").exists()


def test_a_busy_port_fails_at_start_with_the_fix(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        result = serve(
            "--dir", str(tmp_path), "--listen", f"127.0.0.1:{port}", "--source", "gh=github,secret_env=GITHUB_WEBHOOK_SECRET",
            env=SECRET_ENV,
        )  # fmt: skip
    assert result.returncode == 1
    assert f"cannot receive webhooks on 127.0.0.1:{port}" in result.stderr
    assert "choose another --listen" in result.stderr


async def test_a_sources_file_with_secret_files(tmp_path: Path) -> None:
    secret = tmp_path / "github.secret"
    secret.write_text(GITHUB_SECRET + "\n")
    config = tmp_path / "webhooks.toml"
    config.write_text(f'retain_count = 10\n[sources.github]\nkind = "github"\nsecret_file = "{secret}"\n')
    argv = webhook_argv(str(tmp_path / "store"), "--config", str(config), sources=())
    async with webhook_server(argv) as server, Client(server.mcp_url) as client:
        body = dumps(github_issue_labeled())
        assert (
            await post(server.hooks_port, "/hooks/github", body, github_headers(body, "f-1"))
        ).status == 200
        st = await status(client)
        sources = st["sources"]
        assert isinstance(sources, dict)
        assert sources["github"]["retain_count"] == 10
        assert sources["github"]["auth"] == f"X-Hub-Signature-256 with the secret from {secret}"

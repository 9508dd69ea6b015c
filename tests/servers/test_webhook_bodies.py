"""Replays, idempotency keys and bodies that are not JSON (fault catalog WH14-WH15, issue 37 items 5 and 11).

* WH14: a captured signed delivery sent again under fresh delivery ids is
  recognised by its signed body (source, event and body hashed; rfcs/0374):
  answered 200 as a replay, stored once, one agent through the published
  example (was: 30 replays, 30 agents). An ``Idempotency-Key`` is compared
  whole: keys that differ only after their first 1,024 characters are no
  longer taken for one delivery (past 1,024 a key is refused with 400).
* WH15: a generic source takes any body its sender sends: JSON stays JSON;
  a form, text or XML body is stored and served as text with its content
  type; GitHub's published signature example (``Hello, World!``) is stored
  once its signature verifies, through a GitHub source and a generic one
  (was: 400, "not valid JSON").

Through the real ``agentd serve webhook`` (and ``agentd`` with the
published example for the agents); every wait is bounded; nothing sleeps.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest
from mcp import Client

from tests.support.agentd_proc import REPO, run_agentd
from tests.support.leftovers import AllowedFiles
from tests.support.webhooks import (
    GITHUB_EXAMPLE_BODY,
    GITHUB_EXAMPLE_SIGNATURE,
    SOURCE_FLAGS,
    dumps,
    example_env,
    free_port,
    generic_headers,
    github_headers,
    github_issue_labeled,
    post,
    webhook_argv,
    webhook_server,
)

pytestmark = pytest.mark.fault

EXAMPLE = REPO / "examples" / "webhooks" / "github-issues.toml"
CONNECT_BOUND = 60.0
REPLAYS = 30

#: A generic source that checks GitHub's own header with GitHub's secret (GitHub's example works there).
GITHUB_AS_GENERIC = (
    "--source",
    "ghgen=generic,secret_env=GITHUB_WEBHOOK_SECRET,signature_header=X-Hub-Signature-256,"
    "signature_prefix=sha256=",
)


@pytest.fixture(autouse=True)
def _webhook_files(allow_files: AllowedFiles) -> None:
    allow_files("seg-*.jsonl", "state.json", "lock", "bin/agentd")


def stored_lines(directory: Path, source: str) -> list[dict[str, Any]]:
    return [
        json.loads(line)
        for seg in sorted((directory / source).glob("seg-*.jsonl"))
        for line in seg.read_bytes().splitlines()
    ]


async def read_json(client: Client, uri: str) -> Any:
    return json.loads((await client.read_resource(uri)).contents[0].text)  # type: ignore[union-attr]


async def test_wh14_a_replayed_signed_delivery_under_fresh_ids_starts_one_agent(tmp_path: Path) -> None:
    port = free_port()
    body = dumps(github_issue_labeled())
    other = dumps(github_issue_labeled(number=2))
    async with run_agentd(["--config", str(EXAMPLE), "--verbose"], env=example_env(tmp_path, port)) as a:
        await a.wait_event("upstream.connected", lambda e: e["server"] == "webhook", timeout=CONNECT_BOUND)
        first = await post(port, "/hooks/github", body, github_headers(body, "orig-1"))
        assert first.json() == {"ok": True, "id": "orig-1", "duplicate": False}
        for n in range(REPLAYS):
            replay = await post(port, "/hooks/github", body, github_headers(body, f"fresh-{n}"))
            assert replay.json() == {"ok": True, "id": "orig-1", "duplicate": True, "replay": True}
        # The pipeline is live: the next delivery (another body) is the second agent, and the last.
        assert (await post(port, "/hooks/github", other, github_headers(other, "next-1"))).status == 200
        await a.wait_event("subagent.exit", count=2, timeout=CONNECT_BOUND)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == 0, a.tail()
    assert [e["uris"] for e in a.find("route.deliver")] == [
        ["webhook://github/event/orig-1"],
        ["webhook://github/event/next-1"],
    ]
    assert len(a.find("subagent.spawn")) == 2
    assert [line["id"] for line in stored_lines(tmp_path / "deliveries", "github")] == ["orig-1", "next-1"]


async def test_wh14_idempotency_keys_are_compared_whole_and_bounded(tmp_path: Path) -> None:
    async with webhook_server(webhook_argv(str(tmp_path))) as server, Client(server.mcp_url) as client:
        port = server.hooks_port
        prefix = "k" * 1023
        for n, last in enumerate("xy"):  # 1,024 characters each, equal but for the last
            body = dumps({"build": n})
            reply = await post(port, "/hooks/deploys", body, generic_headers(body, key=prefix + last))
            assert reply.json()["duplicate"] is False, reply.body
        # Past 1,024 characters a key is refused, never cut (was: the two below were one delivery).
        for n, last in enumerate("xy"):
            body = dumps({"build": 10 + n})
            reply = await post(port, "/hooks/deploys", body, generic_headers(body, key=prefix + "z" + last))
            assert reply.status == 400
            assert reply.json()["error"] == (
                "Idempotency-Key is 1025 characters; send a key of at most 1024 (it is compared whole)"
            )
        status = await read_json(client, "webhook://status")
        assert status["sources"]["deploys"]["accepted"] == 2
        assert status["sources"]["deploys"]["refused"] == {"malformed": 2}
    assert len(stored_lines(tmp_path, "deploys")) == 2


FORM = b"From=%2B15005550006&Body=Hello+%C3%A9t%C3%A9&MessageSid=SM123"
XML = b'<?xml version="1.0"?><alert><name>disk</name><state>firing</state></alert>'


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        ("application/x-www-form-urlencoded", FORM),
        ("text/plain; charset=utf-8", "une alerte: disque plein à 95 %".encode()),
        ("application/xml", XML),
        (None, b"just some words, no JSON"),
    ],
    ids=["form", "text", "xml", "no-content-type"],
)
async def test_wh15_a_generic_source_stores_any_body_as_text_with_its_content_type(
    tmp_path: Path, content_type: str | None, body: bytes
) -> None:
    async with webhook_server(webhook_argv(str(tmp_path))) as server, Client(server.mcp_url) as client:
        headers = generic_headers(body, key="t-1")
        if content_type is None:
            del headers["Content-Type"]
        else:
            headers["Content-Type"] = content_type
        reply = await post(server.hooks_port, "/hooks/deploys", body, headers)
        assert reply.json() == {"ok": True, "id": "t-1", "duplicate": False}
        whole = await read_json(client, "webhook://deploys/event/t-1")
        assert whole["body"] == body.decode()
        assert (whole["format"], whole["content_type"]) == ("text", content_type)
        events = (await read_json(client, "webhook://deploys/events"))["events"]
        assert [(e["id"], e["body"], e["format"]) for e in events] == [("t-1", body.decode(), "text")]


async def test_wh15_json_stays_json_and_a_body_declared_json_must_be(tmp_path: Path) -> None:
    async with webhook_server(webhook_argv(str(tmp_path))) as server, Client(server.mcp_url) as client:
        port = server.hooks_port
        body = dumps({"service": "checkout"})
        assert (await post(port, "/hooks/deploys", body, generic_headers(body, key="j-1"))).status == 200
        whole = await read_json(client, "webhook://deploys/event/j-1")
        assert whole["body"] == {"service": "checkout"}
        assert "format" not in whole
        lie = b"<not>json</not>"
        refused = await post(port, "/hooks/deploys", lie, generic_headers(lie, key="j-2"))
        assert refused.status == 400
        assert "not valid JSON" in refused.json()["error"]
        binary = b"\xff\xfe\x00binary"
        headers = {**generic_headers(binary, key="j-3"), "Content-Type": "application/octet-stream"}
        refused = await post(port, "/hooks/deploys", binary, headers)
        assert refused.status == 400
        assert "neither JSON nor UTF-8 text" in refused.json()["error"]


async def test_wh15_githubs_published_example_is_stored_through_a_generic_source(tmp_path: Path) -> None:
    """Secret ``It's a Secret to Everybody``, body ``Hello, World!``: GitHub's documented signature."""
    argv = webhook_argv(str(tmp_path), sources=(*SOURCE_FLAGS, *GITHUB_AS_GENERIC))
    async with webhook_server(argv) as server, Client(server.mcp_url) as client:
        headers = {"X-Hub-Signature-256": GITHUB_EXAMPLE_SIGNATURE, "Idempotency-Key": "hello-1"}
        reply = await post(server.hooks_port, "/hooks/ghgen", GITHUB_EXAMPLE_BODY, headers)
        assert reply.json() == {"ok": True, "id": "hello-1", "duplicate": False}
        whole = await read_json(client, "webhook://ghgen/event/hello-1")
        assert (whole["body"], whole["format"]) == ("Hello, World!", "text")
        # The same signed body under another key: a replay of it, not a second delivery.
        again = {**headers, "Idempotency-Key": "hello-2"}
        replay = await post(server.hooks_port, "/hooks/ghgen", GITHUB_EXAMPLE_BODY, again)
        assert replay.json() == {"ok": True, "id": "hello-1", "duplicate": True, "replay": True}
        wrong = {**headers, "X-Hub-Signature-256": "sha256=" + "0" * 64}
        assert (await post(server.hooks_port, "/hooks/ghgen", GITHUB_EXAMPLE_BODY, wrong)).status == 401
    assert [line["id"] for line in stored_lines(tmp_path, "ghgen")] == ["hello-1"]

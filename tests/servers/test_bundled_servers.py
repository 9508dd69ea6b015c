"""The bundled servers, end to end through the real ``agentd`` command.

Each test runs ``agentd`` (``python -m agentd``) with one bundled server
(``agentd serve NAME``) as its upstream MCP server and the script model, makes
a real change the way another program would (a file written, an inbox line
appended, a fake ``kubectl`` watch event, a ``memo_set`` from a second MCP
client over Streamable HTTP), and checks that:

* an agent woke because of that change and its answer on stdout carries data
  it read from the server;
* SIGTERM drains the daemon with exit 0;
* no process agentd started (servers, zygote, agents, the kube server's
  ``kubectl`` runs) outlives it.

Every wait is on agentd's NDJSON telemetry (or a process exit) with a
timeout; nothing sleeps.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import psutil
import pytest
import trio
from mcp import Client

from agentd.config import load_settings
from agentd.supervisor.routing.routes import build_router
from tests.support.agentd_proc import PY, REPO, Agentd, run_agentd, script
from tests.support.kube import Cluster
from tests.support.routing import wait_gone

FAKES = REPO / "tests" / "fakes"
EXAMPLES = REPO / "examples"

#: Bound on waiting for a process that agentd already reaped, or that is
#: exiting because its parent went away (a pidfd wait, not a poll). Exits take
#: milliseconds; the slack is for a loaded 2-core machine.
EXIT_TIMEOUT = 10.0
#: How long a test waits for ``agentd serve memo --http`` to print its URL
#: (an interpreter start plus the SDK and hypercorn imports, ~1 s here).
HTTP_START_TIMEOUT = 20.0

#: Short watch debounce so a notice follows the change within a fraction of a second.
FAST_WATCHES = {"AGENTD_WATCHES__DEBOUNCE": "0.2", "AGENTD_WATCHES__MAX_WAIT": "1"}


# --------------------------------------------------------------------------- helpers


def serve(name: str, *args: str) -> str:
    """An ``--mcp-stdio`` value that runs the bundled server ``name``."""
    return f"{name}={PY} -m agentd serve {name} {' '.join(args)}".strip()


def reactive(model: str, instruction: str, *extra: str) -> list[str]:
    return ["--mode", "reactive", "--verbose", "--model", model, "--instruction", instruction, *extra]


class Tree:
    """Every process agentd started, collected while it runs (psutil)."""

    def __init__(self, a: Agentd) -> None:
        self.root = a.proc.pid
        self.cmdlines: dict[int, str] = {}

    def started(self, fragment: str) -> bool:
        """Whether a process whose command line contains ``fragment`` was seen."""
        return any(fragment in cmd for cmd in self.cmdlines.values())

    def snapshot(self) -> None:
        try:
            children = psutil.Process(self.root).children(recursive=True)
        except psutil.NoSuchProcess:  # pragma: no cover - agentd died early; the test fails elsewhere
            return
        for child in children:
            with contextlib.suppress(psutil.NoSuchProcess):
                self.cmdlines.setdefault(child.pid, " ".join(child.cmdline()))

    async def assert_all_gone(self, *extra: int) -> None:
        """After agentd exited: every process it started is gone (waited on, bounded, never polled)."""
        pids = set(self.cmdlines) | set(extra)
        assert self.cmdlines, "no descendants of agentd were ever seen"
        with trio.fail_after(EXIT_TIMEOUT):
            for pid in sorted(pids):
                await wait_gone(pid)


async def drain(a: Agentd, tree: Tree, *extra_pids: int, server: str | None = None) -> None:
    """SIGTERM -> clean drain (exit 0) -> nothing left behind (``server``: the bundled server was among them)."""
    tree.snapshot()
    if server is not None:
        assert tree.started(f"agentd serve {server}"), tree.cmdlines
    a.signal(signal.SIGTERM)
    assert await a.wait_exit() == 0, a.tail()
    assert a.find("supervisor.exit")[0]["exit_code"] == 0
    await tree.assert_all_gone(*extra_pids)


# --------------------------------------------------------------------------- files


async def test_files_a_written_file_wakes_an_agent_that_names_it(tmp_path: Path) -> None:
    """``examples/files-watch.toml`` as shipped, with the server given on the command line."""
    root = tmp_path / "root"
    root.mkdir()
    args = [
        "--config", str(EXAMPLES / "files-watch.toml"), "--verbose",
        "--mcp-stdio", serve("files", "--root", str(root)),
    ]  # fmt: skip
    async with run_agentd(args) as a:
        tree = Tree(a)
        await a.wait_event("subscription.established", lambda e: e["uri"] == "file-events://.")
        tree.snapshot()
        assert not a.find("subagent.spawn")  # idle until something changes
        (root / "report.txt").write_text("quarterly numbers\n")
        spawn = await a.wait_event("subagent.spawn")
        assert (spawn["role"], spawn["route"]) == ("spawn", "drop")
        await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"])
        tree.snapshot()
        await drain(a, tree, server="files")
    out = a.out
    assert "The MCP resource file-events://. changed" in out  # the instruction names the URI
    events = json.loads(out.split("events: ", 1)[1])["events"]
    assert [(e["type"], e["path"], e["size"]) for e in events] == [("ADDED", "report.txt", 18)]
    updated = a.find("resource.updated")
    assert [(e["server"], e["uri"], e["route"]) for e in updated] == [("files", "file-events://.", "drop")]


# --------------------------------------------------------------------------- inbox


async def test_inbox_an_appended_line_wakes_an_agent_that_reads_acks_and_responds(tmp_path: Path) -> None:
    box = tmp_path / "inbox"
    box.mkdir()
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "inbox://ops"}}]},
            # the reply quotes what the agent read, so the test can see it
            {
                "tool_calls": [
                    {"name": "inbox__respond", "arguments": {"id": "m-1", "text": "{last_tool_result}"}}
                ]
            },
            {"tool_calls": [{"name": "inbox__ack", "arguments": {"id": "m-1"}}]},
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "inbox://ops"}}]},
            {"text": "inbox: {last_tool_result}"},
        ],
    )
    args = reactive(
        model,
        "Answer new messages.",
        "--mcp-stdio", serve("inbox", "--agent", "ops", "--dir", str(box)),
        "--subscribe", "inbox:inbox://ops",
        "--route", "inbox://*=spawn",
    )  # fmt: skip
    async with run_agentd(args) as a:
        tree = Tree(a)
        await a.wait_event("subscription.established", lambda e: e["uri"] == "inbox://ops")
        tree.snapshot()
        line = {"id": "m-1", "from": "alice", "ts": "2026-11-03T10:00:00Z", "text": "build is red"}
        fd = os.open(box / "ops.inbox", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, json.dumps(line).encode() + b"\n")  # one write, as the inbox contract asks
        finally:
            os.close(fd)
        spawn = await a.wait_event("subagent.spawn")
        await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"])
        tree.snapshot()
        await drain(a, tree, server="inbox")
    # After the ack the message left the log: nothing is pending.
    assert json.loads(a.out.split("inbox: ", 1)[1]) == {"events": [], "pending": 0}
    calls = [(c["server"], c["tool"], c["error"]) for c in a.find("tool.call")]
    assert calls == [
        ("agentd", "read_resource", None),
        ("inbox", "respond", None),
        ("inbox", "ack", None),
        ("agentd", "read_resource", None),
    ]
    # The reply landed in the sender's inbox, quoting the message as the agent read it.
    (reply,) = [json.loads(x) for x in (box / "alice.inbox").read_text().splitlines()]
    assert (reply["from"], reply["in_reply_to"]) == ("ops", "m-1")
    (message,) = json.loads(reply["text"])["events"]
    assert (message["type"], message["id"], message["from"], message["text"]) == (
        "MESSAGE", "m-1", "alice", "build is red",
    )  # fmt: skip
    cursor = json.loads((box / ".~ops.cursor").read_text())
    assert set(cursor["ledger"]["acked"]) == {"m-1"}
    assert cursor["ledger"]["responded"] == {"m-1": reply["id"]}
    # The acknowledged message is behind the persisted position: a restart will not offer it again.
    assert cursor["offset"] == (box / "ops.inbox").stat().st_size
    assert not (box / ".~ops.watcher-active").exists()  # the server stopped cleanly (sentinel removed)


# --------------------------------------------------------------------------- kube


def configmap(name: str, uid: str, rv: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "uid": uid, "resourceVersion": rv},
        "data": data,
    }


@pytest.fixture
def cluster(tmp_path: Path) -> Any:
    control = tmp_path / "cluster"
    control.mkdir()
    c = Cluster(control)
    yield c
    c.close()


def kube_server(cluster: Cluster) -> str:
    """TOML for ``agentd serve kube`` with the fake kubectl (its control dir passed in ``env``)."""
    env = ", ".join(f"{k} = {json.dumps(v)}" for k, v in fake_kubectl_env(cluster).items())
    return (
        "[servers.kube]\n"
        f"command = {json.dumps(PY)}\n"
        f'args = ["-m", "agentd", "serve", "kube", "--kubectl", {json.dumps(str(FAKES / "kubectl"))}]\n'
        f"env = {{ {env} }}\n"
        "required = true\n"
    )


def fake_kubectl_env(cluster: Cluster) -> dict[str, str]:
    return {"KUBECTL_FAKE_DIR": str(cluster.root), "KUBECTL_FAKE_PYTHON": PY}


KUBE_URI = "kube-events://watch/configmaps?namespace=default"
#: The same URI in configuration: a literal '?' is escaped there, else it is a glob wildcard (rfcs/0010).
KUBE_MATCH = KUBE_URI.replace("?", "\\?")
KUBE_FILTER = (
    "f\"{event['type']} {event['object']['metadata']['name']}: {event['object'].get('data')}\" "
    "if event['type'] == 'ADDED' else None"
)


async def test_kube_a_watch_event_reaches_the_same_warm_agent_as_a_follow_up_turn(
    tmp_path: Path, cluster: Cluster
) -> None:
    cluster.set_list("configmaps", [configmap("settings", "u1", "1", mode="blue")])
    toml = tmp_path / "agentd.toml"
    toml.write_text(kube_server(cluster))
    model = script(
        tmp_path,
        [
            {
                "tool_calls": [
                    {
                        "name": "watch_start",
                        "arguments": {"name": "cms", "uri": KUBE_URI, "on_event": KUBE_FILTER},
                    }
                ]
            },
            {"text": "watching configmaps"},
            {"text": "seen: {input}"},
        ],
    )
    args = [
        "--mode", "loop", "--session", "warm", "--interval", "1h", "--verbose",
        "--config", str(toml), "--model", model, "watch the configmaps",
    ]  # fmt: skip
    async with run_agentd(args, env=FAST_WATCHES) as a:
        tree = Tree(a)
        started = await a.wait_event("watch.started")
        assert (started["watch"], started["uri"], started["session"]) == ("cms", KUBE_URI, "root")
        await a.wait_event("turn.end")  # held warm: it owns a watch
        tree.snapshot()
        # The filter keeps ADDED only: this MODIFIED is dropped, the ADDED becomes the notice.
        cluster.event("configmaps", "MODIFIED", configmap("settings", "u1", "2", mode="green"))
        cluster.event("configmaps", "ADDED", configmap("feature-flags", "u2", "7", beta="on"))
        notice = await a.wait_event("watch.notice")
        assert (notice["watch"], notice["uri"], notice["lines"]) == ("cms", KUBE_URI, 1)
        await a.wait_event("turn.end", count=2)
        tree.snapshot()
        await drain(a, tree, *cluster.pids(), server="kube")
    assert a.out.splitlines()[:3] == [
        "watching configmaps",
        f'seen: <watch-event name="cms" uri="{KUBE_URI.replace("&", "&amp;")}">',
        "ADDED feature-flags: {'beta': 'on'}",
    ]
    assert {e["agent"] for e in a.find("turn.end")} == {"a1"}  # the same agent, a follow-up turn
    assert len(a.find("subagent.spawn")) == 1
    outcomes = [(e["type"], e["outcome"]) for e in a.find("watch.event")]
    assert ("MODIFIED", "dropped") in outcomes
    assert len(cluster.pids()) >= 2  # the seeding list and the kubectl -w, both gone now


async def test_kube_reactive_a_declared_watch_route_spawns_an_agent_for_the_added_object(
    tmp_path: Path, cluster: Cluster
) -> None:
    """``examples/kube-watch.toml`` as shipped, against the fake kubectl."""
    cluster.set_list("configmaps", [configmap("settings", "u1", "1", mode="blue")])
    # --mcp-stdio servers get a minimal environment: hand the fake its control dir through env(1).
    fake_env = " ".join(f"{k}={v}" for k, v in fake_kubectl_env(cluster).items())
    server = f"kube=env {fake_env} {PY} -m agentd serve kube --kubectl {FAKES / 'kubectl'}"
    args = ["--config", str(EXAMPLES / "kube-watch.toml"), "--verbose", "--mcp-stdio", server]
    async with run_agentd(args) as a:
        tree = Tree(a)
        started = await a.wait_event("watch.started", lambda e: e.get("route") == "configmaps")
        assert (started["uri"], started["shape"], started["filter"]) == (KUBE_URI, "event-log", True)
        tree.snapshot()
        assert not a.find("subagent.spawn")  # reactive: nobody runs until a kept change
        cluster.event("configmaps", "MODIFIED", configmap("settings", "u1", "2", mode="green"))
        await a.wait_event("watch.event", lambda e: e.get("outcome") == "dropped")
        cluster.event("configmaps", "ADDED", configmap("feature-flags", "u2", "7", beta="on"))
        notice = await a.wait_event("watch.notice", lambda e: e.get("route") == "configmaps")
        assert (notice["uri"], notice["lines"]) == (KUBE_URI, 1)
        spawn = await a.wait_event("subagent.spawn")
        assert (spawn["role"], spawn["route"]) == ("spawn", "configmaps")
        await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"])
        tree.snapshot()
        await drain(a, tree, *cluster.pids(), server="kube")
    assert len(a.find("subagent.spawn")) == 1  # the dropped MODIFIED woke nobody
    woken, log = a.out.split("\nlog: ", 1)
    assert "ADDED feature-flags: {'beta': 'on'}" in woken  # the notice is in the instruction
    events = json.loads(log)["events"]
    assert [(e["type"], e["object"]["metadata"]["name"]) for e in events] == [
        ("MODIFIED", "settings"),
        ("ADDED", "feature-flags"),
    ]


# --------------------------------------------------------------------------- memo over Streamable HTTP


@asynccontextmanager
async def memo_http(notes: Path) -> AsyncIterator[tuple[str, trio.Process]]:
    """``agentd serve memo --http 127.0.0.1:0`` started by the test; yields its URL once it listens."""
    proc = await trio.lowlevel.open_process(
        [PY, "-m", "agentd", "serve", "memo", "--file", str(notes), "--http", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, cwd=str(REPO),
    )  # fmt: skip
    assert proc.stderr is not None
    try:
        buf = b""
        with trio.fail_after(HTTP_START_TIMEOUT):
            while b"listening on " not in buf or not buf.endswith(b"\n"):
                chunk = await proc.stderr.receive_some(4096)
                assert chunk, f"agentd serve memo exited before listening: {buf.decode(errors='replace')}"
                buf += chunk
        url = buf.decode().split("listening on ", 1)[1].split()[0]
        yield url, proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGTERM)
        with trio.CancelScope(shield=True), trio.fail_after(EXIT_TIMEOUT):
            await proc.wait()
        await proc.stderr.aclose()


async def test_memo_over_http_a_set_from_another_client_wakes_an_agent(tmp_path: Path) -> None:
    model = script(
        tmp_path,
        [
            {"tool_calls": [{"name": "read_resource", "arguments": {"uri": "memo://notes"}}]},
            {"text": "notes now: {last_tool_result}"},
        ],
    )
    async with memo_http(tmp_path / "notes.json") as (url, server):
        assert url.startswith("http://127.0.0.1:"), url
        assert url.endswith("/mcp"), url
        args = reactive(
            model,
            "Report the notes.",
            "--mcp-http", f"memo={url}",
            "--subscribe", "memo:memo://notes",
            "--route", "memo://notes=spawn,reread_on_start=false",
        )  # fmt: skip
        async with run_agentd(args) as a:
            tree = Tree(a)
            connected = await a.wait_event("upstream.connected")
            assert connected["transport"] == "http"
            await a.wait_event("subscription.established", lambda e: e["uri"] == "memo://notes")
            async with Client(url) as other:
                await other.call_tool("memo_set", {"key": "deploy", "value": "green"})
            spawn = await a.wait_event("subagent.spawn")
            await a.wait_event("turn.end", lambda e: e["agent"] == spawn["agent"])
            tree.snapshot()
            await drain(a, tree)
        assert server.returncode is None  # agentd never owned the HTTP server: it is still serving
    assert server.returncode == 0  # and it stopped cleanly on our SIGTERM
    assert json.loads(a.out.split("notes now: ", 1)[1]) == {"deploy": "green"}
    assert [e["route"] for e in a.find("resource.updated")] == ["r0"]


def test_a_subscription_with_an_escaped_query_gets_a_default_route_for_the_uri_itself() -> None:
    """The pure half of the fix the reactive kube test needs: ``pods\\?ns=a`` routes ``pods?ns=a``."""
    settings = load_settings(
        {
            "mode": "reactive",
            "model": f"script:{REPO / 'examples' / 'scripts' / 'hello.json'}",
            "instruction": "react",
            "subscriptions": [f"kube:{KUBE_MATCH}"],
            "mcp_stdio": ["kube=true"],
        },
        env={},
    )
    router = build_router(settings)
    route = router.first_match(KUBE_URI)
    assert route is not None
    assert route.spec.exact
    assert router.first_match("kube-events://watch/configmapsXnamespace=default") is None

"""``agentd serve kube`` over real stdio with a fake kubectl, in both protocol eras."""

from __future__ import annotations

import json
import os
import sys
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from tests.support.kube import Cluster
from tests.support.routing import wait_gone
from tests.support.servers import Pushes, subscribed
from tests.support.supervised import alive

REPO = Path(__file__).resolve().parents[2]
FAKES = REPO / "tests" / "fakes"
#: A push must reach the client well within this; the slack covers a loaded 2-core machine.
PUSH_TIMEOUT = 10.0
#: Reconnect waits RECONNECT_BACKOFF_S[0] = 1 s before re-listing, plus process starts.
RECONNECT_TIMEOUT = 15.0
URI = "kube-events://watch/pods?namespace=*"


def connect(
    cluster: Cluster, era: str, uri: str = URI, **kw: Any
) -> AbstractAsyncContextManager[tuple[Client, Pushes]]:
    return subscribed(params(cluster, **kw), era, [uri])


def pod(name: str, uid: str, rv: str, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": uid,
            "resourceVersion": rv,
            "managedFields": [{"manager": "kubectl"}],
        },
        **extra,
    }


@pytest.fixture
def cluster(tmp_path: Path):
    c = Cluster(tmp_path)
    yield c
    c.close()


def params(cluster: Cluster, *, via_path: bool = False, extra: tuple[str, ...] = ()) -> StdioServerParameters:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "KUBECTL_FAKE_DIR": str(cluster.root),
        "KUBECTL_FAKE_PYTHON": sys.executable,
        "PATH": f"{FAKES}{os.pathsep}{os.environ.get('PATH', '')}",
    }
    kubectl = [] if via_path else ["--kubectl", str(FAKES / "kubectl")]
    return StdioServerParameters(
        command=sys.executable, args=["-m", "agentd.servers", "kube", *kubectl, *extra], env=env
    )


async def read_events(client: Client, uri: str = URI) -> list[dict[str, Any]]:
    result = await client.read_resource(uri)
    (content,) = result.contents
    assert content.mime_type == "application/vnd.agentd.events+json"
    return json.loads(content.text)["events"]  # type: ignore[union-attr]


@pytest.mark.realclock
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_appended_event_is_pushed_and_read_with_seq(cluster: Cluster, era: str):
    cluster.set_list("pods", [pod("a", "u1", "1")])
    async with connect(cluster, era) as (client, pushes):
        assert await read_events(client) == []  # seeded; the watch's initial ADDED replay is suppressed
        cluster.event("pods", "MODIFIED", pod("a", "u1", "2", status={"phase": "Running"}))
        assert await pushes.next() == URI
        (ev,) = await read_events(client)
        assert ev["seq"] == 1
        assert ev["type"] == "MODIFIED"
        assert ev["object"]["status"] == {"phase": "Running"}
        assert ev["old"]["metadata"]["resourceVersion"] == "1"
        assert "managedFields" not in ev["object"]["metadata"]
        assert "managedFields" not in ev["old"]["metadata"]


@pytest.mark.realclock
async def test_duplicate_added_is_suppressed_and_split_objects_parse(cluster: Cluster):
    cluster.set_list("pods", [pod("a", "u1", "1")])
    async with connect(cluster, "modern") as (client, pushes):
        await read_events(client)
        cluster.event("pods", "ADDED", pod("a", "u1", "1"))  # replay of a known uid+resourceVersion
        cluster.event("pods", "ADDED", pod("b", "u2", "5"))  # pretty-printed: split over many reads
        assert await pushes.next() == URI
        events = await read_events(client)
        while len(events) < 1:  # pragma: no cover - only if the two writes were read separately
            await pushes.next()
            events = await read_events(client)
        assert [(e["seq"], e["type"], e["object"]["metadata"]["name"]) for e in events] == [(1, "ADDED", "b")]


@pytest.mark.realclock
async def test_stream_end_reconnects_and_reports_the_gap(cluster: Cluster):
    cluster.set_list("pods", [pod("a", "u1", "1"), pod("b", "u2", "1")])
    async with connect(cluster, "modern") as (client, pushes):
        assert await read_events(client) == []
        # A live event first, so we know kubectl -w has read the list file before we change it.
        cluster.event("pods", "MODIFIED", pod("a", "u1", "2"))
        await pushes.next()
        # While disconnected: a changes, b goes away, c appears.
        cluster.set_list("pods", [pod("a", "u1", "7"), pod("c", "u3", "1")])
        cluster.send("pods", "#stderr error: watch closed: token expired\n#exit 1\n")
        seen: list[dict[str, Any]] = []
        with trio.fail_after(RECONNECT_TIMEOUT):
            while len([e for e in seen if e.get("synthetic")]) < 3:
                await pushes.next()
                seen = await read_events(client)
        live, error, *gap = seen
        assert live["type"] == "MODIFIED"
        assert error["type"] == "ERROR"
        assert "token expired" in error["message"]
        assert "reconnecting in 1 s" in error["message"]
        assert sorted((e["type"], e["object"]["metadata"]["name"]) for e in gap) == [
            ("ADDED", "c"),
            ("DELETED", "b"),
            ("MODIFIED", "a"),
        ]
        assert all(e["synthetic"] for e in gap)
        assert [e["seq"] for e in seen] == [1, 2, 3, 4, 5]
        # Watching again: the new kubectl -w delivers live events.
        cluster.event("pods", "DELETED", pod("c", "u3", "2"))
        await pushes.next()
        last = (await read_events(client))[-1]
        assert (last["seq"], last["type"], last["object"]["metadata"]["name"]) == (6, "DELETED", "c")
    watches = [a for a in cluster.argv_log() if "--watch" in a]
    assert len(watches) == 2


@pytest.mark.realclock
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_mistyped_resource_fails_the_read_with_did_you_mean(cluster: Cluster, era: str):
    cluster.set_list("pods", [])
    uri = "kube-events://watch/podz"
    async with connect(cluster, era, uri) as (client, _pushes):
        with pytest.raises(MCPError, match=r'resource type "podz".*did you mean: pods'):
            await read_events(client, uri)
        # The server keeps serving.
        assert await read_events(client) == []


@pytest.mark.realclock
async def test_bad_uri_is_refused_with_the_fix(cluster: Cluster):
    cluster.set_list("pods", [])
    async with connect(cluster, "modern", via_path=True) as (client, _pushes):
        with pytest.raises(MCPError, match=r"unknown query parameter 'labelselector'.*use only namespace"):
            await read_events(client, "kube-events://watch/pods?labelselector=app")
        with pytest.raises(MCPError, match=r"namespace 'Bad_NS'.*DNS label"):
            await read_events(client, "kube-events://watch/pods?namespace=Bad_NS")
        assert await read_events(client) == []


@pytest.mark.realclock
async def test_watcher_is_shared_and_stopped_when_the_last_subscriber_leaves(cluster: Cluster):
    cluster.set_list("pods", [pod("a", "u1", "1")])
    async with Client(params(cluster)) as client:
        async with (
            client.listen(resource_subscriptions=[URI]) as one,
            client.listen(resource_subscriptions=[URI]) as two,
        ):
            await read_events(client)
            cluster.event("pods", "MODIFIED", pod("a", "u1", "2"), pretty=False)
            with trio.fail_after(PUSH_TIMEOUT):
                assert (await one.__anext__()).uri == URI
                assert (await two.__anext__()).uri == URI
        # Both listen streams closed: the watcher is cancelled and its kubectl -w terminated.
        (first_watch,) = cluster.watch_pids()
        with trio.fail_after(PUSH_TIMEOUT):
            await wait_gone(first_watch)
        # A new subscriber starts a fresh watcher (a second kubectl -w) that delivers live events.
        async with client.listen(resource_subscriptions=[URI]) as three:
            await read_events(client)
            cluster.event("pods", "MODIFIED", pod("a", "u1", "3"), pretty=False)
            with trio.fail_after(PUSH_TIMEOUT):
                assert (await three.__anext__()).uri == URI
            (ev,) = await read_events(client)  # a new ring: seq starts again
            assert (ev["seq"], ev["object"]["metadata"]["resourceVersion"]) == (1, "3")
        assert len(cluster.watch_pids()) == 2


def running_watchers(cluster: Cluster) -> list[int]:
    """The fake kubectl ``get --watch`` processes still running."""
    return [pid for pid in cluster.watch_pids() if alive(pid) is not None]


@pytest.mark.realclock
@pytest.mark.parametrize("era", ["modern", "legacy"])
async def test_a_subscription_past_max_watchers_is_refused_naming_the_flag(cluster: Cluster, era: str):
    """rfcs/0265: ``--max-watchers 2``: a third distinct URI is refused with an MCP error; after one leaves it fits."""
    uris = [f"kube-events://watch/r{i}" for i in range(3)]
    for i in range(3):
        cluster.set_list(f"r{i}", [pod(f"p{i}", f"u{i}", "1")])
    refusal = (
        r"subscription to 'kube-events://watch/r2' refused: this server already runs 2 kubectl watchers "
        r"\(one per subscribed URI\), its limit \(--max-watchers 2 of `agentd serve kube`\); unsubscribe "
        r"from a URI you no longer need"
    )

    async def live(client: Client, pushes: Pushes, i: int, rv: str) -> None:
        """Resource ``r<i>``'s ``kubectl -w`` runs: an event written to it is pushed."""
        await read_events(client, uris[i])  # seeded, so the watch is next
        cluster.event(f"r{i}", "MODIFIED", pod(f"p{i}", f"u{i}", rv), pretty=False)
        await pushes.until(uris[i])

    server = params(cluster, extra=("--max-watchers", "2"))
    async with subscribed(server, era, uris[:2]) as (client, pushes):
        await live(client, pushes, 0, "2")
        await live(client, pushes, 1, "2")

        async def subscribe(wanted: list[str]) -> None:
            if era == "legacy":
                (uri,) = wanted
                await client.subscribe_resource(uri)
                return
            async with client.listen(resource_subscriptions=wanted):
                pass

        with pytest.raises(MCPError, match=refusal) as refused:
            # Modern: r0 and r1 share the watchers they run already; r2 would be a third.
            await subscribe(uris if era == "modern" else uris[2:])
        assert len(running_watchers(cluster)) == 2
        if era == "legacy":
            await client.subscribe_resource(uris[0])  # held already: no new watcher, no refusal
            await client.unsubscribe_resource(uris[0])
            with trio.fail_after(PUSH_TIMEOUT):
                await wait_gone(cluster.watch_pid("r0"))
            await client.subscribe_resource(uris[2])
            await live(client, pushes, 2, "2")
        else:
            # A new stream with r1 and r2 while the old one holds r0 and r1 would need three.
            with pytest.raises(MCPError, match=refusal):
                await subscribe(uris[1:])
        assert len(running_watchers(cluster)) == 2
    assert refused.value.error.data == {"uri": uris[2], "limit": "--max-watchers", "value": 2}
    # The refused subscriptions started no kubectl for r2 (the legacy one ran r2 once it fitted).
    r2_runs = [run for run in cluster.runs() if "r2" in run["argv"]]
    assert len(r2_runs) == (2 if era == "legacy" else 0)


async def test_max_watchers_below_one_is_a_usage_error():
    from tests.support.servers import run_cli

    done = run_cli("kube", "--max-watchers", "0")
    assert done.returncode == 2
    assert "--max-watchers: 0 is not valid: give a whole number of 1 or more (default 32)" in done.stderr

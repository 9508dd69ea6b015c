"""The kube server's pure core: URI parsing, kubectl argv, tracker dedupe/reconcile, suggestions."""

from __future__ import annotations

import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agentd.servers.kube import (
    RECONNECT_BACKOFF_S,
    KubeTracker,
    KubeUriError,
    KubeWatchSpec,
    backoff_delay,
    did_you_mean,
    list_argv,
    parse_kube_uri,
    parse_list_output,
    strip_object,
    watch_argv,
)


def obj(uid: str, rv: str, name: str = "x") -> dict:
    return {"metadata": {"uid": uid, "resourceVersion": rv, "name": name, "managedFields": [1]}}


def test_uri_with_every_parameter():
    spec = parse_kube_uri(
        "kube-events://watch/deployments.apps?namespace=*&labelSelector=app%3Dweb&fieldSelector=status.phase%3DRunning&context=prod"
    )
    assert spec == KubeWatchSpec("deployments.apps", "*", "app=web", "status.phase=Running", "prod")


@pytest.mark.parametrize(
    ("uri", "match"),
    [
        ("kube://watch/pods", r"not a kube watch URI: use kube-events://watch/RESOURCE"),
        ("kube-events://list/pods", r"not a kube watch URI"),
        ("kube-events://watch/pods,svc", r"resource 'pods,svc' .* give one type"),
        ("kube-events://watch/-A", r"resource '-A'"),
        ("kube-events://watch/pods?ns=x", r"unknown query parameter 'ns'.*use only namespace"),
        ("kube-events://watch/pods?namespace=a&namespace=b", r"'namespace' appears twice"),
        ("kube-events://watch/pods?context=", r"'context' .* is empty"),
        ("kube-events://watch/pods?labelSelector=-x", r"starts with '-'"),
        ("kube-events://watch/pods?namespace=Kube_System", r"not a namespace name"),
    ],
)
def test_bad_uris_say_what_to_do(uri, match):
    with pytest.raises(KubeUriError, match=match):
        parse_kube_uri(uri)


def test_argv_matches_the_seed_contract():
    spec = KubeWatchSpec("pods", "*", "app=web", "status.phase=Running", "prod")
    assert list_argv("kubectl", spec) == [
        "kubectl", "--context=prod", "get", "pods", "--all-namespaces",
        "--selector=app=web", "--field-selector=status.phase=Running", "--output=json",
    ]  # fmt: skip
    assert watch_argv("kubectl", KubeWatchSpec("pods", "default")) == [
        "kubectl", "get", "pods", "--namespace=default",
        "--watch", "--output-watch-events", "--output=json", "--request-timeout=0",
    ]  # fmt: skip


def test_argv_is_accepted_by_the_real_kubectl():
    """The real client parses our flags (no cluster here: a parse error would say 'unknown flag')."""
    kubectl = pytest.importorskip("shutil").which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed")
    spec = KubeWatchSpec("pods", "*", "app=web", "status.phase=Running", None)
    for argv in (list_argv(kubectl, spec), watch_argv(kubectl, spec)):
        done = subprocess.run(
            [*argv, "--server=http://127.0.0.1:1"], capture_output=True, text=True, timeout=30, check=False
        )
        assert "unknown flag" not in done.stderr
        assert "connection refused" in done.stderr or "refused" in done.stderr


def test_tracker_suppresses_replays_and_carries_old():
    t = KubeTracker()
    t.seed([obj("u1", "1")])
    assert t.apply({"type": "ADDED", "object": obj("u1", "1")}) == []
    (mod,) = t.apply({"type": "MODIFIED", "object": obj("u1", "2")})
    assert mod["old"]["metadata"]["resourceVersion"] == "1"
    assert "managedFields" not in mod["object"]["metadata"]
    assert t.apply({"type": "MODIFIED", "object": obj("u1", "2")}) == []  # same version again
    # A known uid seen as ADDED at a newer version was modified while we were not looking.
    (late,) = t.apply({"type": "ADDED", "object": obj("u1", "3")})
    assert (late["type"], late["old"]["metadata"]["resourceVersion"]) == ("MODIFIED", "2")
    (dele,) = t.apply({"type": "DELETED", "object": obj("u1", "4")})
    assert dele["type"] == "DELETED"
    assert t.known == {}
    assert t.apply({"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "9"}}}) == []


def test_tracker_reports_api_errors_and_garbage_in_band():
    t = KubeTracker()
    (err,) = t.apply({"type": "ERROR", "object": {"kind": "Status", "message": "too old resource version"}})
    assert err == {
        "type": "ERROR",
        "message": "the API server ended the watch with an error: too old resource version",
    }
    (bad,) = t.apply({"type": "WHAT", "object": {}})
    assert bad["type"] == "ERROR"
    assert "unrecognised watch event" in bad["message"]
    (bad,) = t.apply([1, 2])
    assert "list where a watch event belongs" in bad["message"]


def test_reconcile_reports_the_gap_as_synthetic_events():
    t = KubeTracker()
    t.seed([obj("a", "1", "a"), obj("b", "1", "b"), obj("c", "1", "c")])
    drafts = t.reconcile([obj("a", "1", "a"), obj("b", "2", "b"), obj("d", "1", "d")])
    assert [(d["type"], d["object"]["metadata"]["name"], d["synthetic"]) for d in drafts] == [
        ("MODIFIED", "b", True),
        ("ADDED", "d", True),
        ("DELETED", "c", True),
    ]
    assert drafts[0]["old"]["metadata"]["resourceVersion"] == "1"
    assert t.reconcile([obj("a", "1", "a"), obj("b", "2", "b"), obj("d", "1", "d")]) == []


@given(
    before=st.dictionaries(st.sampled_from("abcdef"), st.sampled_from("123"), max_size=6),
    after=st.dictionaries(st.sampled_from("abcdef"), st.sampled_from("123"), max_size=6),
)
def test_reconcile_then_known_equals_the_fresh_list(before, after):
    t = KubeTracker()
    t.seed([obj(u, rv) for u, rv in before.items()])
    drafts = t.reconcile([obj(u, rv) for u, rv in after.items()])
    assert {u: o["metadata"]["resourceVersion"] for u, o in t.known.items()} == after
    changed = {u for u in before.keys() | after.keys() if before.get(u) != after.get(u)}
    assert len(drafts) == len(changed)


def test_strip_object_copies():
    o = obj("u", "1")
    stripped = strip_object(o)
    assert "managedFields" not in stripped["metadata"]
    assert "managedFields" in o["metadata"]


def test_did_you_mean():
    names = ["pods", "podtemplates", "deployments.apps", "configmaps", "secrets"]
    assert did_you_mean("podz", names)[0] == "pods"
    assert did_you_mean("deploymnets", names) == ["deployments.apps"]
    assert did_you_mean("zzzzzz", names) == []


def test_backoff_schedule_repeats_its_last_step():
    assert [backoff_delay(i) for i in range(7)] == [1.0, 2.0, 4.0, 8.0, 16.0, 16.0, 16.0]
    assert RECONNECT_BACKOFF_S == (1.0, 2.0, 4.0, 8.0, 16.0)


def test_list_output_parsing():
    assert parse_list_output(b'{"kind":"List","items":[{"metadata":{}}]}') == [{"metadata": {}}]
    with pytest.raises(ValueError, match="not JSON"):
        parse_list_output(b"error: boom")
    with pytest.raises(ValueError, match="not a list of objects"):
        parse_list_output(b"[1]")

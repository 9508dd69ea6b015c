"""deploy/k8s: every overlay renders, validates offline, and keeps agentd's contracts.

The contracts checked here are the ones that drift silently: the exit codes
in ``podFailurePolicy`` (derived from :class:`agentd.core.exitcodes.ExitCode`), the
Job deadlines against ``--deadline``/``--grace``, the probes against the
health server's real paths and bound, the termination grace against
``--grace``, and the pod security rules for every container.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
import tomllib
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import kubernetes_validate
import pytest
import yaml
from croniter import croniter

from agentd.core.durations import parse_duration
from agentd.core.exitcodes import ExitCode
from agentd.observe import health

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "deploy" / "k8s"
OVERLAYS = sorted(p.name for p in (K8S / "overlays").iterdir() if (p / "kustomization.yaml").exists())
DOCS = ROOT / "docs" / "kubernetes.md"

KUBERNETES_VERSION = "1.32"
"""The schema the manifests are validated against: the oldest release we support
(podFailurePolicy with ``onPodConditions``/``DisruptionTarget`` is GA since 1.31)."""

DRAIN_MARGIN_S = 10
"""terminationGracePeriodSeconds must exceed --grace by at least this much, so agentd's
own drain (and its exit 143 at --grace) finishes before the kubelet's SIGKILL."""

SECRET_ENV = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL")

JobOutcome = Literal["success", "FailJob", "Count", "default"]

# What each exit code means to a Job. Every ExitCode member must be here, so a
# new exit code fails this test until someone decides how a Job treats it.
# "default" = no podFailurePolicy rule: Kubernetes counts the failure against
# backoffLimit (the same as Count, but not pinned in the manifest).
JOB_OUTCOME: dict[ExitCode, JobOutcome] = {
    ExitCode.OK: "success",
    ExitCode.CRASHED: "default",
    ExitCode.CONFIG: "FailJob",
    ExitCode.BUDGET_PARTIAL: "FailJob",
    ExitCode.FATAL_INFRA: "Count",
    ExitCode.REFUSED: "FailJob",
    ExitCode.REQUIRED_SERVER: "Count",
    ExitCode.BUDGET: "FailJob",
    # The run ended but its result could not be written (the log pipe broke, a full
    # node disk): the environment failed, not the task; a retry on another pod can fix it.
    ExitCode.OUTPUT_FAILED: "Count",
    ExitCode.DEADLINE: "FailJob",
    ExitCode.DRAIN_TIMEOUT: "default",
}

OUTCOME_TEXT: dict[JobOutcome, str] = {
    "success": "Job succeeds",
    "FailJob": "`FailJob`: the Job fails at once, no retry",
    "Count": "`Count`: retried, counts against `backoffLimit`",
    "default": "no rule: retried, counts against `backoffLimit`",
}


def codes_for(action: JobOutcome) -> list[int]:
    return sorted(int(code) for code, outcome in JOB_OUTCOME.items() if outcome == action)


def exit_code_table() -> str:
    """The exit-code → Job outcome table that docs/kubernetes.md must contain verbatim."""
    lines = ["| exit code | name | Job outcome |", "| --- | --- | --- |"]
    for code in ExitCode:
        lines.append(f"| {int(code)} | `{code.name}` | {OUTCOME_TEXT[JOB_OUTCOME[code]]} |")
    return "\n".join(lines)


# --- rendering ------------------------------------------------------------------


@functools.cache
def render(overlay: str) -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with built-in kustomize) is needed to render deploy/k8s"
    out = subprocess.run(
        [kubectl, "kustomize", str(K8S / "overlays" / overlay)],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def objects(overlay: str, kind: str) -> list[dict[str, Any]]:
    return [o for o in render(overlay) if o["kind"] == kind]


def pod_specs(overlay: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for o in render(overlay):
        if o["kind"] in ("Job", "Deployment", "StatefulSet"):
            out.append((o["kind"], o["spec"]["template"]["spec"]))
        elif o["kind"] == "CronJob":
            out.append((o["kind"], o["spec"]["jobTemplate"]["spec"]["template"]["spec"]))
    return out


def job_specs(overlay: str) -> list[dict[str, Any]]:
    return [o["spec"] for o in objects(overlay, "Job")] + [
        o["spec"]["jobTemplate"]["spec"] for o in objects(overlay, "CronJob")
    ]


def flag(args: list[str], name: str) -> str | None:
    if name in args:
        return args[args.index(name) + 1]
    return None


def agentd_container(pod: dict[str, Any]) -> dict[str, Any]:
    (c,) = [c for c in pod["containers"] if c["name"] == "agentd"]
    return c


@pytest.fixture(params=OVERLAYS)
def overlay(request) -> str:
    return request.param


def test_the_expected_overlays_exist():
    assert {"job", "cronjob", "deployment", "statefulset"} <= set(OVERLAYS)


def test_every_overlay_renders_one_workload(overlay):
    kinds = [o["kind"] for o in render(overlay)]
    assert sum(k in ("Job", "CronJob", "Deployment", "StatefulSet") for k in kinds) == 1
    assert "ServiceAccount" in kinds
    assert "ConfigMap" in kinds


PODMONITOR_CRD = ROOT / "tests" / "support" / "crds" / "monitoring.coreos.com_podmonitors.yaml"
"""The Prometheus Operator's PodMonitor CRD (0.93.0), vendored: its openAPIV3Schema validates ours."""


def _strict(schema: Any) -> Any:
    """A CRD schema that refuses unknown fields (as ``kubectl apply --validate=strict`` does)."""
    if isinstance(schema, dict):
        out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes-")}
        if "properties" in schema and "additionalProperties" not in schema:
            out["additionalProperties"] = False
        return out
    if isinstance(schema, list):
        return [_strict(v) for v in schema]
    return schema


@functools.cache
def podmonitor_validator() -> Any:
    import jsonschema

    crd = yaml.safe_load(PODMONITOR_CRD.read_text())
    (version,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return jsonschema.Draft7Validator(_strict(version["schema"]["openAPIV3Schema"]))


def test_every_object_validates_against_the_pinned_schema(overlay):
    for obj in render(overlay):
        if obj["kind"] == "PodMonitor":
            errors = [e.message for e in podmonitor_validator().iter_errors(obj)]
            assert not errors, errors
            continue
        kubernetes_validate.validate(obj, KUBERNETES_VERSION, strict=True)


def test_the_podmonitor_schema_check_can_fail():
    bad = {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PodMonitor",
        "metadata": {"name": "x"},
        "spec": {"selector": {}, "podMetricsEndpoints": [{"port": "metrics", "intervall": "30s"}]},
    }
    assert any("intervall" in e.message for e in podmonitor_validator().iter_errors(bad))
    bad["spec"]["podMetricsEndpoints"] = [{"port": 9090}]
    assert list(podmonitor_validator().iter_errors(bad))


def test_the_podmonitor_scrapes_the_deployment_s_metrics_port():
    (monitor,) = objects("deployment-monitoring", "PodMonitor")
    (deployment,) = objects("deployment-monitoring", "Deployment")
    pod = deployment["spec"]["template"]
    for key, value in monitor["spec"]["selector"]["matchLabels"].items():
        assert pod["metadata"]["labels"][key] == value
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    ports = {p["name"]: p["containerPort"] for p in agentd_container(pod["spec"])["ports"]}
    assert endpoint["port"] in ports
    args = agentd_container(pod["spec"])["args"]
    assert flag(args, "--metrics-addr").endswith(f":{ports[endpoint['port']]}")
    assert endpoint["path"] == "/metrics"
    assert monitor["metadata"]["namespace"] == deployment["metadata"]["namespace"]


def test_the_grafana_dashboard_queries_only_metrics_agentd_exposes():
    import re

    from prometheus_client.parser import text_string_to_metric_families

    from agentd.observe.histograms import Histograms
    from agentd.observe.metrics import MetricsSnapshot, render_with_process

    h = Histograms()
    for name in ("model_call", "tool_call", "spawn", "event_to_agent", "turn"):
        h.observe(name, 0.1, {})  # type: ignore[arg-type]
    text = render_with_process(MetricsSnapshot(routed={"r": 1}, histograms=h.snapshot()))
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    exposed = {
        f.name + suffix
        for f in text_string_to_metric_families(text)
        for suffix in suffixes.get(f.type, ("",))
    }
    (cm,) = [
        c
        for c in objects("deployment-monitoring", "ConfigMap")
        if c["metadata"]["name"] == "agentd-grafana-dashboard"
    ]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["agentd-dashboard.json"])
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    assert len(exprs) >= 20
    used = {m for e in exprs for m in re.findall(r"\b((?:agentd|process)_[a-z_]+)", e)}
    assert used <= exposed, used - exposed
    # Every latency histogram has a panel.
    for family in (
        "model_call_duration",
        "tool_call_duration",
        "spawn_duration",
        "event_to_agent",
        "turn_duration",
    ):
        assert any(f"agentd_{family}" in e for e in exprs), family
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_every_namespaced_object_sits_in_one_namespace(overlay):
    namespaces = {o["metadata"].get("namespace") for o in render(overlay)}
    assert len(namespaces) == 1
    assert None not in namespaces


# --- Jobs -------------------------------------------------------------------------


def test_every_exit_code_has_a_decided_job_outcome():
    assert set(JOB_OUTCOME) == set(ExitCode)


def test_pod_failure_policy_matches_the_exit_code_table(overlay):
    for spec in job_specs(overlay):
        rules = spec["podFailurePolicy"]["rules"]
        # Disruptions first: an evicted pod's exit code must not decide anything.
        assert rules[0] == {
            "action": "Ignore",
            "onPodConditions": [{"type": "DisruptionTarget", "status": "True"}],
        }
        by_action = {r["action"]: r["onExitCodes"] for r in rules[1:]}
        assert set(by_action) == {"FailJob", "Count"}
        for action in ("FailJob", "Count"):
            rule = by_action[action]
            assert rule["operator"] == "In"
            assert rule["containerName"] == "agentd"
            # The API wants the values sorted, unique, without 0, at most 255.
            assert rule["values"] == codes_for(action), action
            assert 0 not in rule["values"]
            assert len(rule["values"]) <= 255


def test_jobs_never_restart_in_place_and_retry_a_bounded_number_of_times(overlay):
    for spec in job_specs(overlay):
        assert spec["template"]["spec"]["restartPolicy"] == "Never"
        assert 0 <= spec["backoffLimit"] <= 6


def test_jobs_save_no_conversation_on_their_read_only_file_system(overlay):
    for spec in job_specs(overlay):
        container = agentd_container(spec["template"]["spec"])
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert "--ephemeral" in container["args"]  # else one conversation.unsaved warning per run


def test_job_deadlines_let_agentd_hit_its_own_deadline_first(overlay):
    for spec in job_specs(overlay):
        pod = spec["template"]["spec"]
        args = agentd_container(pod)["args"]
        assert flag(args, "--mode") == "once"
        deadline_arg = flag(args, "--deadline")
        assert deadline_arg is not None, (
            "a Job must pass --deadline so exit 124 fires before Kubernetes kills it"
        )
        deadline = parse_duration(deadline_arg)
        grace = parse_duration(flag(args, "--grace") or "25s")
        attempt = pod["activeDeadlineSeconds"]
        assert attempt > deadline + grace
        # The Job-wide deadline covers every attempt.
        assert spec["activeDeadlineSeconds"] >= (spec["backoffLimit"] + 1) * attempt


def test_cronjob_policy(overlay):
    for cron in objects(overlay, "CronJob"):
        spec = cron["spec"]
        assert spec["concurrencyPolicy"] == "Forbid"
        assert spec["startingDeadlineSeconds"] > 0
        assert spec["successfulJobsHistoryLimit"] >= 1
        assert spec["failedJobsHistoryLimit"] >= 1
        # A stuck run must end before the next fire, or Forbid skips it.
        it = croniter(spec["schedule"], datetime(2026, 1, 1, tzinfo=UTC))
        first, second = it.get_next(datetime), it.get_next(datetime)
        assert spec["jobTemplate"]["spec"]["activeDeadlineSeconds"] < (second - first).total_seconds()


def test_cronjob_runs_the_same_job_as_the_job_overlay():
    (job,) = objects("job", "Job")
    (cron,) = objects("cronjob", "CronJob")
    job_spec, cron_spec = job["spec"], cron["spec"]["jobTemplate"]["spec"]
    for key in ("backoffLimit", "activeDeadlineSeconds", "podFailurePolicy"):
        assert cron_spec[key] == job_spec[key], key
    job_pod, cron_pod = job_spec["template"]["spec"], cron_spec["template"]["spec"]
    assert cron_pod == job_pod


# --- the Deployment -----------------------------------------------------------------


def test_deployment_is_a_single_owner(overlay):
    for dep in objects(overlay, "Deployment"):
        assert dep["spec"]["replicas"] == 1
        assert dep["spec"]["strategy"] == {"type": "Recreate"}
        assert flag(agentd_container(dep["spec"]["template"]["spec"])["args"], "--mode") == "reactive"


def _port_of(container: dict[str, Any], ref: str | int) -> int:
    if isinstance(ref, int):
        return ref
    (port,) = [p["containerPort"] for p in container["ports"] if p["name"] == ref]
    return port


def test_sharded_replicas_each_own_a_volume_and_a_shard(overlay):
    for sts in objects(overlay, "StatefulSet"):
        spec = sts["spec"]
        c = agentd_container(spec["template"]["spec"])
        assert spec["podManagementPolicy"] == "Parallel"
        assert flag(c["args"], "--mode") == "reactive"
        assert flag(c["args"], "--shard") == "auto"
        env = {e["name"]: e for e in c["env"]}
        assert int(env["AGENTD_SHARD_COUNT"]["value"]) == spec["replicas"]
        assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
        (claim,) = spec["volumeClaimTemplates"]
        state_mount = [m for m in c["volumeMounts"] if m["name"] == claim["metadata"]["name"]]
        # agentd's own 0700 directory inside the volume (its root is group-writable under fsGroup).
        assert [m["mountPath"] for m in state_mount] == [str(Path(flag(c["args"], "--state-dir")).parent)]
        (pdb,) = objects(overlay, "PodDisruptionBudget")
        assert pdb["spec"]["selector"] == spec["selector"]
        assert pdb["spec"]["maxUnavailable"] == 1


def _workloads(overlay: str) -> list[dict[str, Any]]:
    return objects(overlay, "Deployment") + objects(overlay, "StatefulSet")


def test_probes_hit_the_health_server_paths_and_port(overlay):
    for dep in _workloads(overlay):
        c = agentd_container(dep["spec"]["template"]["spec"])
        health_host, health_port = health.parse_addr(flag(c["args"], "--health-addr") or "")
        assert health_host in (None, "0.0.0.0", "::"), (
            "the kubelet probes the pod IP: listen on every interface"
        )
        expected = {"livenessProbe": "/healthz", "startupProbe": "/healthz", "readinessProbe": "/readyz"}
        for probe, path in expected.items():
            get = c[probe]["httpGet"]
            assert get["path"] == path, probe
            assert _port_of(c, get["port"]) == health_port, probe
        # The kubelet must wait longer than agentd's own bound, so a stuck
        # reactor is reported by agentd's 503, not by a client timeout.
        assert c["livenessProbe"]["timeoutSeconds"] > health.PROBE_TIMEOUT
        assert c["startupProbe"]["timeoutSeconds"] > health.PROBE_TIMEOUT


def test_metrics_port_and_scrape_annotations_agree(overlay):
    for dep in _workloads(overlay):
        template = dep["spec"]["template"]
        c = agentd_container(template["spec"])
        _, metrics_port = health.parse_addr(flag(c["args"], "--metrics-addr") or "", setting="--metrics-addr")
        ann = template["metadata"]["annotations"]
        assert ann["prometheus.io/scrape"] == "true"
        assert int(ann["prometheus.io/port"]) == metrics_port == _port_of(c, "metrics")
        assert ann["prometheus.io/path"] == "/metrics"


# --- every pod ------------------------------------------------------------------------


def test_termination_grace_exceeds_agentd_grace(overlay):
    for _kind, pod in pod_specs(overlay):
        grace = parse_duration(flag(agentd_container(pod)["args"], "--grace") or "25s")
        assert pod["terminationGracePeriodSeconds"] >= grace + DRAIN_MARGIN_S


def test_security_context_for_every_container(overlay):
    for kind, pod in pod_specs(overlay):
        psc = pod["securityContext"]
        assert psc["runAsNonRoot"] is True, kind
        assert psc["seccompProfile"] == {"type": "RuntimeDefault"}, kind
        for c in pod["containers"] + pod.get("initContainers", []):
            sc = c["securityContext"]
            uid = sc.get("runAsUser", psc.get("runAsUser"))
            assert isinstance(uid, int), "a numeric uid lets runAsNonRoot be checked without /etc/passwd"
            assert uid > 0
            assert sc.get("runAsNonRoot", psc["runAsNonRoot"]) is True
            assert sc["allowPrivilegeEscalation"] is False
            assert sc["capabilities"] == {"drop": ["ALL"]}
            assert sc["readOnlyRootFilesystem"] is True
            assert sc.get("seccompProfile", psc["seccompProfile"]) == {"type": "RuntimeDefault"}
            assert sc.get("privileged", False) is False


def test_writable_paths_are_exactly_tmp_and_the_watch_state_dir(overlay):
    for kind, pod in pod_specs(overlay):
        volumes = {v["name"]: v for v in pod["volumes"]}
        c = agentd_container(pod)
        writable = {m["mountPath"]: m["name"] for m in c["volumeMounts"] if not m.get("readOnly")}
        expected = {"/tmp"}
        state = flag(c["args"], "--watch-state")
        if state is not None:
            expected.add(str(Path(state).parent))
        if flag(c["args"], "--state-dir") is not None:
            expected.add(str(Path(flag(c["args"], "--state-dir")).parent))
        assert set(writable) == expected, kind
        claims = {
            v["metadata"]["name"]
            for w in objects(overlay, "StatefulSet")
            for v in w["spec"]["volumeClaimTemplates"]
        }
        for name in writable.values():
            if name in claims:
                continue  # a PersistentVolumeClaim per replica
            assert "emptyDir" in volumes[name] or "persistentVolumeClaim" in volumes[name]
            if "emptyDir" in volumes[name]:
                assert "sizeLimit" in volumes[name]["emptyDir"], "bound every emptyDir"


def test_resources_are_requested_and_limited(overlay):
    for _kind, pod in pod_specs(overlay):
        res = agentd_container(pod)["resources"]
        assert set(res["requests"]) == {"cpu", "memory"}
        assert set(res["limits"]) == {"cpu", "memory"}


def test_model_keys_come_only_from_an_optional_secret(overlay):
    for _kind, pod in pod_specs(overlay):
        env = {e["name"]: e for e in agentd_container(pod)["env"]}
        for name in SECRET_ENV:
            ref = env[name]["valueFrom"]["secretKeyRef"]
            assert ref == {"name": "agentd-model-keys", "key": name, "optional": True}
        assert not any("value" in e and "KEY" in e["name"] for e in env.values())
    for cm in objects(overlay, "ConfigMap"):
        text = json.dumps(cm.get("data", {}))
        assert "API_KEY" not in text
        assert "sk-" not in text


def test_config_files_parse(overlay):
    (cm,) = [c for c in objects(overlay, "ConfigMap") if c["metadata"]["name"].startswith("agentd-config")]
    data = cm["data"]
    tomllib.loads(data["agentd.toml"])
    servers = json.loads(data["mcp.json"])["mcpServers"]
    assert "memo" in servers
    json.loads(data["script.json"])
    mounted = {
        m["mountPath"] for _k, pod in pod_specs(overlay) for m in agentd_container(pod)["volumeMounts"]
    }
    assert "/etc/agentd" in mounted
    for _k, pod in pod_specs(overlay):
        args = agentd_container(pod)["args"]
        assert flag(args, "--config") == "/etc/agentd/agentd.toml"
        assert flag(args, "--mcp-config") == "/etc/agentd/mcp.json"


def test_images_are_pinned(overlay):
    for _kind, pod in pod_specs(overlay):
        image = agentd_container(pod)["image"]
        name, _, tag = image.rpartition(":")
        assert name, image
        assert tag not in ("", "latest"), image


def test_the_cli_accepts_every_workload_s_args(overlay, tmp_path):
    """`agentd check` (validate only, no side effect) takes each container's exact args and config."""
    (cm,) = [c for c in objects(overlay, "ConfigMap") if c["metadata"]["name"].startswith("agentd-config")]
    for name, text in cm["data"].items():
        (tmp_path / name).write_text(text.replace("/etc/agentd/", f"{tmp_path}/"), encoding="utf-8")
    for kind, pod in pod_specs(overlay):
        c = agentd_container(pod)
        args = [a.replace("/etc/agentd/", f"{tmp_path}/") for a in c["args"]]
        # Every other mount (the watch-state dir) becomes a real directory here too.
        for mount in c["volumeMounts"]:
            if mount["mountPath"] not in ("/etc/agentd", "/tmp"):
                local = tmp_path / mount["name"]
                local.mkdir(exist_ok=True)
                args = [a.replace(mount["mountPath"] + "/", f"{local}/") for a in args]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AGENTD_")}
        # Literal variables of the container (AGENTD_SHARD_COUNT), and the pod name a StatefulSet gives.
        env.update({e["name"]: e["value"] for e in c.get("env", []) if "value" in e})
        if kind == "StatefulSet":
            env["POD_NAME"] = "agentd-sharded-0"
        result = subprocess.run(
            [sys.executable, "-m", "agentd", "check", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env=env,
            cwd=ROOT,
        )
        assert result.returncode == 0, f"{overlay} {kind}: {result.stderr}"


# --- identity and RBAC ------------------------------------------------------------------


def test_no_api_token_unless_the_kube_component_is_used(overlay):
    (sa,) = objects(overlay, "ServiceAccount")
    uses_kube = bool(objects(overlay, "Role"))
    assert sa["automountServiceAccountToken"] is uses_kube
    for _kind, pod in pod_specs(overlay):
        assert pod["serviceAccountName"] == sa["metadata"]["name"]
        assert "automountServiceAccountToken" not in pod, "the ServiceAccount decides"


def test_rbac_is_read_only_and_bound_to_agentd(overlay):
    assert not objects(overlay, "ClusterRole")
    assert not objects(overlay, "ClusterRoleBinding")
    for role in objects(overlay, "Role"):
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= {"get", "list", "watch"}
            assert "secrets" not in rule["resources"]
    for binding in objects(overlay, "RoleBinding"):
        (subject,) = binding["subjects"]
        assert subject["kind"] == "ServiceAccount"
        assert subject["name"] == "agentd"
        assert subject["namespace"] == binding["metadata"]["namespace"]
    if objects(overlay, "Role"):
        (cm,) = [
            c for c in objects(overlay, "ConfigMap") if c["metadata"]["name"].startswith("agentd-config")
        ]
        assert "kube" in json.loads(cm["data"]["mcp.json"])["mcpServers"]


# --- docs -------------------------------------------------------------------------------


def test_docs_exit_code_table_matches_the_enum():
    text = DOCS.read_text(encoding="utf-8")
    assert exit_code_table() in text, "regenerate with: python -m tests.packaging.test_k8s_manifests"


if __name__ == "__main__":
    print(exit_code_table())

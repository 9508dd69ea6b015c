"""deploy/k8s webhooks: the Service, the Ingress example, the container port and the server's own
settings agree, and the sources file is one ``agentd serve webhook`` accepts.

The generic checks (schemas, security contexts, writable paths, ``agentd check``) run for this
overlay in ``test_k8s_manifests.py`` like for every other one.
"""

from __future__ import annotations

import functools
import json
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import yaml

from agentd.servers.webhook.server import parse_listen
from agentd.servers.webhook.sources import merge_sources

ROOT = Path(__file__).resolve().parents[2]
OVERLAY = ROOT / "deploy" / "k8s" / "overlays" / "deployment-webhooks"


@functools.cache
def rendered() -> tuple[dict[str, Any], ...]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (with built-in kustomize) is needed to render deploy/k8s"
    out = subprocess.run(
        [kubectl, "kustomize", str(OVERLAY)], capture_output=True, text=True, check=True, timeout=60
    )
    return tuple(doc for doc in yaml.safe_load_all(out.stdout) if doc)


def one(kind: str) -> dict[str, Any]:
    (obj,) = [o for o in rendered() if o["kind"] == kind]
    return obj


def config() -> dict[str, str]:
    (cm,) = [
        o
        for o in rendered()
        if o["kind"] == "ConfigMap" and o["metadata"]["name"].startswith("agentd-config")
    ]
    data: dict[str, str] = cm["data"]
    return data


def server_args() -> list[str]:
    args: list[str] = json.loads(config()["mcp.json"])["mcpServers"]["webhook"]["args"]
    return args


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


def test_the_service_reaches_the_port_the_server_listens_on() -> None:
    host, port = parse_listen(flag(server_args(), "--listen"), allow_remote=True)
    assert host == "0.0.0.0"
    assert "--allow-remote" in server_args()
    pod = one("Deployment")["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports["webhooks"] == port
    service = one("Service")
    assert service["spec"]["selector"].items() <= pod["metadata"]["labels"].items()
    (svc_port,) = service["spec"]["ports"]
    assert svc_port["targetPort"] == "webhooks"
    ingress = one("Ingress")
    (path,) = ingress["spec"]["rules"][0]["http"]["paths"]
    assert (path["path"], path["pathType"]) == ("/hooks/", "Prefix")
    assert path["backend"]["service"] == {
        "name": service["metadata"]["name"],
        "port": {"name": svc_port["name"]},
    }


def test_deliveries_are_kept_on_a_claim_and_secrets_come_from_a_read_only_secret_volume() -> None:
    pod = one("Deployment")["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    mounts = {m["name"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert volumes["state"] == {
        "name": "state",
        "persistentVolumeClaim": {"claimName": one("PersistentVolumeClaim")["metadata"]["name"]},
    }
    assert flag(server_args(), "--dir").startswith(mounts["state"]["mountPath"] + "/")
    assert volumes["webhook-secrets"]["secret"]["secretName"] == "agentd-webhook-secrets"
    assert mounts["webhook-secrets"]["readOnly"] is True


def test_the_sources_file_is_accepted_and_reads_secrets_only_from_the_mounted_secret(tmp_path: Path) -> None:
    doc = tomllib.loads(config()["webhooks.toml"])
    mount = next(
        m["mountPath"] for m in one("Deployment")["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]
        if m["name"] == "webhook-secrets"
    )  # fmt: skip
    files: dict[str, bytes] = {}
    for name, table in doc["sources"].items():
        for key in ("secret_file", "token_file", "password_file"):
            if key in table:
                assert table[key].startswith(mount + "/"), (name, key)
                files[table[key]] = b"k8s-test-secret-0123456789\n"
        assert not any(k.endswith("_env") for k in table), "secrets come from the mounted Secret"
    specs = merge_sources(doc["sources"], [], env={}, read=lambda path: files[path])
    assert {s.name: s.kind for s in specs} == {"github": "github", "alerts": "alertmanager"}
    routes = tomllib.loads(config()["agentd.toml"])
    assert {r["match"] for r in routes["routes"]} == {"webhook://github/event/*", "webhook://alerts/events"}

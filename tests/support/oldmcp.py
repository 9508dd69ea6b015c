"""Older Python ``mcp`` SDKs, each in a virtual environment of its own, for servers of earlier eras.

Many published MCP servers pin an SDK of the 1.x line. ``tests/mcpservers/oldsdk_server.py``
runs under such an SDK, never under agentd's interpreter. The environments are
made on first use from the package index and kept under the repository's
``.venv/oldmcp/VERSION`` (``scripts/setup`` makes them ahead of the tests, so
no test waits on pip), with every dependency pinned as it was when that SDK
was current: 1.8.1 breaks with later pydantic and starlette releases, and a
pin keeps both environments the same on every machine.

Concurrent test processes may ask at once: the first builds under a lock
into a temporary directory and renames it into place; the others wait for
the lock, then find it ready. A failed install fails the test with pip's
words (never a skip: a CI that cannot build them must not pass silently).

Run ``python -m tests.support.oldmcp`` to build every environment now.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

OLD_SERVER = REPO / "tests" / "mcpservers" / "oldsdk_server.py"
"""The FastMCP test server these environments run."""

CACHE = Path(os.environ.get("AGENTD_OLD_MCP_CACHE", REPO / ".venv" / "oldmcp"))
"""Where the environments live (``AGENTD_OLD_MCP_CACHE`` moves them)."""

INSTALL_TIMEOUT_S = 600
"""One environment downloads ~20 wheels (a few MB): seconds on a quiet network; the
bound only stops a hung download on a loaded CI machine."""

SDKS: dict[str, tuple[str, ...]] = {
    # The last release before the SDK answered server/discover: it fails to validate
    # the probe and closes the stream (SSE) or, over stdio, says nothing and lives on
    # until its stdin closes (rfcs/0378).
    "1.8.1": (
        "mcp==1.8.1",
        "annotated-types==0.8.0",
        "anyio==4.9.0",
        "certifi==2026.10.19.post1",
        "click==8.5.1",
        "h11==0.16.0",
        "httpcore==1.0.9",
        "httpx-sse==0.4.0",
        "httpx==0.28.1",
        "idna==3.20",
        "pydantic-core==2.33.2",
        "pydantic-settings==2.9.1",
        "pydantic==2.11.4",
        "python-dotenv==1.2.4",
        "python-multipart==0.0.34",
        "sniffio==1.3.1",
        "sse-starlette==2.3.5",
        "starlette==0.46.2",
        "typing-extensions==4.16.0",
        "typing-inspection==0.4.5",
        "uvicorn==0.34.2",
    ),
    # The last 1.x: it answers the probe with a JSON-RPC error (the SDK falls back
    # on the same connection) and speaks every handshake version up to 2025-11-25.
    "1.30.0": (
        "mcp==1.30.0",
        "annotated-types==0.8.0",
        "anyio==4.16.0",
        "attrs==26.1.0",
        "certifi==2026.10.19.post1",
        "cffi==2.1.1",
        "click==8.5.1",
        "cryptography==50.0.2",
        "h11==0.16.0",
        "httpcore==1.0.9",
        "httpx-sse==0.4.3",
        "httpx==0.28.1",
        "idna==3.20",
        "jsonschema-specifications==2025.9.1",
        "jsonschema==4.26.0",
        "pycparser==3.12",
        "pydantic-core==2.50.5",
        "pydantic-settings==2.16.3",
        "pydantic==2.14.4",
        "pyjwt==2.15.1",
        "python-dotenv==1.2.4",
        "python-multipart==0.0.34",
        "referencing==0.37.0",
        "rpds-py==2026.9.1",
        "sse-starlette==3.7.0",
        "starlette==1.10.0",
        "typing-extensions==4.16.0",
        "typing-inspection==0.4.5",
        "uvicorn==0.54.0",
    ),
}
"""Each SDK version and its requirements: a ``pip freeze`` of the environment that ran it here,
so an upstream release of a dependency cannot change what the tests run."""


class OldSdkUnavailable(RuntimeError):
    """An environment could not be built (pip's words in the message)."""


def _stamp(version: str) -> str:
    return "\n".join(SDKS[version]) + "\n"


def old_mcp_python(version: str) -> Path:
    """The interpreter of the environment with ``mcp==version``, built on first use.

    Raises:
        OldSdkUnavailable: pip could not install it.
    """
    home = CACHE / version
    python = home / "bin" / "python"
    stamp = home / ".requirements"
    if stamp.is_file() and stamp.read_text() == _stamp(version) and python.exists():
        return python
    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / f".{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if stamp.is_file() and stamp.read_text() == _stamp(version) and python.exists():
            return python  # another process built it while this one waited
        _build(version, home)
    return python


def _build(version: str, home: Path) -> None:
    scratch = Path(tempfile.mkdtemp(prefix=f".{version}.", dir=CACHE))
    try:
        # The venv is made at its final path's sibling and renamed: its scripts
        # hold absolute paths, so the interpreter is called by path (bin/python
        # -m pip), never through a generated script.
        subprocess.run([sys.executable, "-m", "venv", str(scratch)], check=True, timeout=INSTALL_TIMEOUT_S)
        result = subprocess.run(
            [
                str(scratch / "bin" / "python"),
                "-m",
                "pip",
                "install",
                "-q",
                "--disable-pip-version-check",
                "--no-input",
                *SDKS[version],
            ],
            capture_output=True,
            text=True,
            timeout=INSTALL_TIMEOUT_S,
        )
        if result.returncode != 0:
            raise OldSdkUnavailable(
                f"cannot install mcp {version} into {scratch} with pip: {result.stderr.strip()[-800:]}"
            )
        (scratch / ".requirements").write_text(_stamp(version))
        if home.exists():
            shutil.rmtree(home)
        scratch.rename(home)
    finally:
        if scratch.exists():
            shutil.rmtree(scratch, ignore_errors=True)


def old_server_argv(python: Path, transport: str = "stdio", *, fd: int | None = None) -> list[str]:
    """The command line of :data:`OLD_SERVER` under ``python`` (with subscriptions; ``fd``: its listener)."""
    argv = [str(python), str(OLD_SERVER), transport, "--subscribe"]
    if fd is not None:
        argv += ["--fd", str(fd)]
    return argv


def main() -> None:
    for version in SDKS:
        print(f"mcp {version}: {old_mcp_python(version)}")


if __name__ == "__main__":
    main()

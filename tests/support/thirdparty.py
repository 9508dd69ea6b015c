"""Third-party MCP servers for the interop tests: pinned, installed into ``.venv/`` once, launched per test.

The versions tested (docs/getting-started.md's set-up paragraph and docs/third-party-servers.md
name the same ones; rfcs/0295 says why these):

* npm ``@modelcontextprotocol/server-everything``, ``server-filesystem`` and
  ``server-memory``, each 2026.8.31, and the TypeScript SDK
  ``@modelcontextprotocol/sdk`` 1.0.4 and 1.32.2 (as ``mcp-sdk-VERSION``, for
  ``tests/mcpservers/ts_lowlevel_server.mjs``), with every package below them
  pinned by ``tests/thirdparty/npm/package-lock.json``; installed with
  ``npm ci`` into ``.venv/npm``.
* PyPI ``mcp-server-time`` 2026.10.19, ``mcp-server-sqlite`` 2025.4.25 and
  ``fastmcp`` 1.0, each pinned with everything it needs by
  ``tests/thirdparty/NAME.txt``, each in its own venv
  (``.venv/thirdparty/NAME``): each server pins its own ``mcp``, which must
  never replace agentd's.

Installing is idempotent and cached: each target keeps the sha256 of its lock
file in a stamp and is rebuilt only when the lock changes, so a second run
costs two file reads. ``scripts/test`` runs ``python -m tests.support.thirdparty``
before the suite; the tests call :func:`ensure_npm` / :func:`ensure_pypi`
themselves too, so running pytest alone installs on first use. A failed
install raises :class:`InstallError` (the tests fail, never skip: a CI that
cannot install must not pass).

Only the standard library at import time (``scripts/test`` runs it before
anything else); the launchers import trio lazily.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, Literal

REPO = Path(__file__).resolve().parents[2]
LOCKS = REPO / "tests" / "thirdparty"
VENV = REPO / ".venv"

EVERYTHING = "@modelcontextprotocol/server-everything"
FILESYSTEM = "@modelcontextprotocol/server-filesystem"
MEMORY = "@modelcontextprotocol/server-memory"

NPM_VERSIONS = {EVERYTHING: "2026.8.31", FILESYSTEM: "2026.8.31", MEMORY: "2026.8.31"}
"""The npm servers tested, as ``tests/thirdparty/npm/package.json`` pins them."""

TS_SDK = "@modelcontextprotocol/sdk"
TS_SDKS = {"1.0.4": "mcp-sdk-1.0.4", "1.32.2": "mcp-sdk-1.32.2"}
"""TypeScript SDK releases tests/mcpservers/ts_lowlevel_server.mjs runs on (the first and the
latest whose low-level server answers resources/templates/list with -32601), version ->
the npm alias ``tests/thirdparty/npm/package.json`` installs it as."""

TIME = "mcp-server-time"
TIME_VERSION = "2026.10.19"
"""The PyPI time server tested (``tests/thirdparty/mcp-server-time.txt``)."""

SQLITE = "mcp-server-sqlite"
SQLITE_VERSION = "2025.4.25"
"""The PyPI SQLite server tested (``tests/thirdparty/mcp-server-sqlite.txt``: on mcp 1.30.0)."""

FASTMCP = "fastmcp"
FASTMCP_VERSION = "1.0"
"""The standalone FastMCP tested (``tests/thirdparty/fastmcp.txt``), running
``tests/mcpservers/fastmcp1_server.py``."""

PYPI_VERSIONS = {TIME: TIME_VERSION, SQLITE: SQLITE_VERSION, FASTMCP: FASTMCP_VERSION}
"""The PyPI servers tested, each pinned by ``tests/thirdparty/NAME.txt`` into ``.venv/thirdparty/NAME``."""

NPM_PREFIX = VENV / "npm"
TIME_VENV = VENV / "thirdparty" / TIME

NPM_TIMEOUT = 900.0
"""A cold ``npm ci`` fetches ~110 packages: ~15 s here, minutes on a slow registry mirror."""

PIP_TIMEOUT = 900.0
"""A cold venv plus ~30 wheels: ~25 s here, minutes on a slow index."""

START_BOUND = 30.0
"""Node prints its ``listening`` line within a second; a loaded 2-core box can take far longer."""

_STAMP = ".agentd-lock-sha256"


class InstallError(RuntimeError):
    """A third-party server could not be installed; the message names the command and the fix."""


def _digest(*files: Path) -> str:
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
    return h.hexdigest()


def _stamped(target: Path, digest: str, *needed: Path) -> bool:
    """Whether ``target`` was installed from this lock (and what it must hold is still there)."""
    try:
        return (target / _STAMP).read_text() == digest and all(p.exists() for p in needed)
    except OSError:
        return False


def _npm_entries() -> list[Path]:
    servers = [NPM_PREFIX / "node_modules" / p / "dist" / "index.js" for p in NPM_VERSIONS]
    return servers + [NPM_PREFIX / "node_modules" / alias / "package.json" for alias in TS_SDKS.values()]


@contextmanager
def _install_lock() -> Iterator[None]:
    """One installer at a time per work tree (scripts/test and a pytest run may race)."""
    VENV.mkdir(exist_ok=True)
    with open(VENV / ".thirdparty-install.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        yield


def _run(argv: list[str], *, cwd: Path, timeout: float, fix: str) -> None:
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired as exc:
        raise InstallError(f"`{' '.join(argv)}` took longer than {timeout:.0f} s; {fix}") from exc
    if done.returncode != 0:
        tail = (done.stderr or done.stdout)[-3000:]
        raise InstallError(f"`{' '.join(argv)}` exited {done.returncode}; {fix}\n{tail}")


def installed_npm_version(package: str) -> str | None:
    """The version of ``package`` under ``.venv/npm``, or None when it is not there."""
    try:
        meta = json.loads((NPM_PREFIX / "node_modules" / package / "package.json").read_text())
    except (OSError, ValueError):
        return None
    version = meta.get("version")
    return version if isinstance(version, str) else None


def ensure_npm() -> None:
    """Install the pinned npm servers into ``.venv/npm`` unless the lock's stamp says they are there."""
    lock_dir = LOCKS / "npm"
    files = (lock_dir / "package.json", lock_dir / "package-lock.json")
    digest = _digest(*files)
    if _stamped(NPM_PREFIX, digest, *_npm_entries()):
        return
    with _install_lock():
        if _stamped(NPM_PREFIX, digest, *_npm_entries()):
            return
        npm = shutil.which("npm")
        if npm is None:
            raise InstallError(
                "npm is not on PATH: install Node.js 20 or newer with npm, then run the tests again"
            )
        NPM_PREFIX.mkdir(parents=True, exist_ok=True)
        (NPM_PREFIX / _STAMP).unlink(missing_ok=True)
        for f in files:
            shutil.copyfile(f, NPM_PREFIX / f.name)
        _run(
            [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
            cwd=NPM_PREFIX,
            timeout=NPM_TIMEOUT,
            fix="check that the npm registry is reachable (npm config get registry)",
        )
        wanted = {**NPM_VERSIONS, **{alias: version for version, alias in TS_SDKS.items()}}
        for package, version in wanted.items():
            got = installed_npm_version(package)
            if got != version:
                raise InstallError(
                    f"{package} in {NPM_PREFIX} is {got!r} after npm ci, expected {version!r}: "
                    "tests/thirdparty/npm/package.json and tests/support/thirdparty.py disagree; pin one version in both"
                )
        (NPM_PREFIX / _STAMP).write_text(digest)


def ensure_pypi(name: str) -> Path:
    """Install the pinned PyPI server ``name`` into its own venv unless stamped; returns that venv's python."""
    version = PYPI_VERSIONS[name]
    venv = VENV / "thirdparty" / name
    reqs = LOCKS / f"{name}.txt"
    digest = _digest(reqs)
    python = venv / "bin" / "python"
    if _stamped(venv, digest, python):
        return python
    with _install_lock():
        if _stamped(venv, digest, python):
            return python
        fix = "check that the package index is reachable (pip config list)"
        # A changed lock gets a fresh venv: nothing left over from the old pins.
        shutil.rmtree(venv, ignore_errors=True)
        venv.parent.mkdir(parents=True, exist_ok=True)
        _run([sys.executable, "-m", "venv", str(venv)], cwd=REPO, timeout=PIP_TIMEOUT, fix=fix)
        _run(
            [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-r", str(reqs)],
            cwd=REPO,
            timeout=PIP_TIMEOUT,
            fix=fix,
        )
        got = subprocess.run(
            [str(python), "-c", f"import importlib.metadata as m; print(m.version({name!r}))"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        ).stdout.strip()
        if got != version:
            raise InstallError(
                f"{name} in {venv} is {got!r}, expected {version!r}: "
                f"tests/thirdparty/{name}.txt and tests/support/thirdparty.py disagree; pin one version in both"
            )
        (venv / _STAMP).write_text(digest)
    return python


def ensure_time() -> Path:
    """Install the pinned ``mcp-server-time`` into its own venv unless stamped; returns that venv's python."""
    return ensure_pypi(TIME)


# --- launching ------------------------------------------------------------------------------


def node() -> str:
    """The absolute path of ``node`` (agentd starts stdio servers with a minimal PATH)."""
    path = shutil.which("node")
    if path is None:
        raise InstallError("node is not on PATH: install Node.js 20 or newer, then run the tests again")
    return path


def npm_entry(package: str) -> str:
    """The pinned ``package``'s ``dist/index.js``, installing it first if needed."""
    ensure_npm()
    return str(NPM_PREFIX / "node_modules" / package / "dist" / "index.js")


TS_LOWLEVEL_SERVER = REPO / "tests" / "mcpservers" / "ts_lowlevel_server.mjs"
FASTMCP1_SERVER = REPO / "tests" / "mcpservers" / "fastmcp1_server.py"


def ts_lowlevel_argv(sdk_version: str, *extra: str) -> list[str]:
    """``node ts_lowlevel_server.mjs SDK_DIR …`` on the pinned TypeScript SDK ``sdk_version``."""
    ensure_npm()
    sdk = NPM_PREFIX / "node_modules" / TS_SDKS[sdk_version]
    return [node(), str(TS_LOWLEVEL_SERVER), str(sdk), *extra]


def sqlite_argv(db: Path) -> list[str]:
    """The pinned ``mcp-server-sqlite`` on the database ``db`` (its console script, as uvx runs it)."""
    python = ensure_pypi(SQLITE)
    return [str(python.parent / SQLITE), "--db-path", str(db)]


def fastmcp1_argv() -> list[str]:
    """:data:`FASTMCP1_SERVER` under the pinned ``fastmcp`` 1.0."""
    return [str(ensure_pypi(FASTMCP)), str(FASTMCP1_SERVER)]


def everything_entry() -> str:
    """server-everything's entry point: ``AGENTD_EVERYTHING_SERVER`` if set (it must be the pinned version), else ours."""
    path = os.environ.get("AGENTD_EVERYTHING_SERVER")
    if not path:
        return npm_entry(EVERYTHING)
    try:
        version = json.loads((Path(path).parents[1] / "package.json").read_text()).get("version")
    except (OSError, ValueError, IndexError):
        version = None
    if version != NPM_VERSIONS[EVERYTHING]:
        raise InstallError(
            f"AGENTD_EVERYTHING_SERVER={path!r} is server-everything {version!r}, the tests pin "
            f"{NPM_VERSIONS[EVERYTHING]!r}: unset it (the tests then install the pinned one into .venv/npm)"
        )
    return path


def stdio_entry(command: str, *args: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """One ``mcpServers`` entry for a stdio server."""
    entry: dict[str, Any] = {"command": command, "args": list(args)}
    if env:
        entry["env"] = env
    return entry


def write_mcp_config(path: Path, servers: dict[str, dict[str, Any]]) -> str:
    """Write an ``mcpServers`` file (the format Claude, Cursor and friends write); returns its path."""
    path.write_text(json.dumps({"mcpServers": servers}, indent=2))
    return str(path)


HttpTransport = Literal["streamableHttp", "sse"]
"""server-everything's HTTP transports, named as its command line names them."""

_PATHS: dict[HttpTransport, str] = {"streamableHttp": "/mcp", "sse": "/sse"}


class EverythingHttp:
    """server-everything over one HTTP transport on a fixed loopback port, started and killed on demand.

    Its stderr is drained while it runs: Node writes to a pipe synchronously,
    so an unread pipe would stall the server once it filled.
    """

    def __init__(self, transport: HttpTransport, port: int, nursery: Any) -> None:
        self.transport = transport
        self.port = port
        self.url = f"http://127.0.0.1:{port}{_PATHS[transport]}"
        """Where the server listens (``/mcp`` for Streamable HTTP, ``/sse`` for SSE)."""
        self.log: list[str] = []
        """Its stderr lines so far, across restarts (for a failing test's message)."""
        self._nursery = nursery
        self._proc: Any = None

    async def start(self) -> None:
        """Start the server; return once it listens (a new process: every session it had is gone)."""
        import trio

        assert self._proc is None, "already running"
        self._proc = proc = await trio.lowlevel.open_process(
            [node(), everything_entry(), self.transport],
            env={**os.environ, "PORT": str(self.port)},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        listening = trio.Event()
        marker = f"port {self.port}"

        async def drain() -> None:
            assert proc.stderr is not None
            buf = b""
            while chunk := await proc.stderr.receive_some():
                buf += chunk
                *lines, buf = buf.split(b"\n")
                for line in lines:
                    text = line.decode(errors="replace")
                    self.log.append(text)
                    if marker in text:
                        listening.set()
            listening.set()  # it exited: checked below

        self._nursery.start_soon(drain)
        with trio.fail_after(START_BOUND):
            await listening.wait()
        log = "\n".join(self.log)
        assert proc.poll() is None, f"server-everything {self.transport} did not start:\n{log}"

    async def kill(self) -> None:
        """SIGKILL the server (no goodbye to its clients) and reap it."""
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.kill()
            await proc.wait()

    async def stop(self) -> None:
        from tests.support.processes import stop

        proc, self._proc = self._proc, None
        if proc is not None:
            await stop(proc)


@asynccontextmanager
async def everything_over_http(transport: HttpTransport) -> AsyncIterator[EverythingHttp]:
    """server-everything over ``transport`` on a free loopback port, running, for the block."""
    import trio

    from tests.fakes.provider_server import unused_port

    async with trio.open_nursery() as nursery:
        server = EverythingHttp(transport, unused_port(), nursery)
        try:
            await server.start()
            yield server
        finally:
            with trio.CancelScope(shield=True):
                await server.stop()
            nursery.cancel_scope.cancel()


def main(argv: list[str]) -> int:
    """``python -m tests.support.thirdparty``: install every pinned server (scripts/test runs it)."""
    if argv not in ([], ["install"]):
        print("usage: python -m tests.support.thirdparty [install]", file=sys.stderr)
        return 2
    try:
        ensure_npm()
        for name in PYPI_VERSIONS:
            ensure_pypi(name)
    except InstallError as exc:
        print(f"third-party MCP servers: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

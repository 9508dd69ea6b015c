"""Test-wide settings.

* Hypothesis: no per-example deadline (the machine is shared and has 2 cores;
  a slow example is not a bug) and a bounded example budget, so fuzzing runs
  in CI in a predictable time. ``HYPOTHESIS_PROFILE=thorough`` digs deeper;
  ``fast`` (scripts/test --fast) tries 20 examples a property; ``mutate`` (scripts/mutate) is derandomized, so a mutant's verdict does not
  change from one run to the next, and small: each mutant runs every test
  that calls the changed function, the stateful models included.
* Once runs save their conversation in the per-user state directory
  (rfcs/0303): every agentd a test starts saves into a directory of the
  test session (``XDG_STATE_HOME``), never into the user's home.
* Tiers: a test that starts a process (agentd, a server, a tool, a fork) is
  marked ``process``; ``scripts/test --fast`` runs the rest (``-m "not process
  and not slow"``). A module whose text starts one is marked here at
  collection; a test that starts one through a helper says so itself
  (``pytestmark = pytest.mark.process``). In the fast tier a process start
  fails the test, naming the marker, so the tier cannot drift.
* The fault catalog (tests/faults/README.md indexes it): every test marked
  ``fault`` is checked, after it ran, for leftovers, since the catalog's point
  is that faults leave nothing behind. **Processes**: nothing may still run
  whose command line mentions the test's ``tmp_path`` (upstream servers take
  their state files there), nor any process carrying the test's tag in its
  environment (``agentd`` started with ``tagged_env``, and what it forks: the
  zygote and every agent child). Processes on their way out get
  ``EXIT_BOUND`` seconds, awaited on pidfds (no polling); survivors are
  SIGKILLed and the test fails. **Files**: nothing may be left in ``tmp_path``
  except what the test made or declared with the ``allow_files`` fixture
  (half-written temporaries, stray sockets, ``*.tmp`` files fail the test).
* A guard: no test may reach a real model provider. Name resolution of their
  public hosts fails in this process, so a misconfigured test errors at once
  instead of sending a request.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from hypothesis import HealthCheck, settings

from tests.support.leftovers import EXIT_BOUND, AllowedFiles, leftover_processes, wait_gone

settings.register_profile(
    "ci",
    deadline=None,
    max_examples=100,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.register_profile(
    "thorough", deadline=None, max_examples=2000, suppress_health_check=list(HealthCheck)
)
settings.register_profile(
    "mutate",
    deadline=None,
    max_examples=10,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
settings.register_profile(
    "fast",
    deadline=None,
    max_examples=20,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_FORBIDDEN_HOSTS = frozenset({"api.openai.com", "api.anthropic.com"})
_real_getaddrinfo = socket.getaddrinfo


def _guarded_getaddrinfo(host, *args, **kwargs):  # type: ignore[no-untyped-def]
    if isinstance(host, bytes):
        host = host.decode()
    if host in _FORBIDDEN_HOSTS:
        raise OSError(
            f"tests must not reach a real model provider ({host}); use tests/fakes/provider_server.py"
        )
    return _real_getaddrinfo(host, *args, **kwargs)


@pytest.fixture(autouse=True, scope="session")
def _no_real_providers():
    socket.getaddrinfo = _guarded_getaddrinfo
    yield
    socket.getaddrinfo = _real_getaddrinfo


@pytest.fixture(autouse=True, scope="session")
def _private_state_home(tmp_path_factory: pytest.TempPathFactory):
    """``XDG_STATE_HOME`` for every agentd the tests start (inherited through os.environ)."""
    before = os.environ.get("XDG_STATE_HOME")
    os.environ["XDG_STATE_HOME"] = str(tmp_path_factory.mktemp("state-home"))
    yield
    if before is None:
        os.environ.pop("XDG_STATE_HOME", None)
    else:
        os.environ["XDG_STATE_HOME"] = before


@pytest.fixture(autouse=True, scope="session")
def _no_claude_agents():
    """No agentd the tests start reads the developer's own ``~/.claude/agents`` (rfcs/0370).

    Tests of those files give them in a home and a working directory of their own
    and set the variable themselves.
    """
    before = os.environ.get("AGENTD_CLAUDE_AGENTS")
    os.environ["AGENTD_CLAUDE_AGENTS"] = "false"
    yield
    if before is None:
        os.environ.pop("AGENTD_CLAUDE_AGENTS", None)
    else:
        os.environ["AGENTD_CLAUDE_AGENTS"] = before


FAST_ENV = "AGENTD_TEST_FAST"
"""Set by ``scripts/test --fast``: a process start fails the test (see :func:`_no_processes_in_the_fast_tier`)."""

_STARTS_A_PROCESS = re.compile(
    r"run_agentd|supervised\(|subprocess|run_cli|agentd_cmd|open_process|run_process|stdio_client|"
    r"StdioServerParameters|Popen|sys\.executable|os\.fork|multiprocessing|chromium"
)
_module_starts: dict[Path, bool] = {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark ``process`` every test of a module whose text starts a process."""
    for item in items:
        path = Path(str(item.fspath))
        if path not in _module_starts:
            _module_starts[path] = bool(_STARTS_A_PROCESS.search(path.read_text(encoding="utf-8")))
        if _module_starts[path]:
            item.add_marker(pytest.mark.process)


@pytest.fixture(autouse=True)
def _no_processes_in_the_fast_tier(request: pytest.FixtureRequest) -> Iterator[None]:
    """In the fast tier, a process start is a mistake in the test's marks: say which mark to add."""
    if not os.environ.get(FAST_ENV):
        yield
        return
    where = request.node.nodeid

    def refuse(*_args: object, **_kwargs: object) -> None:
        raise AssertionError(
            f"{where} starts a process: mark it (or its module) with pytest.mark.process, "
            "so that scripts/test --fast leaves it out"
        )

    popen_init, fork = subprocess.Popen.__init__, os.fork
    subprocess.Popen.__init__ = refuse  # type: ignore[method-assign,assignment]
    os.fork = refuse  # type: ignore[assignment]
    try:
        yield
    finally:
        subprocess.Popen.__init__ = popen_init  # type: ignore[method-assign]
        os.fork = fork


@pytest.fixture
def allow_files() -> AllowedFiles:
    """Declare extra files (globs) a ``fault`` test may leave in ``tmp_path``."""
    return AllowedFiles()


@pytest.fixture(autouse=True)
def _no_leftovers(request: pytest.FixtureRequest) -> Iterator[None]:
    """After a ``fault`` test: no process of its tree, no unexpected file in its ``tmp_path``."""
    if request.node.get_closest_marker("fault") is None:
        yield
        return
    tmp_path: Path = request.getfixturevalue("tmp_path")
    allow: AllowedFiles = request.getfixturevalue("allow_files")
    yield
    marker = str(tmp_path)
    procs = leftover_processes(marker)
    survivors = wait_gone([p.pid for p in procs], EXIT_BOUND) if procs else []
    described = []
    for pid in survivors:
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            described.append(f"{pid}: {' '.join(psutil.Process(pid).cmdline())[:200]}")
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    stray = allow.unexpected(tmp_path)
    problems = []
    if described:
        problems.append("processes outlived the test:\n  " + "\n  ".join(described))
    if stray:
        problems.append(f"unexpected files left in {tmp_path}: {stray}")
    if problems:
        pytest.fail("\n".join(problems))

"""Test-wide settings.

* Hypothesis: no per-example deadline (the machine is shared and has 2 cores;
  a slow example is not a bug) and a bounded example budget, so fuzzing runs
  in CI in a predictable time. ``HYPOTHESIS_PROFILE=thorough`` digs deeper;
  ``mutate`` (scripts/mutate) is derandomized, so a mutant's verdict does not
  change from one run to the next, and small: each mutant runs every test
  that calls the changed function, the stateful models included.
* Once runs save their conversation in the per-user state directory
  (rfcs/0303): every agentd a test starts saves into a directory of the
  test session (``XDG_STATE_HOME``), never into the user's home.
* A guard: no test may reach a real model provider. Name resolution of their
  public hosts fails in this process, so a misconfigured test errors at once
  instead of sending a request.
"""

from __future__ import annotations

import os
import socket

import pytest
from hypothesis import HealthCheck, settings

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

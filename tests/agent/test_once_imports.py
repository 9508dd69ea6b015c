"""What the supervisor imports before it forks a once root (rfcs/0225): every module it holds then is in both processes."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

from agentd.agent.prefork import SHARED_LAZY_IMPORTS

#: Loaded only by the runs that use them: probes and /metrics, url servers with authentication.
NOT_AT_START = ("agentd.observe.health", "prometheus_client", "agentd.upstream.auth", "jwt")


def test_the_supervisor_does_not_import_what_a_run_without_probes_or_url_servers_never_uses():
    probe = (
        "import sys, agentd.cli, agentd.supervisor.app, agentd.agent.prefork; "
        f"print(' '.join(m for m in {NOT_AT_START!r} if m in sys.modules))"
    )
    loaded = subprocess.check_output([sys.executable, "-c", probe], text=True, timeout=120).split()
    assert loaded == []


def test_the_modules_shared_across_the_fork_exist():
    # A renamed SDK module would otherwise drop out of the list silently (the import is best-effort).
    missing = [name for name in SHARED_LAZY_IMPORTS if importlib.util.find_spec(name) is None]
    assert missing == []

"""Model providers for the benchmarks: loopback fakes, their environment, and the previous code.

``bench_spawn --providers`` and ``bench_once --providers`` compare agentd's
own ``openai:`` and ``anthropic:`` clients with the code of an earlier commit
(``--prev-ref``, default: the merge base with ``main``) in the same run: the
earlier ``agentd`` package is extracted with ``git archive`` into a temporary
directory and put first on ``PYTHONPATH`` of the runs that measure it, so
both sides share this machine's load, interpreter and dependencies. Runs of
the two sides alternate.

The providers are the loopback fakes of ``tests/fakes/provider_server.py``,
which speak the real wire formats (Bedrock's with SigV4 checked); the fake
notes when each request arrives, on this process's clock.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

from _util import REPO

sys.path.insert(1, str(REPO))  # tests.fakes: the loopback provider fakes

from tests.fakes.provider_server import (
    RecordedRequest,
    Reply,
    anthropic_reply,
    openai_reply,
    provider_server,
    sigv4_problem,
)

try:
    from agentd.observe.timeline import TIMELINE_ENV, mark, reopen
except ImportError:  # the previous code (--prev-ref) may predate the timeline
    TIMELINE_ENV = "AGENTD_TIMELINE"

    def mark(name: str, key: str = "") -> None:
        pass

    def reopen() -> None:
        pass


def reopen_timeline(path: Path) -> None:
    """Start ``path`` afresh as this process's timeline (and its children's: the variable is set)."""
    path.unlink(missing_ok=True)
    os.environ[TIMELINE_ENV] = str(path)
    reopen()


#: Model spec per provider (names the price database knows, so pricing runs too).
SPECS = {
    "openai": "openai:gpt-4o-mini",
    "anthropic": "anthropic:claude-sonnet-4-5",
    "bedrock": "bedrock:anthropic.claude-sonnet-4-5-20250929-v1:0",
}

_AWS = {
    "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE0000BENCH",
    "AWS_SECRET_ACCESS_KEY": "bench-secret-not-a-real-one",
    "AWS_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
}


class Fake:
    """A loopback provider that answers every request at once and notes its arrival time."""

    def __init__(self, provider: str, replies: list[Reply] | None = None) -> None:
        self.provider = provider
        self.arrivals: list[float] = []
        self._replies = replies
        self.bad_signatures = 0

    def __call__(self, request: RecordedRequest) -> Reply:
        self.arrivals.append(time.perf_counter())
        mark("provider.received")
        if self.provider == "bedrock" and sigv4_problem(
            request,
            access_key=_AWS["AWS_ACCESS_KEY_ID"],
            secret_key=_AWS["AWS_SECRET_ACCESS_KEY"],
            region="us-east-1",
        ):
            self.bad_signatures += 1
            return Reply(403, {"message": "bad signature"})
        if self._replies:
            return self._replies.pop(0)
        return openai_reply("done") if self.provider == "openai" else anthropic_reply("done")


def provider_env(provider: str, base_url: str, tmp: Path) -> dict[str, str]:
    """The environment that points ``provider`` at the fake."""
    if provider == "openai":
        return {"OPENAI_BASE_URL": base_url + "/v1", "OPENAI_API_KEY": "sk-bench"}
    if provider == "anthropic":
        return {"ANTHROPIC_BASE_URL": base_url, "ANTHROPIC_API_KEY": "sk-ant-bench"}
    return {
        **_AWS,
        "ANTHROPIC_BEDROCK_BASE_URL": base_url,
        "AWS_CONFIG_FILE": str(tmp / "no-aws-config"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp / "no-aws-credentials"),
    }


@contextlib.asynccontextmanager
async def fake_provider(provider: str, replies: list[Reply] | None = None) -> AsyncIterator[tuple[Fake, Any]]:
    """A running fake for ``provider`` in the current trio run: ``(fake, server)``."""
    fake = Fake(provider, replies)
    async with provider_server(handler=fake) as server:
        yield fake, server


def merge_base() -> str:
    """The commit this branch left ``main`` at (the code before this branch's change)."""
    out = subprocess.run(
        ["git", "merge-base", "HEAD", "main"], cwd=REPO, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


@contextlib.contextmanager
def previous_code(ref: str) -> Iterator[Path]:
    """The ``agentd`` package as of ``ref``, extracted into a temporary directory (yielded: its root)."""
    with tempfile.TemporaryDirectory(prefix="agentd-prev-") as tmp:
        archive = Path(tmp) / "prev.tar"
        with archive.open("wb") as f:
            subprocess.run(["git", "archive", ref, "agentd"], cwd=REPO, stdout=f, check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(tmp, filter="data")
        archive.unlink()
        yield Path(tmp)


def code_env(root: Path) -> dict[str, str]:
    """An environment whose ``import agentd`` finds the package under ``root`` (then this checkout's tests)."""
    return {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{REPO}"}

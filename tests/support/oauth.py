"""A loopback OAuth 2.1 authorization server + protected MCP resource server for tests (``tests/mcpservers/oauth_server.py``)."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import trio

from tests.support.processes import stop

SERVER = str(Path(__file__).resolve().parents[1] / "mcpservers" / "oauth_server.py")
CLIENT_ID = "agentd-test"
CLIENT_SECRET = "s3cret-client-value"


class Servers:
    def __init__(self, issuer: str, url: str, log: Path) -> None:
        self.issuer = issuer
        self.url = url
        self.log = log

    def lines(self) -> list[str]:
        return self.log.read_text().splitlines() if self.log.exists() else []


@asynccontextmanager
async def oauth_servers(tmp_path: Path, *, method: str = "client_secret_basic") -> AsyncIterator[Servers]:
    socks = []
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        socks.append(s)
    log = tmp_path / "oauth.log"
    fds = [s.fileno() for s in socks]
    process = await trio.lowlevel.open_process(
        [
            sys.executable,
            SERVER,
            "--as-fd",
            str(fds[0]),
            "--rs-fd",
            str(fds[1]),
            "--log",
            str(log),
            "--method",
            method,
        ],
        pass_fds=fds,
        stdin=subprocess.DEVNULL,
    )
    try:
        yield Servers(
            f"http://127.0.0.1:{socks[0].getsockname()[1]}",
            f"http://127.0.0.1:{socks[1].getsockname()[1]}/mcp",
            log,
        )
    finally:
        await stop(process)
        for s in socks:
            s.close()

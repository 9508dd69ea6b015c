"""A reactive ``agentd.toml`` around the bundled memo server: its notes subscribed, one route to agents."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.agentd_proc import PY

NOTES = "memo://notes"
"""The memo server's one resource."""


def memo_toml(
    tmp: Path,
    model: str,
    *,
    memo: Path | None = None,
    settings: str = "",
    server: str = "",
    servers: str = "",
    disposition: str = "spawn",
    route: str = "",
) -> tuple[Path, Path]:
    """Write ``tmp/agentd.toml``; returns it and the memo file (``tmp/notes.json``, created ``{}`` if absent).

    The route ``notes`` sends every change of :data:`NOTES` to ``disposition``, undebounced, with no
    start-up re-read. ``settings``, ``server`` (the memo server's table), ``servers`` (more server
    tables) and ``route`` are TOML lines added to their parts.
    """
    memo = memo or tmp / "notes.json"
    if not memo.exists():
        memo.write_text("{}")
    path = tmp / "agentd.toml"
    path.write_text(
        f"""
mode = "reactive"
model = {json.dumps(model)}
instruction = "React to the notes."
subscribe = ["memo:{NOTES}"]
{settings}

[servers.memo]
command = {json.dumps(PY)}
args = ["-m", "agentd", "serve", "memo", "--file", {json.dumps(str(memo))}]
{server}

{servers}

[[routes]]
name = "notes"
match = "{NOTES}"
disposition = "{disposition}"
debounce = "0s"
reread_on_start = false
{route}
"""
    )
    return path, memo

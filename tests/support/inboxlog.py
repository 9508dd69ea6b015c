"""Helpers of the inbox log's in-process tests (servers/_inboxlog.py): its lines and one wake-up's drain."""

from __future__ import annotations

import json
from typing import Any

from agentd.servers._inboxlog import InboxLog

URI = "inbox://bob"


def line(**fields: object) -> bytes:
    """One inbox line: a JSON object and its newline."""
    return json.dumps(fields).encode() + b"\n"


def drain(log: InboxLog, data: bytes) -> list[Any]:
    """Feed everything after the log's head, as the server does on one wake-up."""
    fed = log.feed(data[log.head :], at_eof=True)
    return [*fed.entries, *log.finish_drain()]

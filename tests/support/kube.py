"""The fake kubectl's control directory (``tests/fakes/kubectl_fake.py``): list files, watch FIFOs, its run log."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


class Cluster:
    """What the fake kubectl lists and streams, and the runs it logged, in the directory ``root``."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.fds: dict[str, int] = {}

    def set_list(self, resource: str, items: list[dict[str, Any]]) -> None:
        (self.root / f"{resource}.json").write_text(json.dumps(items))
        fifo = self.root / f"{resource}.watch"
        if resource not in self.fds:
            os.mkfifo(fifo)
            # O_RDWR: never blocks, and keeps the FIFO open between kubectl runs.
            self.fds[resource] = os.open(fifo, os.O_RDWR)

    def send(self, resource: str, text: str) -> None:
        os.write(self.fds[resource], text.encode())

    def event(self, resource: str, kind: str, obj: dict[str, Any], *, pretty: bool = True) -> None:
        self.send(resource, json.dumps({"type": kind, "object": obj}, indent=2 if pretty else None) + "\n")

    def runs(self) -> list[dict[str, Any]]:
        """Every fake kubectl run so far: ``{"pid", "argv"}`` (none before the first)."""
        log = self.root / "argv.log"
        return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

    def argv_log(self) -> list[list[str]]:
        return [run["argv"] for run in self.runs()]

    def pids(self) -> list[int]:
        return [run["pid"] for run in self.runs()]

    def watch_pids(self) -> list[int]:
        return [run["pid"] for run in self.runs() if "--watch" in run["argv"]]

    def watch_pid(self, resource: str) -> int:
        """The pid of the one ``kubectl get --watch`` run for ``resource`` (watchers start in any order)."""
        [pid] = [run["pid"] for run in self.runs() if "--watch" in run["argv"] and resource in run["argv"]]
        return pid

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)

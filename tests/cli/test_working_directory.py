"""Fault catalog: agentd runs from any working directory.

Started from a folder that holds a folder named ``agentd`` (the parent of a
clone, with the editable install ``scripts/setup`` makes), a helper started
as ``python -m agentd.…`` would import that folder instead of the package:
Python puts the working directory first on a ``-m`` module's import path.
agentd starts its helpers (the zygote, fresh-interpreter agents) with ``-P``,
so the working directory is never on their import path. Both helpers are
exercised through the real ``agentd`` console script, from such a folder.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import run_agentd, script
from tests.support.leftovers import AllowedFiles, tagged_env

pytestmark = pytest.mark.fault

#: The installed console script: what a user types (not ``python -m agentd``,
#: which would itself import the working directory's folder).
AGENTD = [str(Path(sys.executable).with_name("agentd"))]


def shadowing_folder(tmp_path: Path) -> Path:
    """A folder holding ``agentd/``, the way a clone's parent does."""
    clone = tmp_path / "agentd"
    (clone / "agentd").mkdir(parents=True)
    (clone / "agentd" / "__init__.py").write_text("# a checkout that is not the installed package\n")
    (clone / "README.md").write_text("a clone\n")
    return tmp_path


@pytest.mark.parametrize("prefork", ["1", "0"], ids=["root-forked-from-agentd", "root-from-the-zygote"])
async def test_once_from_a_folder_holding_an_agentd_folder(
    tmp_path: Path, allow_files: AllowedFiles, prefork: str
) -> None:
    allow_files("agentd/README.md", "agentd/agentd/__init__.py")
    cwd = shadowing_folder(tmp_path)
    model = script(tmp_path, [{"text": "ran from {instruction}"}])
    # A once root is forked from agentd itself (rfcs/0185); with that off, the zygote starts it.
    env = {**tagged_env(tmp_path), "AGENTD_ONCE_PREFORK": prefork}
    async with run_agentd(["--model", model, "anywhere"], env=env, cwd=cwd, command=AGENTD) as a:
        assert await a.wait_exit() == ExitCode.OK, a.tail()
    assert a.out == "ran from anywhere\n"
    assert a.find("subagent.started")[0]["zygote"] is (prefork == "0")


async def test_fresh_interpreter_agents_and_a_replacement_zygote_from_such_a_folder(
    tmp_path: Path, allow_files: AllowedFiles
) -> None:
    allow_files("agentd/README.md", "agentd/agentd/__init__.py")
    cwd = shadowing_folder(tmp_path)
    memo = tmp_path / "notes.json"
    memo.write_text(json.dumps({"todo": "milk"}))
    args = [
        "--mode", "reactive", "--model", script(tmp_path, [{"text": "handled"}]), "--spawn-timeout", "1s",
        "--mcp-stdio", f"memo={AGENTD[0]} serve memo --file {memo}",
        "--subscribe", "memo:memo://notes", "--route", "memo://notes=spawn:1", "react",
    ]  # fmt: skip
    async with run_agentd(args, env=tagged_env(tmp_path), cwd=cwd, command=AGENTD) as a:
        zygote = (await a.wait_event("zygote.ready"))["pid"]
        await a.wait_event("ready.changed", lambda e: e["ready"])
        os.kill(zygote, signal.SIGSTOP)  # the next agent starts as a fresh interpreter
        memo.write_text(json.dumps({"todo": "eggs"}))
        fresh = await a.wait_event("subagent.started")
        assert fresh["zygote"] is False
        turn = await a.wait_event("turn.end")
        assert turn["status"] == "completed"
        await a.wait_event("zygote.ready", lambda e: e["replaced"])
        memo.write_text(json.dumps({"todo": "bread"}))
        forked = await a.wait_event("subagent.started", count=2)
        assert forked["zygote"] is True
        await a.wait_event("turn.end", count=2)
        a.signal(signal.SIGTERM)
        assert await a.wait_exit() == ExitCode.OK, a.tail()
    assert a.out == "handled\nhandled\n"

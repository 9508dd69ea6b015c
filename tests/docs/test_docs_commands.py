"""Every ``agentd …`` command the README and docs/*.md show works as shown.

The commands are read from the docs at collection time
(:mod:`tests.support.doccommands`), so a page added later is checked too.
One helper process runs them all through :func:`agentd.cli.main`, forked per
command: ``--help``/``--version``/``check``/``serve`` as written; a run is
validated with ``agentd check`` and, when offline (the ``script:`` model,
bundled servers, ``--mode once``), also run for real. Each must end with the
code the doc gives (``# exit N``), else 0.

The environment is a reader's who followed the page: dummy model keys (a
real key is only needed to reach the provider, which a check never does), a
home whose ``~/.cursor/mcp.json`` and ``~/.config/agentd/agentd.toml`` exist,
and the clone as the working directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.doccommands import REPO, DocCommand, doc_commands, is_run

pytestmark = pytest.mark.slow

SKIPS: dict[str, str] = {
    'agentd --continue "and now the tests" # continue the last conversation; needs: an earlier once run': (
        "what it continues depends on the reader's earlier runs; --continue itself is tested in tests/cli/test_cli_habits.py"
    ),
    'agentd --resume 611e8074 "one more thing" # continue that one (a prefix will do); needs: a saved conversation with that id': (
        "the id is the reader's own conversation; --resume itself is tested in tests/cli/test_cli_habits.py"
    ),
    'agentd --mode reactive --health-addr 0.0.0.0:8080 --status-token-file status.token --mcp-stdio "memo=agentd '
    'serve memo" --subscribe memo:memo://notes -m script:examples/scripts/reactive-demo.json "Report what the notes '
    'say now." # needs: the token file the line above makes': "docs/status.md: the token file is made by openssl",
}
"""Commands (as shown, continuations joined) that cannot be checked here, with why.

Each is marked in its doc with a ``# needs: WHY`` comment too; keep this short:
a command that a dummy key and ``agentd check`` can validate does not belong here.
"""

BATCH_TIMEOUT_S = 600
"""The whole batch: a few dozen checks (milliseconds each, forked) and a
handful of real offline runs (seconds each on a loaded 2-core machine)."""

COMMANDS = doc_commands()


def _key(command: DocCommand) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    return command.argv, command.env


def _home(root: Path) -> Path:
    """The files a reader has made by following the docs before typing a command."""
    home = root / "home"
    (home / ".cursor").mkdir(parents=True)
    (home / ".cursor" / "mcp.json").write_text((REPO / "examples" / "memo-mcp.json").read_text())
    config = home / ".config" / "agentd"
    config.mkdir(parents=True)
    (config / "agentd.toml").write_text(
        'mode = "reactive"\n'
        f'model = "script:{REPO / "examples" / "scripts" / "reactive-demo.json"}"\n'
        'instruction = "Report what the notes say now."\n'
        'subscribe = ["memo:memo://notes"]\n'
        "[servers.memo]\n"
        'command = "agentd"\n'
        'args = ["serve", "memo"]\n'
    )
    return home


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple, dict]:
    """What each distinct command did, keyed by :func:`_key`."""
    root = tmp_path_factory.mktemp("doc-commands")
    home = _home(root)
    jobs: list[dict] = []
    ids: dict[tuple, str] = {}
    for command in COMMANDS:
        if command.text in SKIPS or _key(command) in ids:
            continue
        ids[_key(command)] = str(len(ids))
        argv = [str(home) + word[1:] if word.startswith("~/") else word for word in command.argv]
        jobs.append(
            {"id": ids[_key(command)], "argv": argv, "env": dict(command.env), "check_first": is_run(argv)}
        )
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("AGENTD_", "OPENAI_", "ANTHROPIC_", "OTEL_"))
    }
    env.update(
        HOME=str(home),
        OPENAI_API_KEY="sk-docs-check-not-a-key",
        ANTHROPIC_API_KEY="sk-ant-docs-check-not-a-key",
        PYTHONPATH=str(REPO),
        # `agentd` in a server command is this installation; on PATH as a reader's is.
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
    )
    done = subprocess.run(
        [sys.executable, "-m", "tests.support.doccommands"],
        input=json.dumps(jobs),
        capture_output=True,
        text=True,
        cwd=REPO,
        env=env,
        timeout=BATCH_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    by_id = {job["id"]: job for job in json.loads(done.stdout)}
    return {key: by_id[job_id] for key, job_id in ids.items()}


def test_the_docs_show_commands():
    # The extractor finds what the README shows: a failing parser must not pass by finding nothing.
    sources = {command.source.split(":")[0] for command in COMMANDS}
    assert "README.md" in sources
    assert any(command.argv[:1] == ("check",) for command in COMMANDS)


def test_every_skip_is_marked_in_its_doc_and_still_shown():
    marked = {command.text: command.needs for command in COMMANDS if command.needs}
    assert set(marked) == set(SKIPS), (
        "a command the test skips must say `# needs: WHY` in its doc, and the other way round"
    )


@pytest.mark.parametrize("command", COMMANDS, ids=[c.source for c in COMMANDS])
def test_doc_command(command: DocCommand, results: dict[tuple, dict]) -> None:
    if command.text in SKIPS:
        pytest.skip(f"{command.source}: {SKIPS[command.text]}")
    job = results[_key(command)]
    steps = job["steps"]
    assert steps, f"{command.source}: {command.text!r} did not run"
    for step in steps:
        expected = command.exit_code
        if step is steps[0] and job["check_first"] and expected != 2:
            expected = 0  # `agentd check` of a run that is documented to fail later
        assert step["code"] == expected, (
            f"{command.source}: `agentd {' '.join(step['argv'])}` exited {step['code']}, "
            f"the doc says {expected}\nstdout: {step['stdout'][-2000:]}\nstderr: {step['stderr'][-3000:]}"
        )

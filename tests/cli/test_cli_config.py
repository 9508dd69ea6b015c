"""The real `agentd` command as a subprocess: configuration errors exit 2
before any side effect; `agentd check` prints the redacted effective config."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

#: One `python -m agentd` start is ~0.25 s here; 30 s only trips on a hang.
RUN_TIMEOUT = 30.0


def agentd(
    args: list[str], cwd: Path, extra_env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENTD_") and not k.endswith(("_API_KEY", "_BASE_URL"))
    }
    return subprocess.run(
        [sys.executable, "-m", "agentd", *args],
        cwd=cwd,
        env={**inherited, "PYTHONPATH": str(REPO), **(extra_env or {})},
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture
def site(tmp_path: Path) -> Path:
    """A directory with a model script and a server command that leaves a marker if it ever runs."""
    (tmp_path / "model.json").write_text('{"turns": [{"text": "done"}]}')
    (tmp_path / "server.py").write_text(
        "import pathlib, sys\npathlib.Path(sys.argv[1]).write_text('started')\n"
    )
    return tmp_path


def side_effect_flags(site: Path) -> list[str]:
    """Valid flags that would start a process and write files if anything ran."""
    command = shlex.join([sys.executable, str(site / "server.py"), str(site / "marker")])
    return [
        "--model",
        f"script:{site / 'model.json'}",
        "--mcp-stdio",
        f"probe={command}",
        "--watch-state",
        str(site / "watches.json"),
    ]


CASES = [
    pytest.param(
        "--mode schedule --cron '61 * * * *' task", r"--cron: '61 * * * *' is not valid", id="invalid-cron"
    ),
    pytest.param(
        "--mode reactive --route 'file:///inbox/*=explode' task",
        "--route: 'file:///inbox/*=explode' is not valid: unknown disposition 'explode'",
        id="unknown-route-disposition",
    ),
    pytest.param(
        "--mcp-http probe=http://127.0.0.1:9/mcp task",
        "server probe: 'probe' is not valid: defined twice: in --mcp-stdio probe and in --mcp-http probe",
        id="duplicate-server-names",
    ),
    pytest.param(
        "--config missing.toml task",
        "--config: 'missing.toml' is not valid: cannot read the config file (No such file or directory)",
        id="missing-config-file",
    ),
    pytest.param(
        "--config . task",
        "--config: '.' is not valid: it is a directory, not a regular file; name a file inside it",
        id="unreadable-config-file",
    ),
    pytest.param(
        "--deadline 5x task",
        "--deadline: '5x' is not valid: not a duration; write a number of seconds (1.5)",
        id="bad-duration",
    ),
    pytest.param(
        "--mode foo task",
        "--mode: 'foo' is not valid: choose one of once, loop, reactive, schedule",
        id="unknown-mode",
    ),
]

#: A run refuses these; ``agentd check`` says what the run would need and exits 0 (issue 27).
RUN_ONLY = [
    pytest.param(
        "", "instruction: None is not valid: --mode once needs an instruction", id="once-without-instruction"
    ),
]


@pytest.mark.parametrize(
    ("command", "command_line", "message"),
    [
        *[pytest.param([], *p.values, id=f"run-{p.id}") for p in CASES + RUN_ONLY],
        *[pytest.param(["check"], *p.values, id=f"check-{p.id}") for p in CASES],
    ],
)
def test_config_error_exits_2_before_any_side_effect(
    site: Path, command: list[str], command_line: str, message: str
) -> None:
    result = agentd([*command, *side_effect_flags(site), *shlex.split(command_line)], cwd=site)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert result.stdout == ""
    assert not (site / "marker").exists(), "the server command ran"
    assert not (site / "watches.json").exists(), "the watch-state file was written"
    assert all(line.startswith("agentd: ") for line in result.stderr.splitlines())


def test_env_errors_are_spelled_as_env(site: Path) -> None:
    result = agentd(
        ["check", *side_effect_flags(site), "task"], cwd=site, extra_env={"AGENTD_MAX_STEPS": "many"}
    )
    assert result.returncode == 2
    assert "AGENTD_MAX_STEPS: 'many' is not valid: must be a whole number ≥ 1" in result.stderr
    assert not (site / "marker").exists()


def test_check_prints_redacted_effective_config(site: Path) -> None:
    (site / "agentd.toml").write_text(
        'mode = "reactive"\n'
        'interval = "30s"\n'
        "[servers.web]\n"
        'url = "http://127.0.0.1:9/mcp"\n'
        'headers = { Authorization = "Bearer hdr-secret" }\n'
        "[[routes]]\n"
        "timer = true\n"
    )
    (site / "mcp.json").write_text(
        json.dumps({"mcpServers": {"gh": {"command": "gh-mcp", "env": {"GITHUB_TOKEN": "ghp-secret"}}}})
    )
    result = agentd(
        [
            "check",
            "--config",
            "agentd.toml",
            "--mcp-config",
            "mcp.json",
            *side_effect_flags(site),
            "--max-steps",
            "9",
            "watch the inbox",
        ],
        cwd=site,
        extra_env={"OPENAI_API_KEY": "sk-secret", "AGENTD_MAX_TOKENS": "1000"},
    )
    assert result.returncode == 0, result.stderr
    for secret in ("sk-secret", "hdr-secret", "ghp-secret"):
        assert secret not in result.stdout
        assert secret not in result.stderr
    config = json.loads(result.stdout)
    assert list(config) == sorted(config)
    # The old names still work, with a warning naming the new one.
    assert (config["mode"], config["interval"], config["budget_steps"], config["budget_tokens"]) == (
        "reactive",
        30.0,
        9,
        1000,
    )
    assert (
        "agentd: warning: --max-steps is deprecated and will be removed in the next release; use --budget-steps"
        in result.stderr
    )
    assert (
        "agentd: warning: AGENTD_MAX_TOKENS is deprecated and will be removed in the next release; use AGENTD_BUDGET_TOKENS"
        in result.stderr
    )
    assert sorted(config["servers"]) == ["gh", "probe", "web"]
    assert config["servers"]["web"]["headers"] == {"Authorization": "***"}
    assert config["servers"]["gh"]["env"] == {"GITHUB_TOKEN": "***"}
    assert config["routes"][0]["timer"] is True
    assert not (site / "marker").exists()
    assert not (site / "watches.json").exists()


def test_serve_dispatches_to_the_bundled_servers(tmp_path: Path) -> None:
    result = agentd(["serve", "no-such-server"], cwd=tmp_path)
    assert result.returncode == 2
    assert "unknown server 'no-such-server'" in result.stderr

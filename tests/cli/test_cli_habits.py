"""Issue 27's stumbles, replayed through the real ``agentd`` command: the habits people
bring from other tools (short flags, peers' names, did-you-mean, stdin), messages
that were wrong or mangled, and continuing a once run's conversation."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from agentd.core.exitcodes import ExitCode
from tests.support.agentd_proc import CLI_TIMEOUT, REPO, agentd_cmd, run_cli, script

#: A turn that asks for a tool no server offers, for ever: only a step cap ends it.
LOOPING = [{"text": "working", "tool_calls": [{"name": "nosuch__tool", "arguments": {}}]}]


@pytest.fixture
def home(tmp_path: Path) -> dict[str, str]:
    """This test's own per-user state directory (where once runs save their conversations)."""
    return {"XDG_STATE_HOME": str(tmp_path / "state")}


def lines(text: str) -> list[str]:
    return [x for x in text.splitlines() if x.strip()]


def config_error(problem: str, setting: str) -> str:
    """The final line of a configuration error with one problem (rfcs/0321): the problem, whole, and where to fix it."""
    return (
        f"agentd: error: {problem} — fix: correct {setting} as it says; "
        "`agentd check` validates the settings without running anything"
    )


def result_of(stdout: str) -> dict[str, object]:
    out = json.loads(stdout)
    assert isinstance(out, dict)
    return out


# ------------------------------------------------------------------ peer habits


def test_max_turns_is_the_per_turn_step_cap_and_the_exit_says_steps(
    tmp_path: Path, home: dict[str, str]
) -> None:
    model = script(tmp_path, LOOPING, then="repeat")
    for flag in ("--max-turns", "--max-turn-steps"):
        done = run_cli(["-m", model, flag, "2", "-o", "json", "work"], cwd=tmp_path, env=home)
        assert done.returncode == ExitCode.BUDGET_PARTIAL, done.stderr[-2000:]
        out = result_of(done.stdout)
        assert out["steps"] == 2
        error = out["error"]
        assert isinstance(error, dict)
        # Not "the tree-wide token budget is spent" (issue 27): the limit actually reached.
        assert re.fullmatch(
            r"the agent's turn reached --max-turn-steps 2 \(model calls in one turn\) while it was still calling tools",
            str(error["message"]),
        )
        assert str(error["fix"]).startswith("raise --max-turn-steps")


def test_a_tree_wide_step_budget_says_so(tmp_path: Path, home: dict[str, str]) -> None:
    model = script(tmp_path, LOOPING, then="repeat")
    done = run_cli(["-m", model, "--budget-steps", "3", "-o", "json", "work"], cwd=tmp_path, env=home)
    error = result_of(done.stdout)["error"]
    assert isinstance(error, dict)
    assert re.fullmatch(
        r"the tree-wide step budget is spent: 3 model calls of --budget-steps 3", str(error["message"])
    )


def test_a_value_error_names_the_alias_the_user_wrote(tmp_path: Path) -> None:
    done = run_cli(["check", "--max-turns", "many"], cwd=tmp_path)
    assert done.returncode == ExitCode.CONFIG
    assert lines(done.stderr) == [
        config_error(
            "--max-turns: 'many' is not valid: must be a whole number ≥ 0 (0 turns the per-turn cap off)",
            "--max-turns",
        )
    ]


def test_claudes_tool_and_output_names_are_accepted(tmp_path: Path) -> None:
    done = run_cli(
        [
            "check",
            "--allowedTools",
            "memo__*",
            "--disallowedTools",
            "memo__memo_delete",
            "--output-format",
            "json",
        ],
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    shown = result_of(done.stdout)
    assert (shown["allowed_tools"], shown["disallowed_tools"], shown["output"]) == (
        ["memo__*"],
        ["memo__memo_delete"],
        "json",
    )


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (
            ["--allowdTools", "x", "task"],
            "agentd: error: unknown option --allowdTools — fix: did you mean --allowedTools? "
            "(agentd --help lists the options)",
        ),
        # The unknown flag is blamed, not the instruction after it.
        (
            ["--maxturns", "3", "task"],
            "agentd: error: unknown option --maxturns — fix: did you mean --max-turns? "
            "(agentd --help lists the options)",
        ),
        (
            ["--modle=openai:x", "task"],
            "agentd: error: unknown option --modle — fix: did you mean --mode or --model? "
            "(agentd --help lists the options)",
        ),
        (
            ["--json", "task"],
            "agentd: error: unknown option --json — fix: write --output json (one JSON object) or --output "
            "stream-json (a JSON line per step, like codex exec --json)",
        ),
        (
            ["summarise", "the", "logs"],
            "agentd: error: more than one INSTRUCTION: 'the logs' follows the first — fix: quote the "
            'instruction as one argument (agentd "do this and that") or give it with --instruction',
        ),
        (
            ["task", "-m"],
            "agentd: error: --model needs a value — fix: write --model VALUE (agentd --help says which)",
        ),
    ],
    ids=["did-you-mean", "blames-the-flag", "flag=value", "json", "unquoted", "no-value"],
)
def test_a_usage_error_is_one_line_that_blames_the_right_word(
    tmp_path: Path, argv: list[str], line: str
) -> None:
    for command in ([], ["check"]):
        done = run_cli([*command, *argv], cwd=tmp_path)
        assert done.returncode == ExitCode.CONFIG
        assert done.stdout == ""
        assert lines(done.stderr) == [line], done.stderr


def test_short_flags_and_claudes_print_flag(tmp_path: Path, home: dict[str, str]) -> None:
    model = script(tmp_path, [{"text": "hello from {instruction}"}])
    (tmp_path / "agentd.toml").write_text(f"model = {json.dumps(model)}\n")
    done = run_cli(["-p", "-c", "agentd.toml", "-o", "json", "-q", "the task"], cwd=tmp_path, env=home)
    assert done.returncode == 0, done.stderr
    assert result_of(done.stdout)["result"] == "hello from the task"
    assert done.stderr == ""  # -q: only the answer and errors
    verbose = run_cli(["-m", model, "-v", "the task"], cwd=tmp_path, env=home)
    assert verbose.stdout == "hello from the task\n"
    assert '"level":"debug"' in verbose.stderr


def test_a_missing_config_given_as_c_points_at_continue(tmp_path: Path) -> None:
    done = run_cli(["-c", "more please"], cwd=tmp_path)
    assert done.returncode == ExitCode.CONFIG
    # The hint just before the final line, which is the error and its fix (rfcs/0321).
    *_, hint, last = lines(done.stderr)
    assert hint == "agentd: (-c is --config; --continue continues the last conversation)"
    assert last.startswith("agentd: error: --config: 'more please' is not valid")


def test_help_lists_the_commands_and_groups_the_flags_a_screen_each(tmp_path: Path) -> None:
    done = run_cli(["--help"], cwd=tmp_path, env={"COLUMNS": "100"})
    assert done.returncode == 0
    text = done.stdout
    assert re.search(r"^  check +validate the settings", text, re.M)
    assert re.search(r"^  serve NAME +run a bundled MCP server: memo, files, inbox, kube", text, re.M)
    sections = re.split(r"\n\n(?=\S)", text)
    titles = ["run:", "model", "MCP servers", "routing", "limits:", "output:", "operations:"]
    groups = {t: next(s for s in sections if s.startswith(t)) for t in titles}
    for title, section in groups.items():
        assert len(section.splitlines()) <= 24, f"{title} does not fit a screen:\n{section}"
    assert "-m, --model SPEC" in groups["model"]
    assert "-c, --config FILE" in groups["run:"]
    assert "-o, --output FORMAT" in groups["output:"]
    assert "--max-turns (--max-turn-steps)" in text
    assert "--max-steps" not in text  # deprecated names are not advertised


def test_serve_help_lists_the_servers_and_each_documents_itself(tmp_path: Path) -> None:
    listing = run_cli(["serve", "--help"], cwd=tmp_path)
    assert listing.returncode == 0
    for name in ("memo", "files", "inbox", "kube"):
        assert re.search(rf"^  {name} +\S", listing.stdout, re.M), listing.stdout
        own = run_cli(["serve", name, "--help"], cwd=tmp_path)
        assert own.returncode == 0
        assert "resources" in own.stdout
        assert f"agentd --mcp-stdio '{name}=agentd serve {name}" in own.stdout
    bare = run_cli(["serve"], cwd=tmp_path)
    assert bare.returncode == ExitCode.CONFIG
    assert lines(bare.stderr) == [
        "agentd serve: which server? choose one of: memo, inbox, files, kube, webhook (agentd serve --help describes them)"
    ]


# ------------------------------------------------------------------ stdin


def test_piped_input_with_an_instruction_is_its_context(tmp_path: Path, home: dict[str, str]) -> None:
    model = script(tmp_path, [{"text": "I was told: {instruction}"}])
    done = run_cli(["-m", model, "summarise"], cwd=tmp_path, env=home, input="line one\nline two\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "I was told: summarise\n\n<stdin>\nline one\nline two\n</stdin>\n"


def test_piped_input_alone_is_the_instruction(tmp_path: Path, home: dict[str, str]) -> None:
    model = script(tmp_path, [{"text": "task: {instruction}"}])
    done = run_cli(["-m", model], cwd=tmp_path, env=home, input="say hello\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "task: say hello\n\n"
    nothing = run_cli(["-m", model], cwd=tmp_path, env=home)  # stdin /dev/null: no instruction anywhere
    assert nothing.returncode == ExitCode.CONFIG
    assert lines(nothing.stderr) == [
        config_error(
            "instruction: None is not valid: --mode once needs an instruction: pass it as the argument, "
            "--instruction TEXT or --instruction @FILE",
            "instruction",
        )
    ]


@pytest.mark.parametrize("word", ["-", "@-"])
def test_dash_reads_the_instruction_from_stdin(tmp_path: Path, home: dict[str, str], word: str) -> None:
    model = script(tmp_path, [{"text": "task: {instruction}"}])
    done = run_cli(["-m", model, word], cwd=tmp_path, env=home, input="@not-a-file do it\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "task: @not-a-file do it\n\n"


def test_stdin_past_the_cap_or_empty_is_refused_with_the_fix(tmp_path: Path, home: dict[str, str]) -> None:
    model = script(tmp_path, [{"text": "x"}])
    big = run_cli(["-m", model, "summarise"], cwd=tmp_path, env=home, input="x" * (1024 * 1024 + 1))
    assert big.returncode == ExitCode.CONFIG
    assert lines(big.stderr) == [
        config_error(
            "stdin: '-' is not valid: more than 1048576 bytes arrived on stdin; pipe less (head -c, grep), "
            "or save it to a file and let the agent read it with a tool (agentd serve files)",
            "stdin",
        )
    ]
    empty = run_cli(["-m", model, "-"], cwd=tmp_path, env=home, input="")
    assert empty.returncode == ExitCode.CONFIG
    assert lines(empty.stderr) == [
        config_error(
            "INSTRUCTION: '-' is not valid: stdin was empty; pipe the instruction in "
            "(echo 'the task' | agentd -), or give it as the argument",
            "INSTRUCTION",
        )
    ]


@pytest.mark.realclock
def test_a_silent_inherited_pipe_is_not_waited_on_for_ever(tmp_path: Path, home: dict[str, str]) -> None:
    model = script(tmp_path, [{"text": "done: {instruction}"}])
    with subprocess.Popen(["sleep", "600"], stdout=subprocess.PIPE) as writer:  # holds the pipe open, silent
        try:
            done = run_cli(["-m", model, "task"], cwd=tmp_path, env=home, stdin=writer.stdout.fileno())  # type: ignore[union-attr]
        finally:
            writer.kill()
    assert done.returncode == 0, done.stderr
    assert done.stdout == "done: task\n"
    assert (
        "agentd: warning: stdin is a pipe with nothing on it after 3s; running without piped context — fix: "
        "pipe the input (cmd | agentd …), or give stdin /dev/null (< /dev/null) when there is none"
    ) in done.stderr


# ------------------------------------------------------------------ wrong or mangled messages


def test_check_works_without_an_instruction_and_says_what_a_run_needs(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text(
        json.dumps({"mcpServers": {"memo": {"command": "agentd", "args": ["serve", "memo"]}}})
    )
    done = run_cli(["check", "--mcp-config", "mcp.json"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert sorted(result_of(done.stdout)["servers"]) == ["memo"]  # type: ignore[arg-type]
    assert lines(done.stderr) == [
        "agentd: note: a run also needs model — fix: choose a model with --model or AGENTD_MODEL: openai:MODEL "
        "(e.g. openai:gpt-4o-mini), anthropic:MODEL (e.g. anthropic:claude-sonnet-4-5), openai-responses:MODEL, "
        "azure:DEPLOYMENT, bedrock:MODEL, vertex:MODEL, NAME:MODEL for a [providers.NAME] endpoint, or script:FILE",
        "agentd: note: a run also needs instruction — fix: --mode once needs an instruction: pass it as the "
        "argument, --instruction TEXT or --instruction @FILE",
    ]


def test_the_working_directory_is_never_masked(tmp_path: Path) -> None:
    env = {"PWD": str(tmp_path), "OLDPWD": str(tmp_path)}
    missing = run_cli(["check", "--config", str(tmp_path / "nosuch.toml")], cwd=tmp_path, env=env)
    assert missing.returncode == ExitCode.CONFIG
    assert lines(missing.stderr) == [
        config_error(
            f"--config: '{tmp_path}/nosuch.toml' is not valid: cannot read the config file "
            "(No such file or directory); check the path and permissions",
            "--config",
        )
    ]
    (tmp_path / "s").mkdir()
    shown = run_cli(["check", "--state-dir", str(tmp_path / "s")], cwd=tmp_path, env=env)
    assert shown.returncode == 0, shown.stderr
    assert result_of(shown.stdout)["state_dir"] == str(tmp_path / "s")


def test_an_ordinary_header_value_masks_nothing(tmp_path: Path) -> None:
    (tmp_path / "mcp.json").write_text(
        json.dumps(
            {
                "mcpServers": {
                    "web": {
                        "url": "http://127.0.0.1:9/mcp",
                        "headers": {"X-Client": "cursor", "Authorization": "Bearer tok-9f8e7d6c5b"},
                    }
                }
            }
        )
    )
    done = run_cli(["check", "--mcp-config", "mcp.json", "open cursor.py and fix the cursor"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    shown = result_of(done.stdout)
    assert shown["instruction"] == "open cursor.py and fix the cursor"
    assert shown["servers"]["web"]["headers"] == {"X-Client": "***", "Authorization": "***"}  # type: ignore[index]
    assert "tok-9f8e7d6c5b" not in done.stdout + done.stderr


# ------------------------------------------------------------------ continuing a conversation

#: {instruction} is the conversation's first user message, {input} the latest.
RECALL = [{"text": "first: {instruction} | now: {input}"}]


def test_continue_sees_the_previous_turn_and_keeps_the_session_id(
    tmp_path: Path, home: dict[str, str]
) -> None:
    model = script(tmp_path, RECALL)
    first = run_cli(["-m", model, "-o", "json", "remember the milk"], cwd=tmp_path, env=home)
    assert first.returncode == 0, first.stderr
    one = result_of(first.stdout)
    assert one["result"] == "first: remember the milk | now: remember the milk"
    second = run_cli(["-m", model, "-o", "json", "--continue", "what was it?"], cwd=tmp_path, env=home)
    assert second.returncode == 0, second.stderr
    two = result_of(second.stdout)
    assert two["result"] == "first: remember the milk | now: what was it?"
    assert two["session_id"] == one["session_id"]
    resumed = [json.loads(x) for x in second.stderr.splitlines() if '"conversation.resumed"' in x]
    assert [(e["session"], e["turns"]) for e in resumed] == [(one["session_id"], 1)]
    # --resume by id (a unique prefix will do) continues the same conversation, now two turns long.
    third = run_cli(
        ["-m", model, "-o", "json", "--resume", str(one["session_id"])[:8], "and then?"],
        cwd=tmp_path,
        env=home,
    )
    assert result_of(third.stdout)["result"] == "first: remember the milk | now: and then?"
    saved = list((tmp_path / "state" / "agentd" / "conversations").iterdir())
    assert [p.name for p in saved] == [f"{one['session_id']}.journal"]
    assert oct(saved[0].stat().st_mode & 0o777) == "0o600"
    assert oct((tmp_path / "state" / "agentd").stat().st_mode & 0o777) == "0o700"


def test_resume_an_unknown_id_exits_2_with_the_fix(tmp_path: Path, home: dict[str, str]) -> None:
    model = script(tmp_path, RECALL)
    none_yet = run_cli(["-m", model, "--continue", "more"], cwd=tmp_path, env=home)
    assert none_yet.returncode == ExitCode.CONFIG
    where = tmp_path / "state" / "agentd" / "conversations"
    assert lines(none_yet.stderr) == [
        config_error(
            f"--continue: '{where}' is not valid: no conversation is saved there yet: run agentd once "
            "without --continue first (each once run saves its conversation), or give the --state-dir it was "
            "saved in",
            "--continue",
        )
    ]
    first = run_cli(["-m", model, "-o", "json", "hello"], cwd=tmp_path, env=home)
    sid = result_of(first.stdout)["session_id"]
    unknown = run_cli(["-m", model, "--resume", "0123abcd", "more"], cwd=tmp_path, env=home)
    assert unknown.returncode == ExitCode.CONFIG
    assert unknown.stdout == ""
    (line,) = lines(unknown.stderr)
    assert re.fullmatch(
        rf"agentd: error: --resume: '0123abcd' is not valid: no conversation with this id in "
        rf"'{re.escape(str(where))}' \(the newest there: {sid} \(last saved [-0-9]+ [0-9:]+ UTC\); agentd "
        r"--continue continues the newest\); check the id and --state-dir, or drop --resume to start a new "
        r"conversation — fix: correct --resume as it says; `agentd check` validates the settings without "
        r"running anything",
        line,
    )
    daemon = run_cli(["-m", model, "--mode", "loop", "--continue", "more"], cwd=tmp_path, env=home)
    assert daemon.returncode == ExitCode.CONFIG
    assert "--continue: True is not valid: --continue is for --mode once (its conversation)" in daemon.stderr


def test_ephemeral_saves_nothing_and_check_names_what_continue_picks(
    tmp_path: Path, home: dict[str, str]
) -> None:
    model = script(tmp_path, RECALL)
    run = run_cli(["-m", model, "--ephemeral", "hello"], cwd=tmp_path, env=home)
    assert run.returncode == 0, run.stderr
    assert not (tmp_path / "state" / "agentd" / "conversations").exists()
    claude_name = run_cli(["-m", model, "--no-session-persistence", "hello"], cwd=tmp_path, env=home)
    assert claude_name.returncode == 0
    assert not (tmp_path / "state" / "agentd" / "conversations").exists()
    kept = run_cli(["-m", model, "-o", "json", "hello"], cwd=tmp_path, env=home)
    sid = result_of(kept.stdout)["session_id"]
    check = run_cli(["check", "-m", model, "--continue"], cwd=tmp_path, env=home)
    assert check.returncode == 0
    assert re.search(rf"^agentd: note: a run continues conversation {sid} \(last saved ", check.stderr, re.M)


# ------------------------------------------------------------------ a reader that leaves early


def run_into_closed_pipe(args: list[str], cwd: Path, *, closed: tuple[str, ...]) -> tuple[int, str]:
    """``agentd ARGS`` with the named streams a pipe whose reader has already gone (``| head -1`` once
    ``head`` has its line): every write to them fails with EPIPE. Returns the exit code and the other
    stream's text (stderr, unless it is one of the closed)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    inherited = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("AGENTD_") and not k.endswith(("_API_KEY", "_BASE_URL"))
    }
    try:
        done = subprocess.run(
            agentd_cmd(*args),
            cwd=cwd,
            env={**inherited, "PYTHONPATH": str(REPO)},
            stdin=subprocess.DEVNULL,
            stdout=write_end if "stdout" in closed else subprocess.DEVNULL,
            stderr=write_end if "stderr" in closed else subprocess.PIPE,
            timeout=CLI_TIMEOUT,
            check=False,
        )
    finally:
        os.close(write_end)
    return done.returncode, (done.stderr or b"").decode()


def test_a_reader_that_leaves_early_gets_no_traceback(tmp_path: Path) -> None:
    """`agentd check | head -1` (rfcs/0323): no BrokenPipeError traceback, and the exit code stays
    the command's verdict, as with git or grep."""
    model = script(tmp_path, [{"text": "hello"}])
    # The configuration on stdout, the notes (what a run also needs) on stderr.
    code, err = run_into_closed_pipe(["check"], tmp_path, closed=("stdout",))
    assert (code, "Traceback" in err, "BrokenPipe" in err) == (0, False, False), err
    assert err.startswith("agentd: note: a run also needs model"), err
    # `agentd check 2>&1 | head -1`: the notes meet the closed pipe too; a traceback would be exit 1.
    code, _ = run_into_closed_pipe(["check"], tmp_path, closed=("stdout", "stderr"))
    assert code == 0
    # A failed configuration keeps its exit 2 when nobody reads its error line.
    code, _ = run_into_closed_pipe(["check", "--mode", "nosuch"], tmp_path, closed=("stdout", "stderr"))
    assert code == ExitCode.CONFIG
    code, err = run_into_closed_pipe(
        ["check", "--connect", "--model", model, "hi"], tmp_path, closed=("stdout",)
    )
    assert (code, "Traceback" in err) == (0, False), err
    code, err = run_into_closed_pipe(["--help"], tmp_path, closed=("stdout",))
    assert (code, err) == (0, "")
    # Anything else that meets the closed pipe ends quietly as an output failure, not a crash.
    code, _ = run_into_closed_pipe(["serve", "nosuch"], tmp_path, closed=("stderr",))
    assert code == ExitCode.OUTPUT_FAILED

"""The ``agentd …`` commands the README and ``docs/*.md`` show, found and run.

:func:`doc_commands` reads every fenced shell block (``sh``, ``bash``,
``shell``, ``console``; in ``text`` blocks only lines that start with a
``$`` prompt) and keeps the lines whose command is agentd (``agentd``,
``.venv/bin/agentd``, ``python -m agentd``). Continuation lines are joined;
the command ends at the first pipe, redirection or ``;``/``&&``; leading
``NAME=value`` words become its environment. A trailing comment may say
``exit N`` (the code the command is documented to end with) or
``needs: WHY`` (it cannot be checked here; the test keeps a list of these).

``python -m tests.support.doccommands`` runs a batch of them (JSON on stdin,
JSON on stdout): the helper imports agentd once, then forks one child per
command that calls :func:`agentd.cli.main` with the command's arguments, as
the console script does, so a batch of dozens costs one interpreter start.
A run (not ``check``, ``serve``, ``--help`` or ``--version``) is first
validated with ``agentd check`` and the same arguments; when the effective
configuration ``check`` prints is offline (``--mode once``, the ``script:``
model, only bundled servers) it is then run for real.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import sys
import tempfile
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

SHELL_BLOCKS = frozenset({"sh", "bash", "shell", "console"})
"""Fence info strings whose every line is a command."""
PROMPT_BLOCKS = frozenset({"text", ""})
"""Fence info strings whose ``$ …`` lines are commands (the rest is output)."""

_AGENTD = (
    ("agentd",),
    (".venv/bin/agentd",),
    ("python", "-m", "agentd"),
    (".venv/bin/python", "-m", "agentd"),
)
_ENV_WORD = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_OPERATOR = re.compile(r"^[();<>|&]+$")
_EXIT = re.compile(r"\bexits? (\d+)\b")
_NEEDS = re.compile(r"\bneeds: (.+)$")

RUN_TIMEOUT_S = 90
"""One command's bound (a real run starts a supervisor, a template and a server
on a loaded 2-core machine: seconds); the bound only stops a hang."""


@dataclass(frozen=True)
class DocCommand:
    """One ``agentd`` command line shown in a doc."""

    source: str
    """``README.md:57`` or ``docs/models.md:12``: where the line is."""
    text: str
    """The command as shown (continuations joined, prompt removed)."""
    argv: tuple[str, ...]
    """agentd's arguments (after the command word, before any pipe or redirection)."""
    env: tuple[tuple[str, str], ...] = ()
    """``NAME=value`` words written before the command."""
    exit_code: int = 0
    """The exit code the doc says it ends with (``# exit N``), else 0."""
    needs: str | None = None
    """Why it cannot be checked here (``# needs: …``), else None."""


def _fences(text: str) -> list[tuple[str, list[tuple[int, str]]]]:
    """(info string, [(line number, line)]) for each fenced block."""
    blocks: list[tuple[str, list[tuple[int, str]]]] = []
    current: list[tuple[int, str]] | None = None
    info = ""
    for number, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if current is None:
            if stripped.startswith("```"):
                info = stripped[3:].strip().split(" ")[0].lower()
                current = []
        elif stripped.startswith("```"):
            blocks.append((info, current))
            current = None
        else:
            current.append((number, line))
    return blocks


def _logical_lines(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Lines with their backslash continuations joined, numbered by their first line."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, line in lines:
        if pending is not None:
            number, line = pending[0], pending[1] + " " + line.strip()
            pending = None
        if line.rstrip().endswith("\\"):
            pending = (number, line.rstrip()[:-1])
            continue
        out.append((number, line))
    if pending is not None:
        out.append(pending)
    return out


def _comment(line: str) -> str:
    """The trailing ``# …`` comment of a shell line (outside quotes), or ''."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1].isspace()):
            return line[i + 1 :].strip()
    return ""


def parse_line(source: str, line: str) -> DocCommand | None:
    """The agentd command on one shell line, or None when the line runs something else."""
    lexer = shlex.shlex(line, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    try:
        words = list(lexer)
    except ValueError:  # an unbalanced quote: not a command a reader could type
        return None
    env: list[tuple[str, str]] = []
    while words and _ENV_WORD.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env.append((name, value))
    for head in _AGENTD:
        if tuple(words[: len(head)]) == head:
            words = words[len(head) :]
            break
    else:
        return None
    argv: list[str] = []
    for word in words:
        if _OPERATOR.match(word):
            if argv and argv[-1].isdigit() and word[0] in "<>":
                argv.pop()  # the fd number of a redirection (2>…)
            break
        argv.append(word)
    comment = _comment(line)
    exit_match = _EXIT.search(comment)
    needs_match = _NEEDS.search(comment)
    return DocCommand(
        source=source,
        text=" ".join(line.split()),
        argv=tuple(argv),
        env=tuple(env),
        exit_code=int(exit_match.group(1)) if exit_match else 0,
        needs=needs_match.group(1).strip() if needs_match else None,
    )


def commands_in(path: Path, root: Path = REPO) -> list[DocCommand]:
    """Every agentd command shown in one Markdown file."""
    name = path.relative_to(root).as_posix()
    found: list[DocCommand] = []
    for info, lines in _fences(path.read_text(encoding="utf-8")):
        if info not in SHELL_BLOCKS and info not in PROMPT_BLOCKS:
            continue
        for number, line in _logical_lines(lines):
            text = line.strip()
            if text.startswith("$ "):
                text = text[2:]
            elif info not in SHELL_BLOCKS:
                continue
            command = parse_line(f"{name}:{number}", text)
            if command is not None:
                found.append(command)
    return found


def doc_files(root: Path = REPO) -> list[Path]:
    """The README and every page in docs/ (pages added later are picked up too)."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def doc_commands(root: Path = REPO) -> list[DocCommand]:
    """Every agentd command the README and docs/*.md show, in file order."""
    return [command for path in doc_files(root) for command in commands_in(path, root)]


# --------------------------------------------------------------------------- running a batch


@dataclass
class Job:
    """One command to run in the helper, and what became of it."""

    id: str
    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)
    check_first: bool = False
    """Validate with ``agentd check`` first; run for real only when offline."""
    steps: list[dict[str, Any]] = field(default_factory=list)
    """What ran: ``{"argv", "code", "seconds", "stdout", "stderr"}`` per step."""


def is_run(argv: tuple[str, ...] | list[str]) -> bool:
    """A command that would run agents (not ``check``/``serve``/``status``, not ``--help``/``--version``)."""
    if argv and argv[0] in ("check", "serve", "status"):
        return False
    return not any(word in ("--help", "-h", "--version") for word in argv)


def offline(config: dict[str, Any]) -> bool:
    """Whether the effective configuration ``agentd check`` printed can run here for real.

    A once run of the ``script:`` model whose servers are all bundled ones
    (``agentd serve …`` started as ``python -m agentd serve …``): no network,
    no key, and it ends by itself.
    """
    if config.get("mode") != "once" or not str(config.get("model", "")).startswith("script:"):
        return False
    for server in (config.get("servers") or {}).values():
        args = list(server.get("args") or [])
        if server.get("url") is not None or args[:3] != ["-m", "agentd", "serve"]:
            return False
    return True


def _child(argv: list[str], env: dict[str, str], out: Path, err: Path) -> None:
    """In the forked child: become ``agentd ARGV`` and exit with its code."""
    code = 70
    try:
        os.environ.update(env)
        stdin = os.open(os.devnull, os.O_RDONLY)
        os.dup2(stdin, 0)
        os.dup2(os.open(out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 1)
        os.dup2(os.open(err, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), 2)
        # A hang ends the child (SIGALRM's default action) instead of the batch.
        signal.alarm(RUN_TIMEOUT_S)
        from agentd.cli import main

        try:
            code = main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else 2
    except BaseException:
        traceback.print_exc()
    finally:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):  # a closed stream changes nothing here
                stream.flush()
        os._exit(code)


def _run_all(steps: list[tuple[Job, list[str]]], workdir: Path, parallel: int) -> None:
    """Run each (job, argv) in a forked child, ``parallel`` at a time; append each outcome to its job."""
    pending = list(enumerate(steps))
    running: dict[int, tuple[Job, list[str], Path, Path, float]] = {}
    while pending or running:
        while pending and len(running) < parallel:
            index, (job, argv) = pending.pop(0)
            out, err = workdir / f"{index}.out", workdir / f"{index}.err"
            pid = os.fork()
            if pid == 0:
                _child(argv, job.env, out, err)
            running[pid] = (job, argv, out, err, time.monotonic())
        pid, status = os.wait()
        if pid not in running:
            continue
        job, argv, out, err, started = running.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        job.steps.append(
            {
                "argv": argv,
                "code": code,
                "seconds": round(time.monotonic() - started, 3),
                "stdout": out.read_text(errors="replace"),
                "stderr": err.read_text(errors="replace"),
            }
        )


def _warm_up() -> None:
    """Import and exercise what every child needs, once, before forking (children share it)."""
    import io

    from agentd.cli import main

    # The settings models build their validators on first use: a check of
    # an offline run builds them here, not in each child.
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        main(["check", "--model", f"script:{REPO / 'examples' / 'scripts' / 'hello.json'}", "warm-up"])
    import agentd.supervisor.app  # noqa: F401 - what a real run imports first


def run_batch(jobs: list[Job], parallel: int = 3) -> list[Job]:
    """Run every job: checks and plain commands first, then the offline runs they allow."""
    _warm_up()

    with tempfile.TemporaryDirectory(prefix="agentd-doc-commands-") as tmp:
        workdir = Path(tmp)
        _run_all(
            [(job, ["check", *job.argv] if job.check_first else job.argv) for job in jobs], workdir, parallel
        )
        real: list[tuple[Job, list[str]]] = []
        for job in jobs:
            if not job.check_first or job.steps[0]["code"] != 0:
                continue
            try:
                config = json.loads(job.steps[0]["stdout"])
            except ValueError:
                job.steps[0]["stderr"] += "\n(doccommands: agentd check printed no JSON configuration)"
                continue
            if offline(config):
                real.append((job, job.argv))
        # Real runs start template processes and servers: fewer at once.
        _run_all(real, workdir, max(1, parallel - 1))
    return jobs


def main() -> None:
    jobs = [Job(**raw) for raw in json.load(sys.stdin)]
    json.dump([asdict(job) for job in run_batch(jobs)], sys.stdout)


if __name__ == "__main__":
    main()

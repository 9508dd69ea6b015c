"""The ``agentd`` command: parse, validate, then run the supervisor or ``agentd check``.

Every setting is validated (see :mod:`agentd.config`) before anything runs;
a configuration or usage error prints one line per problem on stderr and
exits 2. Then the supervisor (:func:`agentd.supervisor.app.run`) takes over
and its return value is the exit code.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, NoReturn

from agentd import __version__
from agentd.cli import _stdin
from agentd.cli._options import UsageError, alias_spellings, build_parser, flags_from_args, usage_error
from agentd.config import (
    ConfigErrors,
    Settings,
    agent_notes,
    agent_warnings,
    deprecations,
    effective_config,
    ignored_keys,
    load_settings,
    missing_server_commands,
    run_needs,
    server_secrets,
)
from agentd.core.errors import ConfigError
from agentd.core.exitcodes import ExitCode
from agentd.core.jsonvalue import JSONValue
from agentd.core.redact import register_secrets, secret_values
from agentd.core.safetext import escape_controls
from agentd.observe.errorline import config_error_lines, error_line
from agentd.observe.output import claim_standard_fds, mute, print_line

if TYPE_CHECKING:
    from agentd.core.prelaunch import EarlyProcess
    from agentd.state.conversations import Found

__all__ = ["exit_process", "main"]


def _say(message: object) -> None:
    """One line for the person who ran agentd, on stderr: its control characters shown escaped."""
    print_line(f"agentd: {escape_controls(str(message))}", err=True)


def _print_config_error(
    exc: ConfigError, spelled: dict[str, str] | None = None, note: str | None = None
) -> None:
    """One line per problem, the last one ``agentd: error: … — fix: …`` (rfcs/0321).

    A setting given under another tool's name is named that way; ``note``
    comes just before the final line.
    """
    problems = []
    for problem in exc.problems if isinstance(exc, ConfigErrors) else (exc,):
        alias = (spelled or {}).get(problem.setting)
        problems.append(ConfigError(alias, problem.value, problem.fix) if alias is not None else problem)
    *lines, final = config_error_lines(problems)
    for line in lines:
        print_line(line, err=True)
    if note is not None:
        _say(note)
    print_line(final, err=True)


def _serve(argv: list[str]) -> int:
    try:
        from agentd.servers import main as servers_main
    except ImportError as exc:
        if exc.name != "agentd.servers":
            raise
        print_line(
            error_line(
                "the bundled servers (agentd.servers) are not available in this build",
                "install agentd from a full clone (pip install .) to get `agentd serve`",
            ),
            err=True,
        )
        return int(ExitCode.CRASHED)
    return servers_main(argv)


def _launch_servers_early(settings: Settings) -> dict[str, EarlyProcess]:
    """Start the stdio servers now, before the supervisor's imports (:mod:`agentd.core.prelaunch`).

    Only once nothing left to check can refuse the run: every setting was
    validated by the settings layers; the ``--watch-state`` lock is taken by
    the supervisor before any server starts, so with it set the servers start
    later, as before.
    """
    if settings.watch_state is not None:
        return {}
    from agentd.core.prelaunch import forkable, launch
    from agentd.watches.limits import watch_limits

    try:  # the [watches] settings the supervisor turns into limits (a ConfigError there is exit 2)
        watch_limits(settings.watches)
    except ConfigError:
        return {}
    early: dict[str, EarlyProcess] = {}
    for name, spec in settings.servers.items():
        # agentd's own servers are forked by the supervisor once its imports are done (rfcs/0366).
        if spec.command is not None and not forkable(spec.command, spec.args, spec.env, spec.cwd):
            proc = launch(spec.command, spec.args, env=spec.env, cwd=spec.cwd)
            if proc is not None:
                early[name] = proc
    return early


def _run(settings: Settings, closed_fds: frozenset[int]) -> int:
    early = _launch_servers_early(settings)
    try:
        from agentd.supervisor.app import run
    except ImportError as exc:
        for proc in early.values():
            proc.discard()
        if exc.name != "agentd.supervisor.app":
            raise
        print_line(
            error_line(
                "the configuration is valid, but the supervisor (agentd.supervisor.app) is not "
                "available in this build; nothing was run",
                "install agentd from a full clone (pip install .) to run agents",
            ),
            err=True,
        )
        return int(ExitCode.CRASHED)
    return int(run(settings, closed_fds=closed_fds, early_servers=early))


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``agentd`` command with ``argv`` (``sys.argv[1:]`` when None); return the exit code.

    Called without ``argv`` (the console script, ``python -m agentd``) it owns
    the process: once the command is done it ends the process at once with
    its exit code (:func:`exit_process`), never returning.
    """
    if argv is None:
        # Owning the process: no collector passes over what the imports build (rfcs/0367).
        from agentd.core.heap import pause_collector

        pause_collector()
        exit_process(_main(sys.argv[1:]))
    return _main(argv)


def exit_process(code: int) -> NoReturn:
    """End this process with ``code`` as soon as its work is done.

    By then every result, telemetry line and child process has been dealt
    with (the supervisor's teardown, a bundled server's stop). What is left
    is the interpreter's own teardown: garbage-collecting every module, about
    0.1-0.7 s of a Job's wall time depending on load, which changes nothing
    outside the process. So: flush Python's own stdout/stderr buffers, run the
    ``atexit`` handlers (logging's shutdown, a coverage collector's save), and
    leave with ``os._exit``.
    """
    import atexit

    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code)


def _main(argv: Sequence[str]) -> int:
    # First: a closed stdin/stdout/stderr gets /dev/null before anything
    # opens a file or socket that would take its number.
    closed_fds = claim_standard_fds()
    try:
        return _command(argv, closed_fds)
    except BrokenPipeError:
        # A reader left while something not written through agentd.observe.output.print_line was being
        # written (what agentd writes itself keeps its exit code there; argparse's --help drops the
        # error itself): stop writing, quietly, as other commands do (rfcs/0323). The command was
        # cut short where it wrote, so it ends as an output failure; the final error line has
        # nowhere to go, its stream is the one that closed.
        mute(sys.stdout)
        mute(sys.stderr)
        return int(ExitCode.OUTPUT_FAILED)


def _command(argv: Sequence[str], closed_fds: frozenset[int]) -> int:
    args = list(argv)
    if args and args[0] == "serve":
        return _serve(args[1:])
    if args and args[0] == "status":
        from agentd.cli._status import main as status_main

        return status_main(args[1:])
    check = bool(args) and args[0] == "check"
    if check:
        args = args[1:]
    parser = build_parser("agentd check" if check else "agentd")
    try:
        ns, extras = parser.parse_known_args(args)
        if extras:
            raise UsageError(usage_error(extras, check=check))
    except UsageError as exc:
        _say(f"error: {exc}")
        return int(ExitCode.CONFIG)
    except SystemExit as exc:  # argparse: --help or --version (0), already printed
        return exc.code if isinstance(exc.code, int) else int(ExitCode.CONFIG)
    spelled = alias_spellings(args)
    # Credentials from the environment are hidden from every message from here on,
    # configuration errors included.
    register_secrets(secret_values(os.environ))
    try:
        flags, config_file = flags_from_args(ns)
        from_stdin = not check and flags.get("instruction") in _stdin.INSTRUCTION_WORDS
        if from_stdin:
            flags["instruction"] = _stdin.instruction()
        # A model and an instruction are checked last: stdin may still give the instruction.
        settings = load_settings(flags, config_file=config_file, env=os.environ, run_inputs=False)
        found = _conversation(settings)
    except ConfigError as exc:
        hint = "(-c is --config; --continue continues the last conversation)"
        _print_config_error(exc, spelled, hint if exc.setting == "--config" and "-c" in args else None)
        return int(ExitCode.CONFIG)
    register_secrets(server_secrets(settings))
    for old_name in deprecations(settings):
        _say(old_name.message())
    for key in ignored_keys(settings):
        _say(f"warning: {key}: not used by agentd; ignored")
    for line in agent_warnings(settings):
        _say(f"warning: {line}")
    if check or _says_info(settings):
        for line in agent_notes(settings):
            _say(f"note: {line}")
    if check:
        if getattr(ns, "connect", None):
            return _check_connect(settings)
        return _check(settings, found, show_secrets=bool(getattr(ns, "show_secrets", False)))
    if found is not None:
        # The supervisor continues this conversation by its id (--continue resolved once, here).
        settings = settings.model_copy(update={"resume": found.id, "continue_conversation": False})
    if not from_stdin and settings.mode == "once":
        try:
            settings = _with_piped_input(settings)
        except ConfigError as exc:
            _print_config_error(exc)
            return int(ExitCode.CONFIG)
    needs = run_needs(settings)
    if needs:
        _print_config_error(ConfigErrors(needs), spelled)
        return int(ExitCode.CONFIG)
    return _run(settings, closed_fds)


def _says_info(settings: Settings) -> bool:
    """Whether the run's telemetry level lets info lines through (``-q`` and ``--log-level warning`` do not)."""
    level = settings.log_level or ("debug" if settings.verbose else "error" if settings.quiet else "info")
    return level in ("debug", "info")


def _with_piped_input(settings: Settings) -> Settings:
    """A once run's settings with what is piped on stdin: context after the instruction, or the instruction.

    ``cmd | agentd "INSTRUCTION"`` adds what ``cmd`` wrote as context; with no
    instruction at all (``echo "the task" | agentd -m …``) it is the instruction.

    Raises:
        ConfigError: stdin is over the cap, not UTF-8 or unreadable (:mod:`agentd.cli._stdin`).
    """
    piped, silent = _stdin.context()
    if piped is not None:
        given = settings.instruction if settings.instruction and settings.instruction.strip() else None
        text = _stdin.with_context(given, piped) if given is not None else piped
        return settings.model_copy(update={"instruction": text})
    if silent:
        _say(
            f"warning: stdin is a pipe with nothing on it after {_stdin.FIRST_BYTE_WAIT:g}s; "
            "running without piped context — fix: pipe the input (cmd | agentd …), or give stdin "
            "/dev/null (< /dev/null) when there is none"
        )
    return settings


def _conversation(settings: Settings) -> Found | None:
    """The saved conversation ``--continue`` / ``--resume ID`` continues (None: a new one).

    Raises:
        ConfigError: none is saved, or the id names none (:func:`agentd.state.conversations.find`).
    """
    if not settings.continue_conversation and settings.resume is None:
        return None
    from agentd.state.conversations import find, state_root

    return find(
        state_root(settings.state_dir, os.environ),
        resume=settings.resume,
        latest=settings.continue_conversation,
    )


def _check(settings: Settings, found: Found | None, *, show_secrets: bool) -> int:
    """``agentd check``: what a run would refuse, then the effective config (redacted unless asked)."""
    problems: list[ConfigError] = []
    for spec, problem in missing_server_commands(settings, os.environ):
        if spec.required:
            problems.append(problem)
        else:
            _say(f"warning: {problem}")
    if problems:
        _print_config_error(problems[0] if len(problems) == 1 else ConfigErrors(problems))
        return int(ExitCode.CONFIG)
    from agentd.supervisor.routing.unmatched import before_start

    for finding in before_start(settings):  # what does nothing whatever the servers offer (rfcs/0315)
        _say(f"warning: {finding.message()}")
    for need in run_needs(settings):
        _say(f"note: a run also needs {need.setting} — fix: {need.fix}")
    if found is not None:
        _say(f"note: a run continues conversation {found.describe()}")
    shown = effective_config(settings, os.environ, show_secrets=show_secrets)
    shown["routing"] = _routing(settings)
    # Which agentd validated it (not a setting: bug reports paste this output).
    shown["agentd_version"] = __version__
    print_line(json.dumps(shown, sort_keys=True, indent=2))
    return int(ExitCode.OK)


def _routing(settings: Settings) -> list[JSONValue]:
    """Which route takes each subscription's changes: declared ones (wholly or in part), or the one agentd adds."""
    from agentd.supervisor.routing.routes import added_route_id, routes_declared
    from agentd.supervisor.routing.unmatched import coverage

    if not routes_declared(settings):
        return [
            {"subscription": cov.subscription, "route": added_route_id(sub.uri), "kind": "added"}
            for sub, cov in zip(settings.subscriptions, coverage(settings), strict=True)
        ]
    return [
        {
            "subscription": cov.subscription,
            "covered": cov.covered,
            "routes": list(cov.whole),
            "in_part": list(cov.part),
        }
        for cov in coverage(settings)
    ]


def _check_connect(settings: Settings) -> int:
    """``agentd check --connect``: the static check's refusals, then connect and report (docs/check.md)."""
    problems = [problem for spec, problem in missing_server_commands(settings, os.environ) if spec.required]
    if problems:
        _print_config_error(problems[0] if len(problems) == 1 else ConfigErrors(problems))
        return int(ExitCode.CONFIG)
    from agentd.supervisor.checkconnect import main as check_connect

    return check_connect(settings)

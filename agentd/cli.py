"""The ``agentd`` command.

::

    agentd [--mode once|loop|reactive|schedule] [options] [INSTRUCTION]
    agentd check [options]          validate, print the effective config (redacted), exit 0 or 2
    agentd serve NAME [options]     run a bundled MCP server (agentd.servers)
    agentd --version                print "agentd VERSION" and exit 0

The first word selects ``check`` or ``serve``; an instruction that is exactly
``check`` or ``serve`` must be given with ``--instruction``.

Every setting is validated (see :mod:`agentd.config`) before anything runs;
a configuration or usage error prints one line per problem on stderr and
exits 2. Then the supervisor (:func:`agentd.supervisor.app.run`) takes over
and its return value is the exit code.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple, NoReturn

from agentd import __version__
from agentd.config import (
    ConfigErrors,
    Settings,
    deprecations,
    effective_config,
    ignored_keys,
    load_settings,
    missing_server_commands,
    server_secrets,
)
from agentd.errorline import config_error_lines
from agentd.errors import ConfigError
from agentd.exitcodes import ExitCode
from agentd.output import claim_standard_fds
from agentd.redact import register_secrets, secret_values
from agentd.safetext import escape_controls

if TYPE_CHECKING:
    from agentd.prelaunch import EarlyProcess

__all__ = ["build_parser", "flags_from_args", "main"]

_EPILOG = """\
precedence: built-in < --config FILE (TOML) < environment (AGENTD_…) < flags.
Every scalar setting has an AGENTD_ variable (AGENTD_MODE, AGENTD_BUDGET_STEPS, …);
lists and tables take JSON (AGENTD_ROUTES='[{"match": "file:///x", "disposition": "spawn"}]'),
[watches] and [model_settings] keys take AGENTD_WATCHES__KEY / AGENTD_MODEL_SETTINGS__KEY. AGENTD_CONFIG names the config file,
AGENTD_MCP_CONFIG mcpServers JSON files (path-separated), AGENTD_SERVERS a JSON object of servers.
Durations: 250ms, 30s, 5m, 1h, 1h30m or plain seconds. Sizes: 10MB, 512KiB or bytes.
exit codes: 0 ok, 1 crashed, 2 config/usage, 3 partial, 4 infra, 5 refused, 6 required server,
7 budget, 8 result not written, 124 deadline, 143 drain timeout.
signals: SIGTERM, SIGINT and SIGHUP drain (exit 0 within --grace, else 143); a second one stops at once.
"""


class _Option(NamedTuple):
    """One option of the run: its help group, flag, argparse action, metavar and help.

    Values stay text (or a list of texts) until :mod:`agentd.config` validates them.
    """

    group: str
    flag: str
    action: str | type[argparse.Action]
    metavar: str | None
    help: str


#: The actions of the table: given once, repeatable, or an on/off switch (--x / --no-x).
_ONE, _MANY, _SWITCH = "store", "append", argparse.BooleanOptionalAction


#: The help groups of the options by key, in --help order (None: the parser's own options).
_GROUPS: dict[str, str | None] = {
    "run": None,
    "model": "model settings (per reply; also [model_settings] in TOML)",
    "servers": "MCP servers",
    "time": "time",
    "budgets": "budgets and restarts",
    "reactive": "reactive",
    "output": "output and endpoints",
}

# The run's options in --help order, one row per option (the formatter leaves the
# table alone, so that a row reads across).
# fmt: off
_OPTIONS: tuple[_Option, ...] = (
    _Option("run", "--instruction", _ONE, "TEXT|@FILE", "the task (alternative to INSTRUCTION; @FILE reads a file)"),
    _Option("run", "--mode", _ONE, "once|loop|reactive|schedule", "how to drive the agent (default once)"),
    _Option("run", "--config", _ONE, "FILE", "TOML config file (see examples/agentd.toml)"),
    _Option("run", "--model", _ONE, "SPEC", "openai:MODEL, anthropic:MODEL, openai-responses:MODEL, azure:DEPLOYMENT, bedrock:MODEL, vertex:MODEL, NAME:MODEL ([providers.NAME]) or script:FILE"),
    _Option("run", "--system", _ONE, "TEXT|@FILE", "extra system prompt"),
    _Option("model", "--temperature", _ONE, "T", "sampling temperature (0-2; Anthropic 0-1)"),
    _Option("model", "--top-p", _ONE, "P", "nucleus sampling mass (0-1]"),
    _Option("model", "--max-output-tokens", _ONE, "N", "output-token limit of one reply (default: the provider's; Anthropic 16384 or the model's limit)"),
    _Option("model", "--reasoning-effort", _ONE, "none|minimal|low|medium|high|xhigh", "OpenAI reasoning effort"),
    _Option("model", "--thinking-budget", _ONE, "N", "Anthropic extended thinking budget in tokens (>= 1024; 0 = off)"),
    _Option("servers", "--mcp-stdio", _MANY, "'NAME=COMMAND ARGS…[,protocol=V]'", "a stdio server (repeatable); protocol: auto (default) or an MCP version, which skips the server/discover probe"),
    _Option("servers", "--mcp-http", _MANY, "NAME=URL[,transport=T][,protocol=V]", "an HTTP server (repeatable); transport: auto (default: Streamable HTTP, else HTTP+SSE), http or sse"),
    _Option("servers", "--mcp-config", _MANY, "FILE", "MCP server file as another client writes it: mcpServers JSON (Claude, Cursor, …), VS Code's servers JSON or Codex's [mcp_servers] TOML (repeatable)"),
    _Option("servers", "--require", _MANY, "NAME", "mark a server required: its failure ends the run with exit 6 (repeatable)"),
    _Option("servers", "--tool-timeout", _ONE, "DURATION", "bound on one tool call (default 30s; per server: timeout)"),
    _Option("servers", "--allowed-tools", _ONE, "GLOBS", "offer only these tools, comma-separated globs over server__tool (e.g. 'files__read_*,memo__*')"),
    _Option("servers", "--disallowed-tools", _ONE, "GLOBS", "never offer these tools (comma-separated server__tool globs)"),
    _Option("time", "--interval", _ONE, "DURATION", "loop shift / timer period (loop: 0 = re-enter at once)"),
    _Option("time", "--cron", _ONE, "'EXPR'", "5-field UTC cron expression (schedule, reactive)"),
    _Option("time", "--session", _ONE, "fresh|warm", "fresh root per shift/fire, or one warm session"),
    _Option("time", "--deadline", _ONE, "DURATION", "wall-clock limit for the run (exit 124)"),
    _Option("time", "--grace", _ONE, "DURATION", "drain time after SIGTERM/SIGINT/SIGHUP (default 25s)"),
    _Option("time", "--spawn-timeout", _ONE, "DURATION", "bound on one attempt to start an agent child (default 5s)"),
    _Option("budgets", "--budget-steps", _ONE, "N", "tree-wide model-call ceiling (exit 7, or 3 with a result)"),
    _Option("budgets", "--budget-tokens", _ONE, "N", "tree-wide token ceiling, cached tokens included (exit 7 / 3)"),
    _Option("budgets", "--budget-usd", _ONE, "AMOUNT", "tree-wide cost ceiling in US dollars, from genai-prices (exit 7 / 3)"),
    _Option("budgets", "--max-steps", _ONE, "N", "deprecated name of --budget-steps"),
    _Option("budgets", "--max-tokens", _ONE, "N", "deprecated name of --budget-tokens"),
    _Option("budgets", "--max-turn-steps", _ONE, "N", "model calls per turn of one agent (default 100; 0 = no cap)"),
    _Option("budgets", "--model-timeout", _ONE, "DURATION", "deadline of one model call, retries included (default 5m)"),
    _Option("budgets", "--max-restarts", _ONE, "N", "restarts allowed within --restart-period (default 5)"),
    _Option("budgets", "--restart-period", _ONE, "DURATION", "restart window (default 60s)"),
    _Option("reactive", "--subscribe", _MANY, "[SERVER:]URI", "subscribe at startup (repeatable)"),
    _Option("reactive", "--route", _MANY, "'MATCH=spawn[:N]|continue[:SESSION][,KEY=VALUE...]'", "route matching URIs (repeatable; MATCH @timer takes clock fires); KEY: debounce, max_wait, overflow, queue_cap, name, reread_on_start, extract, template"),
    _Option("reactive", "--watch-state", _ONE, "PATH", "persist watch specs in this file (default: in --state-dir)"),
    _Option("reactive", "--state-dir", _ONE, "DIR", "keep watch state, warm sessions' journals and OAuth tokens here across restarts (one agentd per DIR)"),
    _Option("reactive", "--session-max-tokens", _ONE, "N", "token budget of a journaled session; older turns are dropped beyond it (default 100000)"),
    _Option("reactive", "--shard", _ONE, "INDEX/COUNT|auto", "handle only this replica's share of routed work (auto: StatefulSet ordinal, AGENTD_SHARD_COUNT)"),
    _Option("reactive", "--max-read-bytes", _ONE, "SIZE", "cap on one resource read (default 8MiB)"),
    _Option("reactive", "--max-self-subscriptions-per-session", _ONE, "N", "subscriptions one session's model may hold; past it subscribe is a tool error (default 64)"),
    _Option("reactive", "--max-self-subscriptions", _ONE, "N", "subscriptions the models of all sessions may hold together (default 1024)"),
    _Option("output", "--output", _ONE, "text|json|stream-json", "result format on stdout (default text; stream-json: one JSON line per step)"),
    _Option("output", "--output-truncate", _ONE, "N", "stream-json: characters kept of each tool call's arguments and result (default 2000; 0 = all)"),
    _Option("output", "--verbose", _SWITCH, None, "also log debug events"),
    _Option("output", "--quiet", _SWITCH, None, "only the answer and errors on a terminal (telemetry at error)"),
    _Option("output", "--log-level", _ONE, "debug|info|warning|error", "least telemetry level on stderr (default info)"),
    _Option("output", "--log-format", _ONE, "auto|human|text|json", "telemetry on stderr: progress for a person, every event as text, NDJSON, or auto (human on a terminal, else json; default)"),
    _Option("output", "--health-addr", _ONE, "HOST:PORT", "serve /healthz and /readyz here"),
    _Option("output", "--metrics-addr", _ONE, "HOST:PORT", "serve Prometheus metrics here"),
)
# fmt: on


def build_parser(prog: str = "agentd") -> argparse.ArgumentParser:
    """The argument parser for running and for ``agentd check`` (same options).

    Every option defaults to None so that only the flags actually given
    override the lower layers; values stay text and are validated by
    :mod:`agentd.config`, which names the flag in its messages.
    """
    p = argparse.ArgumentParser(
        prog=prog,
        description="Run an LLM agent under supervision: once, in a loop, on a schedule, or reacting to MCP resource changes.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument("--version", action="version", version=f"agentd {__version__}")
    p.add_argument("instruction_arg", nargs="?", metavar="INSTRUCTION", help="the root agent's task")
    groups = {key: p if title is None else p.add_argument_group(title) for key, title in _GROUPS.items()}
    for option in _OPTIONS:
        groups[option.group].add_argument(
            option.flag, action=option.action, metavar=option.metavar, help=option.help
        )
    if prog.endswith("check"):
        p.add_argument(
            "--show-secrets",
            action="store_true",
            default=None,
            help="print server env/header values and credentials as configured (redacted by default)",
        )
    return p


#: argparse dest -> settings field, where they differ.
_RENAMES = {"subscribe": "subscriptions", "route": "routes"}
_NOT_SETTINGS = {"config", "instruction_arg", "instruction", "show_secrets"}


def flags_from_args(ns: argparse.Namespace) -> tuple[dict[str, object], Path | None]:
    """The flags actually given, keyed for :func:`agentd.config.load_settings`, and the config path.

    Raises:
        ConfigError: INSTRUCTION and ``--instruction`` were both given.
    """
    values = vars(ns)
    flags: dict[str, object] = {}
    for dest, value in values.items():
        if value is None or dest in _NOT_SETTINGS:
            continue
        flags[_RENAMES.get(dest, dest)] = value
    if ns.instruction_arg is not None and ns.instruction is not None:
        raise ConfigError(
            "INSTRUCTION",
            ns.instruction_arg,
            "give the instruction once: as the argument or with --instruction, not both",
        )
    instruction = ns.instruction if ns.instruction is not None else ns.instruction_arg
    if instruction is not None:
        flags["instruction"] = instruction
    config = Path(ns.config) if ns.config is not None else None
    return flags, config


def _say(message: object) -> None:
    """One line for the person who ran agentd, on stderr: its control characters shown escaped."""
    print(f"agentd: {escape_controls(str(message))}", file=sys.stderr)


def _print_config_error(exc: ConfigError) -> None:
    # Each problem whole; the last line is agentd: error: WHAT — fix: HOW (rfcs/0321).
    for line in config_error_lines(exc.problems if isinstance(exc, ConfigErrors) else (exc,)):
        print(line, file=sys.stderr)


def _serve(argv: list[str]) -> int:
    try:
        from agentd.servers import main as servers_main
    except ImportError as exc:
        if exc.name != "agentd.servers":
            raise
        print("agentd: the bundled servers (agentd.servers) are not available in this build", file=sys.stderr)
        return int(ExitCode.CRASHED)
    return servers_main(argv)


def _launch_servers_early(settings: Settings) -> dict[str, EarlyProcess]:
    """Start the stdio servers now, before the supervisor's imports (:mod:`agentd.prelaunch`).

    Only once nothing left to check can refuse the run: every setting was
    validated by the settings layers; the ``--watch-state`` lock is taken by
    the supervisor before any server starts, so with it set the servers start
    later, as before.
    """
    if settings.watch_state is not None:
        return {}
    from agentd.prelaunch import launch
    from agentd.watches.limits import watch_limits

    try:  # the [watches] settings the supervisor turns into limits (a ConfigError there is exit 2)
        watch_limits(settings.watches)
    except ConfigError:
        return {}
    early: dict[str, EarlyProcess] = {}
    for name, spec in settings.servers.items():
        if spec.command is not None:
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
        print(
            "agentd: the configuration is valid, but the supervisor (agentd.supervisor.app) is not "
            "available in this build; nothing was run",
            file=sys.stderr,
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
    args = list(argv)
    if args and args[0] == "serve":
        return _serve(args[1:])
    command = "run"
    prog = "agentd"
    if args and args[0] == "check":
        command, prog, args = "check", "agentd check", args[1:]
    parser = build_parser(prog)
    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:  # argparse: --help (0) or a usage error (2), already printed
        return exc.code if isinstance(exc.code, int) else int(ExitCode.CONFIG)
    # Credentials from the environment are hidden from every message from here on,
    # configuration errors included.
    register_secrets(secret_values(os.environ))
    try:
        flags, config_file = flags_from_args(ns)
        settings = load_settings(flags, config_file=config_file, env=os.environ)
    except ConfigError as exc:
        _print_config_error(exc)
        return int(ExitCode.CONFIG)
    register_secrets(server_secrets(settings))
    for old_name in deprecations(settings):
        _say(old_name.message())
    for key in ignored_keys(settings):
        _say(f"warning: {key}: not used by agentd; ignored")
    if command == "check":
        return _check(settings, show_secrets=bool(getattr(ns, "show_secrets", False)))
    return _run(settings, closed_fds)


def _check(settings: Settings, *, show_secrets: bool) -> int:
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
    shown = effective_config(settings, os.environ, show_secrets=show_secrets)
    # Which agentd validated it (not a setting: bug reports paste this output).
    shown["agentd_version"] = __version__
    print(json.dumps(shown, sort_keys=True, indent=2))
    return int(ExitCode.OK)

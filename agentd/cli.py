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
from typing import TYPE_CHECKING, NoReturn

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
from agentd.errors import ConfigError
from agentd.exitcodes import ExitCode
from agentd.output import claim_standard_fds
from agentd.redact import register_secrets, secret_values

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
    p.add_argument(
        "--instruction",
        metavar="TEXT|@FILE",
        help="the task (alternative to INSTRUCTION; @FILE reads a file)",
    )
    p.add_argument(
        "--mode", metavar="once|loop|reactive|schedule", help="how to drive the agent (default once)"
    )
    p.add_argument("--config", metavar="FILE", help="TOML config file (see examples/agentd.toml)")
    p.add_argument(
        "--model",
        metavar="SPEC",
        help=(
            "openai:MODEL, anthropic:MODEL, openai-responses:MODEL, azure:DEPLOYMENT, bedrock:MODEL, "
            "vertex:MODEL, NAME:MODEL ([providers.NAME]) or script:FILE"
        ),
    )
    p.add_argument("--system", metavar="TEXT|@FILE", help="extra system prompt")

    g = p.add_argument_group("model settings (per reply; also [model_settings] in TOML)")
    g.add_argument("--temperature", metavar="T", help="sampling temperature (0-2; Anthropic 0-1)")
    g.add_argument("--top-p", metavar="P", help="nucleus sampling mass (0-1]")
    g.add_argument(
        "--max-output-tokens",
        metavar="N",
        help="output-token limit of one reply (default: the provider's; Anthropic 16384 or the model's limit)",
    )
    g.add_argument(
        "--reasoning-effort", metavar="none|minimal|low|medium|high|xhigh", help="OpenAI reasoning effort"
    )
    g.add_argument(
        "--thinking-budget",
        metavar="N",
        help="Anthropic extended thinking budget in tokens (>= 1024; 0 = off)",
    )

    g = p.add_argument_group("MCP servers")
    g.add_argument(
        "--mcp-stdio", action="append", metavar="'NAME=COMMAND ARGS…'", help="a stdio server (repeatable)"
    )
    g.add_argument(
        "--mcp-http", action="append", metavar="NAME=URL", help="a Streamable HTTP server (repeatable)"
    )
    g.add_argument(
        "--mcp-config",
        action="append",
        metavar="FILE",
        help=(
            "MCP server file as another client writes it: mcpServers JSON (Claude, Cursor, …), "
            "VS Code's servers JSON or Codex's [mcp_servers] TOML (repeatable)"
        ),
    )
    g.add_argument(
        "--require",
        action="append",
        metavar="NAME",
        help="mark a server required: its failure ends the run with exit 6 (repeatable)",
    )
    g.add_argument(
        "--tool-timeout", metavar="DURATION", help="bound on one tool call (default 30s; per server: timeout)"
    )
    g.add_argument(
        "--allowed-tools",
        metavar="GLOBS",
        help="offer only these tools, comma-separated globs over server__tool (e.g. 'files__read_*,memo__*')",
    )
    g.add_argument(
        "--disallowed-tools",
        metavar="GLOBS",
        help="never offer these tools (comma-separated server__tool globs)",
    )

    g = p.add_argument_group("time")
    g.add_argument(
        "--interval", metavar="DURATION", help="loop shift / timer period (loop: 0 = re-enter at once)"
    )
    g.add_argument("--cron", metavar="'EXPR'", help="5-field UTC cron expression (schedule, reactive)")
    g.add_argument("--session", metavar="fresh|warm", help="fresh root per shift/fire, or one warm session")
    g.add_argument("--deadline", metavar="DURATION", help="wall-clock limit for the run (exit 124)")
    g.add_argument("--grace", metavar="DURATION", help="drain time after SIGTERM/SIGINT/SIGHUP (default 25s)")
    g.add_argument(
        "--spawn-timeout",
        metavar="DURATION",
        help="bound on one attempt to start an agent child (default 5s)",
    )

    g = p.add_argument_group("budgets and restarts")
    g.add_argument(
        "--budget-steps", metavar="N", help="tree-wide model-call ceiling (exit 7, or 3 with a result)"
    )
    g.add_argument(
        "--budget-tokens", metavar="N", help="tree-wide token ceiling, cached tokens included (exit 7 / 3)"
    )
    g.add_argument(
        "--budget-usd",
        metavar="AMOUNT",
        help="tree-wide cost ceiling in US dollars, from genai-prices (exit 7 / 3)",
    )
    g.add_argument("--max-steps", metavar="N", help="deprecated name of --budget-steps")
    g.add_argument("--max-tokens", metavar="N", help="deprecated name of --budget-tokens")
    g.add_argument(
        "--max-turn-steps", metavar="N", help="model calls per turn of one agent (default 100; 0 = no cap)"
    )
    g.add_argument(
        "--model-timeout",
        metavar="DURATION",
        help="deadline of one model call, retries included (default 5m)",
    )
    g.add_argument("--max-restarts", metavar="N", help="restarts allowed within --restart-period (default 5)")
    g.add_argument("--restart-period", metavar="DURATION", help="restart window (default 60s)")

    g = p.add_argument_group("reactive")
    g.add_argument(
        "--subscribe", action="append", metavar="[SERVER:]URI", help="subscribe at startup (repeatable)"
    )
    g.add_argument(
        "--route",
        action="append",
        metavar="'MATCH=spawn[:N]|continue[:SESSION][,KEY=VALUE...]'",
        help=(
            "route matching URIs (repeatable; MATCH @timer takes clock fires); KEY: debounce, max_wait, "
            "overflow, queue_cap, name, reread_on_start, extract, template"
        ),
    )
    g.add_argument(
        "--watch-state", metavar="PATH", help="persist watch specs in this file (default: in --state-dir)"
    )
    g.add_argument(
        "--state-dir",
        metavar="DIR",
        help="keep watch state, warm sessions' journals and OAuth tokens here across restarts (one agentd per DIR)",
    )
    g.add_argument(
        "--session-max-tokens",
        metavar="N",
        help="token budget of a journaled session; older turns are dropped beyond it (default 100000)",
    )
    g.add_argument(
        "--shard",
        metavar="INDEX/COUNT|auto",
        help="handle only this replica's share of routed work (auto: StatefulSet ordinal, AGENTD_SHARD_COUNT)",
    )
    g.add_argument("--max-read-bytes", metavar="SIZE", help="cap on one resource read (default 8MiB)")

    g = p.add_argument_group("output and endpoints")
    g.add_argument(
        "--output",
        metavar="text|json|stream-json",
        help="result format on stdout (default text; stream-json: one JSON line per step)",
    )
    g.add_argument(
        "--output-truncate",
        metavar="N",
        help="stream-json: characters kept of each tool call's arguments and result (default 2000; 0 = all)",
    )
    g.add_argument(
        "--verbose", action=argparse.BooleanOptionalAction, default=None, help="also log debug events"
    )
    g.add_argument(
        "--log-level",
        metavar="debug|info|warning|error",
        help="least telemetry level on stderr (default info)",
    )
    g.add_argument(
        "--log-format",
        metavar="auto|json|text",
        help="telemetry on stderr: NDJSON, readable lines, or auto (text on a terminal; default)",
    )
    g.add_argument("--health-addr", metavar="HOST:PORT", help="serve /healthz and /readyz here")
    g.add_argument("--metrics-addr", metavar="HOST:PORT", help="serve Prometheus metrics here")
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


def _print_config_error(exc: ConfigError) -> None:
    problems = exc.problems if isinstance(exc, ConfigErrors) else (exc,)
    for problem in problems:
        print(f"agentd: {problem}", file=sys.stderr)


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
        print(f"agentd: {old_name.message()}", file=sys.stderr)
    for key in ignored_keys(settings):
        print(f"agentd: warning: {key}: not used by agentd; ignored", file=sys.stderr)
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
            print(f"agentd: warning: {problem}", file=sys.stderr)
    if problems:
        for problem in problems:
            _print_config_error(problem)
        return int(ExitCode.CONFIG)
    shown = effective_config(settings, os.environ, show_secrets=show_secrets)
    # Which agentd validated it (not a setting: bug reports paste this output).
    shown["agentd_version"] = __version__
    print(json.dumps(shown, sort_keys=True, indent=2))
    return int(ExitCode.OK)

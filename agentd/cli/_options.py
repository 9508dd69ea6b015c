"""The command line's options: one table, the help it prints, and the one-line usage errors.

Every option is a row of :data:`OPTIONS` (its help group, its flags, how it
takes a value, its help). ``--help`` prints the subcommands, then the
options by group (run, model, servers, routing, limits, output,
operations), each group a screen or less. Other tools' names for the same
settings are accepted as aliases (:data:`ALIASES`, rfcs/0301), hidden from
``--help`` and listed in ``docs/cli.md``; an unknown flag is refused with
one line that names it and the closest known flag (:func:`usage_error`),
never with the full usage.
"""

from __future__ import annotations

import argparse
import difflib
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple, NoReturn, Protocol

from agentd import __version__
from agentd.core.errors import ConfigError

__all__ = [
    "ALIASES",
    "OPTIONS",
    "UsageError",
    "alias_spellings",
    "build_parser",
    "flags_from_args",
    "usage_error",
]

USAGE = """\
agentd [OPTIONS] [INSTRUCTION | -]
       agentd check [OPTIONS] [INSTRUCTION]
       agentd status [--addr HOST:PORT] [--watch] [--json]
       agentd serve NAME [OPTIONS]       (agentd serve --help lists the servers)"""

DESCRIPTION = """\
Run an LLM agent under supervision: once, in a loop, on a schedule, or woken by
MCP resource changes. The answer goes to stdout, telemetry to stderr.

commands:
  (none)          run the agent (--mode once by default) on INSTRUCTION;
                  - reads it from stdin, and input piped with an INSTRUCTION
                  is added to it as context
  check           validate the settings, print the effective configuration
                  (credentials hidden) and what a run would still need;
                  --connect also starts the servers and calls each model once
  serve NAME      run a bundled MCP server: memo, files, inbox, kube, webhook
  status          what a running daemon is doing (its --health-addr /status);
                  --watch refreshes in place, --json prints the document

examples:
  agentd -m openai:gpt-4o-mini "summarise the open issues"
  git diff | agentd -m anthropic:claude-sonnet-4-5 "review this change"
  agentd --continue "now write the tests"
  agentd check --mcp-config ~/.cursor/mcp.json"""

EPILOG = """\
other tools' names, same meaning: --max-turns (--max-turn-steps),
--allowedTools / --disallowedTools (--allowed-tools / --disallowed-tools),
--output-format (--output), --system-prompt / --append-system-prompt (--system),
--no-session-persistence (--ephemeral); -p/--print is accepted and changes
nothing (agentd always prints the answer and exits). docs/cli.md has them all.

precedence: built-in < --config FILE (TOML) < environment (AGENTD_…) < flags.
Every scalar setting has an AGENTD_ variable (AGENTD_MODE, AGENTD_BUDGET_STEPS, …);
lists and tables take JSON (AGENTD_ROUTES='[{"match": "file:///x", "disposition": "spawn"}]');
[watches] and [model_settings] keys take AGENTD_WATCHES__KEY / AGENTD_MODEL_SETTINGS__KEY.
AGENTD_CONFIG names the config file, AGENTD_MCP_CONFIG mcpServers JSON files
(path-separated), AGENTD_SERVERS a JSON object of servers.
Durations: 250ms, 30s, 5m, 1h, 1h30m or seconds. Sizes: 10MB, 512KiB or bytes.
exit codes: 0 ok, 1 crashed, 2 config/usage, 3 partial, 4 infra, 5 refused,
6 required server, 7 budget, 8 result not written, 124 deadline, 143 drain timeout.
signals: SIGTERM, SIGINT and SIGHUP drain (exit 0 within --grace, else 143);
a second one stops at once."""


class Option(NamedTuple):
    """One option: its help group, its flags (short first), argparse action, metavar and help.

    Values stay text (or a list of texts) until :mod:`agentd.config` validates them.
    """

    group: str
    flags: tuple[str, ...]
    action: str | type[argparse.Action]
    metavar: str | None
    help: str


#: The actions of the table: given once, repeatable, an on/off switch (--x / --no-x), a flag.
_ONE, _MANY, _SWITCH, _FLAG = "store", "append", argparse.BooleanOptionalAction, "store_true"

#: The help groups in --help order.
GROUPS: dict[str, str] = {
    "run": "run",
    "model": "model (per reply settings also in TOML [model_settings])",
    "servers": "MCP servers and tools",
    "routing": "routing, timers and sessions",
    "agents": "agents that start agents (definitions also in TOML [agents.NAME] and .claude/agents/*.md)",
    "limits": "limits",
    "output": "output",
    "operations": "operations",
}

# One row per option, in --help order (the formatter leaves the table alone, so a row reads across).
# fmt: off
OPTIONS: tuple[Option, ...] = (
    Option("run", ("--instruction",), _ONE, "TEXT|@FILE|-", "the task (instead of INSTRUCTION); @FILE reads a file, - stdin"),
    Option("run", ("--mode",), _ONE, "MODE", "once (default), loop, reactive or schedule"),
    Option("run", ("-c", "--config"), _ONE, "FILE", "TOML config file (see examples/agentd.toml)"),
    Option("run", ("--continue",), _FLAG, None, "continue the conversation saved last (once runs)"),
    Option("run", ("--resume",), _ONE, "SESSION_ID", "continue this conversation (the session_id a run prints)"),
    Option("run", ("--ephemeral",), _FLAG, None, "save no conversation (once runs save theirs to continue it)"),
    Option("model", ("-m", "--model"), _ONE, "SPEC", "openai:MODEL, anthropic:MODEL, openai-responses:MODEL, azure:DEPLOYMENT, bedrock:MODEL, vertex:MODEL, NAME:MODEL ([providers.NAME]) or script:FILE"),
    Option("model", ("-s", "--system"), _ONE, "TEXT|@FILE", "system prompt"),
    Option("model", ("--temperature",), _ONE, "T", "sampling temperature (0-2; Anthropic 0-1)"),
    Option("model", ("--top-p",), _ONE, "P", "nucleus sampling mass (0-1]"),
    Option("model", ("--max-output-tokens",), _ONE, "N", "output-token limit of one reply (default: the provider's)"),
    Option("model", ("--reasoning-effort",), _ONE, "EFFORT", "OpenAI: none, minimal, low, medium, high, xhigh"),
    Option("model", ("--thinking-budget",), _ONE, "N", "Anthropic thinking budget in tokens (>= 1024; 0 = off)"),
    Option("model", ("--model-timeout",), _ONE, "DURATION", "deadline of one model call, retries included (default 5m)"),
    Option("servers", ("--mcp-stdio",), _MANY, "'NAME=CMD ARGS'", "a stdio server (repeatable); ,protocol=V pins an MCP version (default auto)"),
    Option("servers", ("--mcp-http",), _MANY, "NAME=URL", "an HTTP server (repeatable); ,transport=auto|http|sse and ,protocol=V after the URL"),
    Option("servers", ("--mcp-config",), _MANY, "FILE", "another client's server file: mcpServers JSON (Claude, Cursor, Cline, Windsurf…), VS Code's servers JSON, Codex's TOML or goose's YAML (repeatable)"),
    Option("servers", ("--require",), _MANY, "NAME", "the run needs this server: its failure exits 6 (repeatable)"),
    Option("servers", ("--tool-timeout",), _ONE, "DURATION", "bound on one tool call (default 30s)"),
    Option("servers", ("--allowed-tools",), _ONE, "GLOBS", "offer only these tools: comma-separated server__tool globs"),
    Option("servers", ("--disallowed-tools",), _ONE, "GLOBS", "never offer these tools (server__tool globs)"),
    Option("servers", ("--max-read-bytes",), _ONE, "SIZE", "cap on one resource read (default 8MiB)"),
    Option("routing", ("--subscribe",), _MANY, "[SERVER:]URI", "subscribe at start (repeatable)"),
    Option("routing", ("--route",), _MANY, "'MATCH=DISPOSITION'", "MATCH=spawn[:N] or MATCH=continue[:SESSION], then ,KEY=VALUE settings (repeatable; MATCH @timer takes clock fires; docs/cli.md)"),
    Option("routing", ("--interval",), _ONE, "DURATION", "loop shift / timer period (loop: 0 = at once)"),
    Option("routing", ("--cron",), _ONE, "'EXPR'", "5-field UTC cron expression (schedule, reactive)"),
    Option("routing", ("--session",), _ONE, "fresh|warm", "a fresh root per shift/fire, or one warm session"),
    Option("routing", ("--shard",), _ONE, "I/N|auto", "handle only this replica's share (reactive)"),
    Option("agents", ("--agents",), _ONE, "JSON", 'agent definitions by name, as claude --agents: \'{"NAME": {"description": "...", "prompt": "..."}}\''),
    Option("agents", ("--claude-agents",), _SWITCH, None, "read Claude Code's .claude/agents/*.md and ~/.claude/agents/*.md (default: yes)"),
    Option("agents", ("--max-depth",), _ONE, "N", "how deep agents may start agents (default 2; 0 = no agent may)"),
    Option("agents", ("--max-children",), _ONE, "N", "children one agent may have running at once (default 8)"),
    Option("agents", ("--max-agents",), _ONE, "N", "agents started by agents running at once, in all (default 64)"),
    Option("limits", ("--budget-steps",), _ONE, "N", "tree-wide model-call ceiling (exit 7, or 3 with a result)"),
    Option("limits", ("--budget-tokens",), _ONE, "N", "tree-wide token ceiling, cached tokens included"),
    Option("limits", ("--budget-usd",), _ONE, "AMOUNT", "tree-wide cost ceiling in US dollars"),
    Option("limits", ("--max-turn-steps",), _ONE, "N", "model calls in one turn of one agent (default 100; 0 = no cap)"),
    Option("limits", ("--deadline",), _ONE, "DURATION", "wall-clock limit of the run (exit 124)"),
    Option("limits", ("--max-restarts",), _ONE, "N", "restarts allowed within --restart-period (default 5)"),
    Option("limits", ("--restart-period",), _ONE, "DURATION", "restart window (default 60s)"),
    Option("limits", ("--spawn-timeout",), _ONE, "DURATION", "bound on starting one agent child (default 5s)"),
    Option("limits", ("--session-max-tokens",), _ONE, "N", "tokens a saved conversation or session keeps (default 100000)"),
    Option("limits", ("--max-self-subscriptions-per-session",), _ONE, "N", "subscriptions one session's model may hold (default 64)"),
    Option("limits", ("--max-self-subscriptions",), _ONE, "N", "subscriptions all sessions' models may hold together (default 1024)"),
    Option("limits", ("--max-steps",), _ONE, "N", argparse.SUPPRESS),  # deprecated: --budget-steps
    Option("limits", ("--max-tokens",), _ONE, "N", argparse.SUPPRESS),  # deprecated: --budget-tokens
    Option("output", ("-o", "--output"), _ONE, "FORMAT", "text (default), json (one object) or stream-json (a line per step)"),
    Option("output", ("--output-truncate",), _ONE, "N", "stream-json: characters kept of tool arguments and results (default 2000; 0 = all)"),
    Option("output", ("-q", "--quiet"), _FLAG, None, "only the answer and errors"),
    Option("output", ("-v", "--verbose"), _SWITCH, None, "also log debug events"),
    Option("output", ("--log-level",), _ONE, "LEVEL", "least telemetry level on stderr: debug, info (default), warning, error"),
    Option("output", ("--log-format",), _ONE, "auto|human|text|json", "telemetry on stderr: progress for a person, every event as text, NDJSON, or auto (human on a terminal, else json)"),
    Option("operations", ("--state-dir",), _ONE, "DIR", "keep conversations, sessions, watch state and OAuth tokens here (default for conversations: ~/.local/state/agentd)"),
    Option("operations", ("--watch-state",), _ONE, "PATH", "persist watch specs in this file (default: in --state-dir)"),
    Option("operations", ("--grace",), _ONE, "DURATION", "drain time after SIGTERM/SIGINT/SIGHUP (default 25s)"),
    Option("operations", ("--health-addr",), _ONE, "HOST:PORT", "serve /healthz, /readyz, /status and the status page here"),
    Option("operations", ("--metrics-addr",), _ONE, "HOST:PORT", "serve Prometheus metrics here"),
    Option("operations", ("--status-token-file",), _ONE, "FILE", "bearer token for /status and the status page on --health-addr (needed beyond loopback)"),
    Option("operations", ("--status-show-content",), _FLAG, None, "/status and the page show instructions and tool arguments (hidden by default)"),
)
# fmt: on

#: Other tools' names for agentd's options, same meaning: alias -> agentd's flag (rfcs/0301).
ALIASES: dict[str, str] = {
    "--max-turns": "--max-turn-steps",  # claude -p --max-turns
    "--allowedTools": "--allowed-tools",  # claude
    "--allowed_tools": "--allowed-tools",
    "--disallowedTools": "--disallowed-tools",  # claude
    "--disallowed_tools": "--disallowed-tools",
    "--output-format": "--output",  # claude -p --output-format text|json|stream-json
    "--system-prompt": "--system",  # claude; agentd has no default system prompt to replace
    "--append-system-prompt": "--system",  # claude
    "--no-session-persistence": "--ephemeral",  # claude -p
}

#: Accepted and ignored: they ask for what agentd always does.
NO_OPS: dict[str, str] = {
    "-p": "claude's print mode: agentd always prints the answer and exits",
    "--print": "claude's print mode: agentd always prints the answer and exits",
}

#: Other tools' flags agentd has no alias for (the meaning differs), with what to write instead.
PEER_HINTS: dict[str, str] = {
    "--json": "write --output json (one JSON object) or --output stream-json (a JSON line per step, "
    "like codex exec --json)",
    "--dangerously-skip-permissions": "agentd asks no permission; limit the tools with --allowed-tools "
    "and --disallowed-tools",
    "--permission-mode": "agentd asks no permission; limit the tools with --allowed-tools and --disallowed-tools",
    "--last": "write --continue (the conversation saved last)",
    "--cwd": "run agentd in that directory (cd DIR && agentd …)",
    "--cd": "run agentd in that directory (cd DIR && agentd …)",
}


class UsageError(Exception):
    """A command line argparse cannot read: one line for the user (exit 2)."""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is raised (one line, :func:`usage_error`), never printed with the usage."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(_argparse_message(message))


def _argparse_message(message: str) -> str:
    """argparse's own messages, said the way agentd says them."""
    m = re.fullmatch(r"argument (\S+): expected one argument", message)
    if m is not None:
        flag = m.group(1).split("/")[-1]
        return f"{flag} needs a value — fix: write {flag} VALUE (agentd --help says which)"
    return f"{message} — fix: see agentd --help"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """``-m, --model SPEC`` (the metavar once), a narrow option column, at most 100 columns."""

    def __init__(self, prog: str) -> None:
        import shutil

        width = min(shutil.get_terminal_size((100, 24)).columns, 100)
        super().__init__(prog, max_help_position=28, width=width)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        if not action.option_strings or action.nargs == 0:
            return super()._format_action_invocation(action)
        metavar = self._metavar_formatter(action, action.dest.upper())(1)[0]
        return f"{', '.join(action.option_strings)} {metavar}"


def build_parser(prog: str = "agentd") -> argparse.ArgumentParser:
    """The argument parser for running and for ``agentd check`` (same options).

    Every option defaults to None so that only the flags actually given
    override the lower layers; values stay text and are validated by
    :mod:`agentd.config`, which names the flag in its messages.
    """
    check = prog.endswith("check")
    p = _Parser(
        prog=prog,
        usage=USAGE if not check else "agentd check [OPTIONS] [INSTRUCTION]",
        description=DESCRIPTION if not check else _CHECK_DESCRIPTION,
        epilog=EPILOG,
        formatter_class=_Formatter,
        allow_abbrev=False,
        add_help=False,
    )
    groups = {key: p.add_argument_group(title) for key, title in GROUPS.items()}
    run = groups["run"]
    run.add_argument("-h", "--help", action="help", help="print this help and exit")
    run.add_argument(
        "-V", "--version", action="version", version=f"agentd {__version__}", help="print the version"
    )
    run.add_argument(
        "instruction_arg",
        nargs="?",
        metavar="INSTRUCTION",
        help="the task; - reads it from stdin (stdin piped with it is added as context)",
    )
    for option in OPTIONS:
        _add(groups[option.group], option.flags, option, option.help)
    if check:
        run.add_argument(
            "--show-secrets",
            action="store_true",
            default=None,
            help="print server env/header values and credentials as configured (hidden by default)",
        )
        run.add_argument(
            "--connect",
            action="store_true",
            default=None,
            help="also start the servers and call each model once; report each as ok or failed "
            "(exit 6: a server failed, 4: a model failed; docs/check.md)",
        )
    by_flag = {flag: option for option in OPTIONS for flag in option.flags}
    for alias, flag in ALIASES.items():
        target = by_flag[flag]
        _add(p, (alias,), target, argparse.SUPPRESS)
    for flag in NO_OPS:
        p.add_argument(flag, dest="print_mode", action="store_true", default=None, help=argparse.SUPPRESS)
    return p


class _Container(Protocol):
    """What options are added to: the parser, or one of its groups."""

    def add_argument(self, *name_or_flags: str, **kwargs: Any) -> argparse.Action: ...


def _add(to: _Container, flags: tuple[str, ...], option: Option, help: str) -> None:
    """Add ``flags`` taking a value as ``option`` does, into ``option``'s setting (None when not given)."""
    dest = option.flags[-1].lstrip("-").replace("-", "_")  # the long flag's name, as argparse makes it
    if option.metavar is None:
        to.add_argument(*flags, dest=dest, action=option.action, default=None, help=help)
    else:
        to.add_argument(
            *flags, dest=dest, action=option.action, default=None, help=help, metavar=option.metavar
        )


_CHECK_DESCRIPTION = """\
Validate every setting as a run would, print the effective configuration as
JSON (credentials hidden) and exit 0, or print each problem and exit 2.
Nothing is started. A model and an instruction are not needed: check says
what a run would still need."""


#: argparse dest -> settings field, where they differ.
_RENAMES = {"subscribe": "subscriptions", "route": "routes", "continue": "continue_conversation"}
_NOT_SETTINGS = {"config", "instruction_arg", "instruction", "show_secrets", "connect", "print_mode"}


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


def _known_flags(check: bool) -> list[str]:
    """Every flag the parser takes, agentd's own first (they win a tie for "did you mean")."""
    own = [flag for option in OPTIONS if option.help != argparse.SUPPRESS for flag in option.flags]
    return [
        *own,
        "--no-verbose",
        "--no-claude-agents",
        "--help",
        "--version",
        *(["--show-secrets", "--connect"] if check else []),
        *ALIASES,
        *NO_OPS,
    ]


def _normal(flag: str) -> str:
    return flag.lower().replace("_", "-")


def usage_error(extras: Sequence[str], *, check: bool = False) -> str:
    """The one line for words argparse did not take: the first unknown flag, and the closest known one.

    No unknown flag: the extra words are a second instruction (an unquoted
    one, most often).
    """
    unknown = [x for x in extras if x.startswith("-") and x != "-" and x != "--"]
    if not unknown:
        words = " ".join(extras)
        return (
            f"more than one INSTRUCTION: {words!r} follows the first — fix: quote the instruction as one "
            'argument (agentd "do this and that") or give it with --instruction'
        )
    bad = unknown[0].split("=", 1)[0]
    hint = PEER_HINTS.get(bad)
    if hint is not None:
        return f"unknown option {bad} — fix: {hint}"
    known = _known_flags(check)
    by_normal = {_normal(k): k for k in reversed(known)}  # the first spelling of each wins
    close = _closest(_normal(bad), list(by_normal))
    if close:
        named = " or ".join(by_normal[c] for c in close)
        return f"unknown option {bad} — fix: did you mean {named}? (agentd --help lists the options)"
    return f"unknown option {bad} — fix: agentd --help lists the options"


def _one_edit(a: str, b: str) -> bool:
    """Whether ``b`` is ``a`` with one letter added, dropped, changed, or two neighbours swapped."""
    if a == b or abs(len(a) - len(b)) > 1:
        return False
    if len(a) == len(b):
        diff = [i for i, (x, y) in enumerate(zip(a, b, strict=True)) if x != y]
        return len(diff) == 1 or (
            len(diff) == 2
            and diff[1] == diff[0] + 1
            and a[diff[0]] == b[diff[1]]
            and a[diff[1]] == b[diff[0]]
        )
    short, long = (a, b) if len(a) < len(b) else (b, a)
    return any(long[:i] + long[i + 1 :] == short for i in range(len(long)))


def _closest(word: str, known: list[str]) -> list[str]:
    """The known flags nearest ``word``: those one typo away (``--modle``: --mode or --model), else the most alike."""
    typos = [k for k in known if _one_edit(word, k)]
    if typos:
        return sorted(typos)[:2]
    return difflib.get_close_matches(word, known, n=1, cutoff=0.6)


def alias_spellings(argv: Sequence[str]) -> dict[str, str]:
    """agentd's flag -> the alias the command line used for it (the last one given wins)."""
    spelled: dict[str, str] = {}
    for word in argv:
        if word == "--":
            break
        flag = word.split("=", 1)[0]
        if flag in ALIASES:
            spelled[ALIASES[flag]] = flag
        elif flag.startswith("--") and any(flag == f for o in OPTIONS for f in o.flags):
            spelled.pop(flag, None)
    return spelled

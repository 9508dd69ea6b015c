"""The ``agentd`` command.

::

    agentd [OPTIONS] [INSTRUCTION | -]  run an agent (--mode once|loop|reactive|schedule)
    agentd check [OPTIONS]              validate, print the effective config (redacted), exit 0 or 2
    agentd check --connect [OPTIONS]    also start the servers and call each model once (exit 0, 4 or 6)
    agentd serve NAME [OPTIONS]         run a bundled MCP server (agentd.servers)
    agentd --version                    print "agentd VERSION" and exit 0

The first word selects ``check`` or ``serve``; an instruction that is exactly
``check`` or ``serve`` must be given with ``--instruction``.

Layout: ``_main`` (parse, validate, then run or check), ``_options`` (the
option table, ``--help``, aliases and one-line usage errors), ``_stdin``
(the instruction or piped context from stdin). docs/cli.md is the user's
reference.
"""

from agentd.cli._main import exit_process, main
from agentd.cli._options import build_parser, flags_from_args

__all__ = ["build_parser", "exit_process", "flags_from_args", "main"]

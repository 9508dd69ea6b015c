"""A handshake-era stdio MCP server that exits on ``server/discover``, as Python SDK ≤ 1.8 servers do.

JSON lines on stdin/stdout with nothing but the standard library, so it
starts in milliseconds (the real 1.8 servers are in
``tests/upstream/test_upstream_old_sdks.py``). It answers ``initialize``
(echoing the offered version when it is one it knows, else 2024-11-05),
``tools/list`` (one tool, ``echo``) and ``tools/call``; any other request
makes it write a validation error to stderr and exit with status 1.

Knobs (argv): ``--spawns FILE`` appends one line per start (how many times
agentd started it); ``--exit-on-initialize`` exits on ``initialize`` too (a
server that can never connect).
"""

from __future__ import annotations

import argparse
import json
import sys

KNOWN = ("2024-11-05", "2025-03-26")


def reply(request_id: object, result: dict[str, object]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": request_id, "result": result}) + "\n")
    sys.stdout.flush()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spawns")
    parser.add_argument("--exit-on-initialize", action="store_true")
    args = parser.parse_args()
    if args.spawns:
        with open(args.spawns, "a") as f:
            f.write("started\n")
    for line in sys.stdin:
        message = json.loads(line)
        method = message.get("method")
        if "id" not in message:
            continue  # notifications (initialized, cancelled)
        if method == "initialize" and not args.exit_on_initialize:
            offered = message["params"]["protocolVersion"]
            reply(
                message["id"],
                {
                    "protocolVersion": offered if offered in KNOWN else KNOWN[0],
                    "capabilities": {"tools": {"listChanged": False}},
                    "serverInfo": {"name": "probe-exit", "version": "1"},
                },
            )
        elif method == "tools/list":
            tool = {
                "name": "echo",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
            }
            reply(message["id"], {"tools": [tool]})
        elif method == "tools/call":
            text = str(message["params"].get("arguments", {}).get("text", ""))
            reply(message["id"], {"content": [{"type": "text", "text": text}], "isError": False})
        else:
            sys.stderr.write(f"1 validation error for ClientRequest: {method!r} is not a valid method\n")
            sys.exit(1)


if __name__ == "__main__":
    main()

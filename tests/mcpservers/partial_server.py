"""A handshake-era stdio MCP server that implements only some methods, for rfcs/0378's tests.

JSON lines on stdin/stdout with nothing but the standard library, so it starts
in milliseconds. It answers ``initialize`` (2024-11-05), ``tools/list`` (one
tool, ``echo``), ``tools/call``, ``resources/list`` (``note://alpha``) and
``resources/read``. Any other request, ``server/discover`` and
``resources/templates/list`` included, is answered -32601 "Method not found", as
the SDK low-level servers do for a method with no handler. Knobs (argv):

* ``--drop METHOD``: no answer at all to METHOD, as a server with no error
  path does (and as a Python SDK ≤ 1.8 server does with ``server/discover``
  over stdio: it reads the probe and says nothing);
* ``--fail METHOD``: -32603 "Internal error" to METHOD;
* ``--spawns FILE``: one line appended per start (how many times agentd started it);
* ``--sleep S``: S seconds before it reads its stdin at all (a slow start).
"""

from __future__ import annotations

import argparse
import json
import sys
import time


def send(message: dict[str, object]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


RESULTS: dict[str, dict[str, object]] = {
    "initialize": {
        "protocolVersion": "2024-11-05",
        "capabilities": {"tools": {}, "resources": {"subscribe": False}},
        "serverInfo": {"name": "partial", "version": "1"},
    },
    "tools/list": {
        "tools": [
            {"name": "echo", "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}}}
        ]
    },
    "resources/list": {"resources": [{"uri": "note://alpha", "name": "alpha", "mimeType": "text/plain"}]},
    "resources/read": {"contents": [{"uri": "note://alpha", "mimeType": "text/plain", "text": "first"}]},
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--drop", action="append", default=[])
    parser.add_argument("--fail", action="append", default=[])
    parser.add_argument("--spawns")
    parser.add_argument("--sleep", type=float, default=0.0)
    args = parser.parse_args()
    if args.spawns:
        with open(args.spawns, "a") as f:
            f.write("started\n")
    time.sleep(args.sleep)
    for line in sys.stdin:
        message = json.loads(line)
        method = message.get("method")
        if "id" not in message:
            continue  # notifications (initialized, cancelled)
        if method in args.drop:
            continue
        if method in args.fail:
            send({"id": message["id"], "error": {"code": -32603, "message": "Internal error"}})
        elif method == "tools/call":
            text = str(message["params"].get("arguments", {}).get("text", ""))
            send({"id": message["id"], "result": {"content": [{"type": "text", "text": text}]}})
        elif method in RESULTS:
            send({"id": message["id"], "result": RESULTS[method]})
        else:
            send({"id": message["id"], "error": {"code": -32601, "message": "Method not found"}})


if __name__ == "__main__":
    main()

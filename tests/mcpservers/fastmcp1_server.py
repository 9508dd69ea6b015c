"""A server written against the standalone ``fastmcp`` 1.0, for agentd's interop tests (rfcs/0378).

It runs under ``fastmcp`` 1.0 in a venv of its own (``tests/support/thirdparty.py``
installs ``tests/thirdparty/fastmcp.txt``), never under agentd's interpreter, so it
imports nothing from the repository. Like every fastmcp 1.0 server that declares
no resource template, it answers ``resources/templates/list`` with -32601
"Method not found".

Catalog: tools ``add(a, b)`` and ``shout(text)``; resource ``note://alpha``.
"""

from fastmcp import FastMCP

mcp = FastMCP("fastmcp1")


@mcp.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@mcp.tool()
def shout(text: str) -> str:
    """Return the text in capitals."""
    return text.upper()


@mcp.resource("note://alpha")
def alpha() -> str:
    """A note."""
    return "first"


if __name__ == "__main__":
    mcp.run()

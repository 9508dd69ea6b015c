#!/bin/sh
# A hook written to the mcp-watcher contract, as agent-ping's prompt hook is: while
# DIR/.AGENT.watcher-active exists, a watcher delivers AGENT's inbox on this host and
# the hook stands down; otherwise the hook delivers the message itself (here: it
# appends it to DIR/AGENT.hook-delivered).
#
# Usage: agent-ping-standdown.sh DIR AGENT MESSAGE   (prints "skipped" or "delivered")
set -eu
dir=$1
agent=$2
message=$3
if [ -e "$dir/.$agent.watcher-active" ]; then
    echo skipped
else
    printf '%s\n' "$message" >>"$dir/$agent.hook-delivered"
    echo delivered
fi

"""``python -m agentd.servers NAME [options]``: the same as ``agentd serve NAME [options]``."""

import sys

from agentd.servers import main

raise SystemExit(main(sys.argv[1:]))

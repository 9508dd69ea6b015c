"""``python -m agentd`` is the ``agentd`` command."""

from agentd.cli import main

raise SystemExit(main())

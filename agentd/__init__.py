"""agentd: a supervisor for LLM agents on one trio reactor.

The public surface is the ``agentd`` command (see :mod:`agentd.cli`); the
modules below are its parts, named for what they hold.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]

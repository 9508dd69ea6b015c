"""How to install an optional extra, said the way that works for this installation.

agentd is not on the package index yet, so installing the distribution by name with an extra
fails for a reader; what works is installing the extra's requirements into the
Python that runs agentd, or reinstalling from the clone with the extra named.
The requirement strings come from the installed distribution's metadata, so the
hint and ``pyproject.toml`` cannot disagree.
"""

from __future__ import annotations

import re
import shlex
import sys
from importlib import metadata

DISTRIBUTION = "agentd-supervisor"
"""The distribution's name on disk (``agentd`` on the package index is another project)."""

_EXTRA_MARKER = re.compile(r"""\s*;\s*extra\s*==\s*['"]([^'"]+)['"]\s*$""")


def requirements(extra: str) -> list[str]:
    """The requirement strings of one extra, from the installed metadata (empty when unknown)."""
    try:
        declared = metadata.requires(DISTRIBUTION) or []
    except metadata.PackageNotFoundError:
        return []
    found: list[str] = []
    for line in declared:
        match = _EXTRA_MARKER.search(line)
        if match and match.group(1) == extra:
            found.append(line[: match.start()].strip())
    return found


def install_hint(extra: str) -> str:
    """One sentence: the commands that add ``extra`` to the agentd that is running."""
    clone = f"from a clone, pipx install --force '.[{extra}]' (or pip install '.[{extra}]')"
    needed = requirements(extra)
    if not needed:
        return f"install agentd with its {extra} extra: {clone}"
    into_this = " ".join([shlex.quote(sys.executable), "-m", "pip", "install", *map(shlex.quote, needed)])
    return f"install agentd's {extra} extra: {into_this}; or {clone}"

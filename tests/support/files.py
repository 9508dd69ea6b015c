"""File helpers for tests that change what a server watches."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any


def edit(path: Path, value: Any) -> None:
    """Replace a JSON file the way an editor does: write a temp file beside it, rename it over."""
    tmp = path.with_name(path.name + ".edit")
    tmp.write_text(json.dumps(value))
    os.replace(tmp, path)

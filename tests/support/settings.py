"""Loading settings in unit tests: a scripted model, an optional TOML file and a private environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agentd.config import Settings, load_settings

SCRIPT = '{"turns": [{"text": "done"}]}'
"""A script model that answers "done" once."""


def script_model(tmp_path: Path) -> str:
    """``script:PATH`` for :data:`SCRIPT`, written to ``tmp_path/model.json``."""
    path = tmp_path / "model.json"
    path.write_text(SCRIPT)
    return f"script:{path}"


def load(
    tmp_path: Path,
    *,
    toml: str | None = None,
    env: dict[str, str] | None = None,
    base: bool = True,
    **flags: Any,
) -> Settings:
    """``load_settings`` with ``flags``, ``toml`` as ``tmp_path/agentd.toml`` and ``env`` as the whole environment.

    ``base`` adds a scripted model and an instruction unless ``flags`` name them.
    """
    if base:
        flags.setdefault("model", script_model(tmp_path))
        flags.setdefault("instruction", "do the thing")
    config = None
    if toml is not None:
        config = tmp_path / "agentd.toml"
        config.write_text(toml)
    return load_settings(flags, config_file=config, env=env or {})

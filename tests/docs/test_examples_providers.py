"""Every ``examples/providers/*.toml`` validates with the environment its comments name."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentd.config import load_settings
from agentd.models import PROVIDERS

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "providers"

#: The variables each example's comments tell the user to export.
ENV = {
    "openai.toml": {"OPENAI_API_KEY": "sk-x"},
    "openai-responses.toml": {"OPENAI_API_KEY": "sk-x"},
    "anthropic.toml": {"ANTHROPIC_API_KEY": "sk-ant-x"},
    "azure.toml": {"AZURE_OPENAI_ENDPOINT": "https://r.openai.azure.com", "AZURE_OPENAI_API_KEY": "k"},
    "bedrock.toml": {"AWS_REGION": "us-east-1"},
    "vertex.toml": {"CLOUD_ML_REGION": "us-east5", "ANTHROPIC_VERTEX_PROJECT_ID": "p"},
    "named-endpoints.toml": {"GATEWAY_KEY": "g"},
}


def test_one_example_per_provider() -> None:
    assert sorted(p.name for p in EXAMPLES.glob("*.toml")) == sorted(ENV)


@pytest.mark.parametrize("name", sorted(ENV))
def test_example_validates(name: str) -> None:
    settings = load_settings({}, config_file=EXAMPLES / name, env=ENV[name])
    assert settings.model is not None
    prefix = settings.model.partition(":")[0]
    assert prefix in PROVIDERS or prefix in settings.providers

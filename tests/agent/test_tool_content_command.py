"""Images, resource links and embedded resources from a real third-party server reach the model.

The real ``agentd`` command runs against npm ``@modelcontextprotocol/server-everything``
(``AGENTD_EVERYTHING_SERVER``, see tests/upstream/test_upstream_everything.py)
and a provider fake on loopback for each wire format; the model asks for
``get-tiny-image``, ``get-resource-links`` and ``get-resource-reference`` in
one turn, and the test reads what the next request carried, off the wire.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.provider_server import (
    RecordedRequest,
    Reply,
    anthropic_reply,
    openai_reply,
    provider_server,
    responses_reply,
)
from tests.support.agentd_proc import run_agentd

INSTALL = (
    "install it with `npm install --prefix /work/npm-cache/everything "
    "@modelcontextprotocol/server-everything@2026.8.31` and set AGENTD_EVERYTHING_SERVER"
)

#: The three calls of the model's first turn: (call id, tool, arguments).
CALLS = [
    ("c1", "everything__get-tiny-image", {}),
    ("c2", "everything__get-resource-links", {"count": 2}),
    ("c3", "everything__get-resource-reference", {"resourceType": "Text", "resourceId": 1}),
]

LINKS = (
    '[resource link] uri="demo://resource/dynamic/blob/1" name="Blob Resource 1" mime_type=text/plain',
    '[resource link] uri="demo://resource/dynamic/text/2" name="Text Resource 2" mime_type=text/plain',
)
EMBEDDED = (
    '[resource uri="demo://resource/dynamic/text/1" mime_type=text/plain]\nResource 1: This is a plaintext'
)


def _everything() -> str:
    path = os.environ.get("AGENTD_EVERYTHING_SERVER")
    if not path or not Path(path).is_file():
        pytest.fail(f"AGENTD_EVERYTHING_SERVER={path!r} is not a file: {INSTALL}")
    if shutil.which("node") is None:
        pytest.fail("node is not on PATH: install Node.js 20 or newer to run the interop test")
    return f"everything=node {path} stdio"


def _env(**extra: str) -> dict[str, str]:
    env = {
        var: "" for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL")
    }
    env.update(extra)
    return env


def _replies(wire: str) -> list[Reply]:
    if wire == "anthropic":
        return [anthropic_reply(tool_uses=CALLS), anthropic_reply("seen")]
    raw = [(i, name, json.dumps(args)) for i, name, args in CALLS]
    if wire == "openai-responses":
        return [responses_reply(function_calls=raw), responses_reply("seen")]
    return [openai_reply(tool_calls=raw), openai_reply("seen")]


def _png(data: str) -> bytes:
    raw = base64.b64decode(data, validate=True)
    assert raw.startswith(b"\x89PNG\r\n\x1a\n")
    return raw


def _results(wire: str, request: RecordedRequest) -> tuple[dict[str, Any], list[bytes]]:
    """The text of each call's result (by call id) and the images the request carried, off the wire."""
    body = request.json
    texts: dict[str, Any] = {}
    images: list[bytes] = []
    if wire == "anthropic":
        for message in body["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block["type"] != "tool_result":
                    continue
                content = block["content"]
                if isinstance(content, str):
                    texts[block["tool_use_id"]] = content
                    continue
                texts[block["tool_use_id"]] = "".join(b.get("text", "") for b in content)
                for b in content:
                    if b["type"] == "image":
                        assert b["source"]["type"] == "base64"
                        assert b["source"]["media_type"] == "image/png"
                        images.append(_png(b["source"]["data"]))
    elif wire == "openai-responses":
        for item in body["input"]:
            if item.get("type") != "function_call_output":
                continue
            output = item["output"]
            if isinstance(output, str):
                texts[item["call_id"]] = output
                continue
            texts[item["call_id"]] = "".join(p.get("text", "") for p in output)
            for p in output:
                if p["type"] == "input_image":
                    assert p["image_url"].startswith("data:image/png;base64,")
                    images.append(_png(p["image_url"].removeprefix("data:image/png;base64,")))
    else:
        messages = body["messages"]
        roles = [m["role"] for m in messages]
        for m in messages:
            if m["role"] == "tool":
                assert isinstance(m["content"], str)  # a tool message takes text only
                texts[m["tool_call_id"]] = m["content"]
        if roles[-1] == "user" and isinstance(messages[-1]["content"], list):
            # the images follow every tool message of the turn, in one user message
            assert roles[-4:] == ["tool", "tool", "tool", "user"]
            parts = messages[-1]["content"]
            assert parts[0] == {
                "type": "text",
                "text": "[agentd: the image(s) of the result of tool call c1]",
            }
            for p in parts[1:]:
                assert p["type"] == "image_url"
                images.append(_png(p["image_url"]["url"].removeprefix("data:image/png;base64,")))
    return texts, images


@pytest.mark.parametrize(
    ("wire", "spec"),
    [
        ("openai", "openai:gpt-4o"),
        ("anthropic", "anthropic:claude-sonnet-4-5"),
        ("openai-responses", "openai-responses:gpt-5"),
    ],
)
async def test_images_links_and_embedded_resources_reach_the_model(
    tmp_path: Path, wire: str, spec: str
) -> None:
    config = tmp_path / "agentd.toml"
    # A loopback base URL: agentd cannot know the model takes images, so the configuration says so.
    config.write_text(
        "[model_settings]\nimages = true\n" + ('prompt_cache = "off"\n' if wire == "anthropic" else "")
    )
    async with provider_server(_replies(wire)) as srv:
        base = srv.url("/v1") if wire != "anthropic" else srv.base_url
        var = "ANTHROPIC" if wire == "anthropic" else "OPENAI"
        env = _env(**{f"{var}_BASE_URL": base, f"{var}_API_KEY": "sk-test"})
        args = ["--config", str(config), "--model", spec, "--mcp-stdio", _everything(), "look"]
        async with run_agentd(args, env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    assert a.out.strip() == "seen"
    texts, images = _results(wire, srv.requests[1])
    assert len(images) == 1, texts
    assert texts["c1"].startswith("Here's the image you requested:")
    assert "not shown" not in texts["c1"]
    assert texts["c2"].startswith("Here are 2 resource links to resources available in this server:")
    for line in LINKS:
        assert line in texts["c2"]
    assert EMBEDDED in texts["c3"]
    assert a.find("tool.content_omitted") == []


async def test_a_model_not_set_to_take_images_gets_a_placeholder_and_the_user_is_told(tmp_path: Path) -> None:
    async with provider_server(_replies("openai")) as srv:
        env = _env(OPENAI_BASE_URL=srv.url("/v1"), OPENAI_API_KEY="sk-test")
        args = ["--model", "openai:gpt-4o", "--mcp-stdio", _everything(), "look"]
        async with run_agentd(args, env=env) as a:
            assert await a.wait_exit() == 0, a.tail()
    texts, images = _results("openai", srv.requests[1])
    assert images == []
    assert [m["role"] for m in srv.requests[1].json["messages"]][-1] == "tool"
    (placeholder,) = [line for line in texts["c1"].splitlines() if line.startswith("[image")]
    assert placeholder.startswith("[image image/png, ")
    assert placeholder.endswith(" bytes: not shown, this model is not set to take images]")
    (told,) = a.find("tool.content_omitted")
    assert (told["level"], told["tool"], told["kind"], told["reason"]) == (
        "warning",
        "everything__get-tiny-image",
        "image",
        "model_takes_no_images",
    )
    assert told["mime_type"] == "image/png"
    assert told["bytes"] > 0
    assert told["fix"] == "if the model takes images, set images = true in [model_settings]"


async def test_a_provider_refusing_the_image_says_which_setting_to_change(tmp_path: Path) -> None:
    refusal = Reply(
        status=400,
        json={"error": {"message": "Invalid content type. image_url is only supported by certain models."}},
    )
    raw = [(i, name, json.dumps(args)) for i, name, args in CALLS[:1]]
    async with provider_server([openai_reply(tool_calls=raw), refusal]) as srv:
        env = _env(
            OPENAI_BASE_URL=srv.url("/v1"), OPENAI_API_KEY="sk-test", AGENTD_MODEL_SETTINGS__IMAGES="true"
        )
        args = ["--model", "openai:text-only", "--mcp-stdio", _everything(), "look"]
        async with run_agentd(args, env=env) as a:
            assert await a.wait_exit() == 4, a.tail()
    (fatal,) = a.find("model.fatal")
    assert "image_url is only supported by certain models" in fatal["error"]
    assert (
        "the request carried 1 image(s) from tool results: if 'text-only' takes no images, set images = false "
        "in [model_settings]" in fatal["error"]
    )

"""What a tool result carries, as the model gets it: text, images, and a placeholder for the rest.

An MCP tool result is a list of content blocks (text, image, audio, resource
link, embedded resource) and, optionally, structured content. The model gets
(rfcs/0290):

* text blocks: their text;
* images: an :class:`~agentd.models.base.ImagePart` each, when the model takes
  images, is of a type every provider takes (PNG, JPEG, GIF, WebP: sniffed
  from the bytes, not taken from the server's word), is valid base64 and
  within :data:`MAX_IMAGE_CHARS`; otherwise a placeholder naming the type,
  the size and why;
* audio: a placeholder (type, size);
* resource links: a line naming the URI, the name and the MIME type (and the
  title, size and description when given);
* embedded resources: a text one's text under a line naming its URI; a
  binary one a placeholder (URI, MIME type, size);
* structured content: its JSON text, when no block is text;
* anything else: a placeholder naming its type.

The server is untrusted: nothing here raises on what it sent, every name it
chose is quoted (a name cannot pass for one of agentd's own notes) and cut.
Text is capped afterwards, with the rest of the result, by the agent loop
(``MAX_TOOL_RESULT_CHARS``); :func:`bound_images` caps the images a
transcript keeps.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping, MutableSequence, Sequence
from dataclasses import dataclass, replace
from typing import Literal

import orjson

from agentd.models.base import ImageMime, ImagePart, Message

#: Longest image, in characters of base64 (what travels), passed to a model.
#: Anthropic refuses an image over 5 MB (counted on the base64) and fails the
#: whole request with it, every later request of the session too; OpenAI's
#: limit is higher. A larger image becomes a placeholder.
MAX_IMAGE_CHARS = 5 * 1024 * 1024

#: The newest images a transcript keeps (older ones become placeholders). Every
#: request sends the whole transcript again: this bounds what images add to
#: each one (about 1,600 input tokens apiece on Anthropic, at most), and
#: Anthropic takes full-size images only up to 20 per request.
MAX_TRANSCRIPT_IMAGES = 20

#: Base64 characters of images a transcript keeps at most (older ones become
#: placeholders): well under Anthropic's 32 MB request limit, leaving room for
#: the text, and a bound on what a long warm session holds in memory.
MAX_TRANSCRIPT_IMAGE_CHARS = 16 * 1024 * 1024

#: Longest name, title, URI or description quoted from a server.
MAX_LABEL_CHARS = 1000

#: Longest MIME type quoted from a server.
MAX_MIME_CHARS = 100

OmitReason = Literal[
    "model_takes_no_images", "too_large", "invalid_base64", "unsupported_type", "not_passed", "unknown_type"
]
"""Why a part of a tool result reached the model as a placeholder."""

_NOT_SHOWN: dict[OmitReason, str] = {
    "model_takes_no_images": "this model is not set to take images",
    "too_large": f"over agentd's limit of {MAX_IMAGE_CHARS} characters of base64 per image",
    "invalid_base64": "its data is not valid base64",
    "unsupported_type": "not a PNG, JPEG, GIF or WebP image",
    "not_passed": "agentd does not pass this kind of content to models",
    "unknown_type": "agentd does not know this kind of content",
}

#: Why an image kept by no later request is gone (see :func:`bound_images`).
DROPPED_NOTE = (
    f"shown earlier, then dropped: agentd keeps the newest {MAX_TRANSCRIPT_IMAGES} images "
    "of a conversation; call the tool again to see it"
)


@dataclass(frozen=True, slots=True)
class Omitted:
    """A part of a tool result the model got as a placeholder (for telemetry).

    Attributes:
        kind: what it was (``image``, ``audio``, ``blob``: an embedded binary resource, ``unknown``).
        mime_type: its MIME type as the server gave it (cleaned and cut), ``""`` if none.
        size: its size in bytes (estimated when it is not valid base64), None if unknown.
        reason: why it is a placeholder.
    """

    kind: Literal["image", "audio", "blob", "unknown"]
    mime_type: str
    size: int | None
    reason: OmitReason


@dataclass(frozen=True, slots=True)
class Converted:
    """A tool result as the model gets it.

    Attributes:
        text: every text part, joined by newlines (placeholders included).
        images: the images to attach after the text.
        is_error: the result is an error.
        omitted: what became a placeholder, in order.
    """

    text: str
    images: tuple[ImagePart, ...]
    is_error: bool
    omitted: tuple[Omitted, ...]


def convert(result: object, *, images: bool) -> Converted:
    """A ``CallToolResult`` (the SDK's model, or its JSON as a mapping) as the model gets it.

    ``images``: the model takes images (else each image is a placeholder).
    Never raises on what the server sent.
    """
    blocks = _field(result, "content")
    content: Sequence[object] = blocks if isinstance(blocks, list | tuple) else ()
    texts: list[str] = []
    attached: list[ImagePart] = []
    omitted: list[Omitted] = []
    has_text = False
    for block in content:
        kind = _field(block, "type")
        if kind == "text":
            has_text = True
            texts.append(_str(_field(block, "text")))
        elif kind == "image":
            image, missing = _image(block, images)
            if image is not None:
                attached.append(image)
            else:
                assert missing is not None
                omitted.append(missing)
                texts.append(_placeholder("image", missing))
        elif kind == "audio":
            size, valid = _measured(_field(block, "data"))
            missing = Omitted("audio", _mime(block), size, "not_passed" if valid else "invalid_base64")
            omitted.append(missing)
            texts.append(_placeholder("audio", missing))
        elif kind == "resource_link":
            texts.append(_link(block))
        elif kind == "resource":
            texts.append(_embedded(_field(block, "resource"), omitted))
        else:
            missing = Omitted("unknown", "", None, "unknown_type")
            omitted.append(missing)
            texts.append(f"[a content block of type {_label(kind)}: not shown, {_NOT_SHOWN['unknown_type']}]")
    structured = _field(result, "structured_content", "structuredContent")
    if not has_text and structured is not None:
        texts.insert(0, _json(structured))
    return Converted(
        text="\n".join(texts),
        images=tuple(attached),
        is_error=_field(result, "is_error", "isError") is True,
        omitted=tuple(omitted),
    )


def bound_images(messages: MutableSequence[Message]) -> int:
    """Keep only the newest images of a transcript within its caps; older ones become placeholders.

    The caps are :data:`MAX_TRANSCRIPT_IMAGES` and :data:`MAX_TRANSCRIPT_IMAGE_CHARS`.
    Changes ``messages`` in place; returns how many images were dropped.
    """
    count = chars = dropped = 0
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if not m.images:
            continue
        keep: list[ImagePart] = []
        gone: list[ImagePart] = []
        for image in m.images:
            if count < MAX_TRANSCRIPT_IMAGES and chars + len(image.data) <= MAX_TRANSCRIPT_IMAGE_CHARS:
                count += 1
                chars += len(image.data)
                keep.append(image)
            else:
                gone.append(image)
        if gone:
            dropped += len(gone)
            text = replace(m, images=tuple(gone)).text_with_placeholders(DROPPED_NOTE)
            messages[i] = replace(m, content=text, images=tuple(keep))
    return dropped


# --------------------------------------------------------------------------- the parts


def _image(block: object, takes_images: bool) -> tuple[ImagePart | None, Omitted | None]:
    mime = _mime(block)
    decoded = _decoded(_field(block, "data"))
    if isinstance(decoded, int | None):
        return None, Omitted("image", mime, decoded, "invalid_base64")
    cleaned, raw = decoded
    if len(cleaned) > MAX_IMAGE_CHARS:
        return None, Omitted("image", mime, len(raw), "too_large")
    sniffed = _sniff(raw)
    if sniffed is None:
        return None, Omitted("image", mime, len(raw), "unsupported_type")
    if not takes_images:
        return None, Omitted("image", sniffed, len(raw), "model_takes_no_images")
    return ImagePart(mime_type=sniffed, data=cleaned, size=len(raw)), None


def _placeholder(kind: str, missing: Omitted) -> str:
    what = f"{kind} {missing.mime_type or 'of no given type'}"
    if missing.size is not None:
        what += f", {missing.size} bytes"
    return f"[{what}: not shown, {_NOT_SHOWN[missing.reason]}]"


def _link(block: object) -> str:
    parts = [f"uri={_label(_field(block, 'uri'))}", f"name={_label(_field(block, 'name'))}"]
    parts.append(f"mime_type={_mime(block) or 'unknown'}")
    for key in ("title", "description"):
        value = _field(block, key)
        if value is not None:
            parts.append(f"{key}={_label(value)}")
    size = _field(block, "size")
    if isinstance(size, int) and not isinstance(size, bool) and size >= 0:
        parts.append(f"size={size}")
    return "[resource link] " + " ".join(parts)


def _embedded(resource: object, omitted: list[Omitted]) -> str:
    head = f"uri={_label(_field(resource, 'uri'))} mime_type={_mime(resource) or 'unknown'}"
    text = _field(resource, "text")
    if isinstance(text, str):
        return f"[resource {head}]\n{text}"
    size, valid = _measured(_field(resource, "blob"))
    missing = Omitted("blob", _mime(resource), size, "not_passed" if valid else "invalid_base64")
    omitted.append(missing)
    amount = f"{size} bytes of binary data" if size is not None else "binary data"
    return f"[resource {head}: {amount}, not shown, {_NOT_SHOWN[missing.reason]}]"


def _json(value: object) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError):
        return "[structured content: not shown, it is not JSON agentd can write (too deep, or not JSON data)]"


# --------------------------------------------------------------------------- untrusted values


def _field(obj: object, *names: str) -> object:
    """``obj``'s first present field of ``names``: a mapping's key (the wire's camelCase too) or an attribute."""
    for name in names:
        if isinstance(obj, Mapping):
            camel = name.split("_")[0] + "".join(w.title() for w in name.split("_")[1:])
            for key in (name, camel):
                if key in obj:
                    return obj[key]
        else:
            value = getattr(obj, name, None)
            if value is not None:
                return value
    return None


def _str(value: object) -> str:
    return value if isinstance(value, str) else ""


def _label(value: object) -> str:
    """A server's name for something, quoted (JSON) and cut: it reads as data, never as agentd's note."""
    text = value if isinstance(value, str) else repr(value)[:MAX_LABEL_CHARS]
    if len(text) > MAX_LABEL_CHARS:
        text = text[:MAX_LABEL_CHARS] + "…"
    return orjson.dumps(text.encode("utf-8", "replace").decode("utf-8")).decode()


def _mime(obj: object) -> str:
    """A MIME type as the server gave it, reduced to the characters a MIME type uses, and cut."""
    value = _field(obj, "mime_type", "mimeType")
    if not isinstance(value, str):
        return ""
    kept = "".join(c for c in value if c.isascii() and (c.isalnum() or c in "!#$&^_.+-/=;"))
    return kept[:MAX_MIME_CHARS].lower()


def _decoded(data: object) -> tuple[str, bytes] | int | None:
    """Base64 data as (the text to send on, its bytes); when it is not valid base64, its estimated size.

    Whitespace (some servers wrap base64 in lines) is removed and missing
    padding added; anything else that is not standard base64 is invalid.
    """
    if not isinstance(data, str):
        return None
    cleaned = "".join(data.split())
    if len(cleaned) % 4 in (2, 3):
        cleaned += "=" * (-len(cleaned) % 4)
    try:
        return cleaned, base64.b64decode(cleaned, validate=True)
    except (binascii.Error, ValueError):
        return len(cleaned) * 3 // 4


def _measured(data: object) -> tuple[int | None, bool]:
    """The decoded size of base64 data, and whether it is valid (else the size is an estimate, or None)."""
    decoded = _decoded(data)
    if isinstance(decoded, tuple):
        return len(decoded[1]), True
    return decoded, False


def _sniff(raw: bytes) -> ImageMime | None:
    """The image type the bytes are (their signature), if one every provider takes."""
    if raw.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if raw.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if raw[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
        return "image/webp"
    return None


__all__ = [
    "MAX_IMAGE_CHARS",
    "MAX_TRANSCRIPT_IMAGES",
    "MAX_TRANSCRIPT_IMAGE_CHARS",
    "Converted",
    "OmitReason",
    "Omitted",
    "bound_images",
    "convert",
]

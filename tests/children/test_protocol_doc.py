"""The control protocol's module docstring names exactly the frames that exist, each under its direction."""

from __future__ import annotations

import re
from typing import get_args

from agentd.selfmcp import protocol
from agentd.selfmcp.protocol import ChildEventName, ChildFrame, SupervisorFrame


def _documented() -> dict[str, set[tuple[str, str]]]:
    """``{direction: {(type, class name)}}`` from the docstring's ``Frames, by type::`` table."""
    doc = protocol.__doc__ or ""
    table = doc.split("Frames, by ``type``::", 1)[1].split("\n\n", 2)[1]
    frames: dict[str, set[tuple[str, str]]] = {}
    direction = ""
    for line in table.splitlines():
        if heading := re.fullmatch(r" {4}(\S.*\S)", line):
            direction = heading.group(1)
            frames[direction] = set()
        elif row := re.match(r" {6}([a-z_]+) +([A-Za-z]+)\b", line):
            frames[direction].add((row.group(1), row.group(2)))
    return frames


def _defined(union: object) -> set[tuple[str, str]]:
    members = get_args(get_args(union)[0])
    return {(cls.model_fields["type"].default, cls.__name__) for cls in members}


def test_the_docstring_names_every_frame_and_no_other() -> None:
    assert _documented() == {
        "supervisor → child": _defined(SupervisorFrame),
        "child → supervisor": _defined(ChildFrame),
    }


def test_the_docstring_names_every_child_event() -> None:
    doc = protocol.__doc__ or ""
    assert all(f"``{name}``" in doc for name in get_args(ChildEventName))

"""``--shard INDEX/COUNT``: which replica handles which routed work (rendezvous hashing).

Every replica connects to the same servers and routes every update it gets;
it *handles* an update only if it owns the update's shard key:

* a continue route's session name (a session lives on exactly one replica);
* a spawn route's URI (each change starts an agent on exactly one replica);
* self-subscriptions and watches are local: their routes exist only on the
  replica whose agent made them, so they are always handled there.

Ownership is rendezvous (highest-random-weight) hashing: replica ``i`` scores
``blake2b(i, key)`` and the highest score owns the key. Every replica computes
the same answer with no coordination, and changing the count moves only the
keys whose winner changed (about 1/N of them when a replica is added).

``--shard auto`` reads the index from the ordinal of a StatefulSet pod's name
(``POD_NAME``, else ``HOSTNAME``: ``agentd-2`` is index 2) and the count from
``AGENTD_SHARD_COUNT``.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from agentd.core.durations import ascii_int

if TYPE_CHECKING:
    from agentd.triggers.router import Router

#: Most replicas a shard count may name (far above any sane StatefulSet).
MAX_SHARDS: Final = 1024
COUNT_ENV: Final = "AGENTD_SHARD_COUNT"


def score(index: int, key: str) -> int:
    """Replica ``index``'s weight for ``key`` (the same in every process: no ``hash()`` salt)."""
    digest = hashlib.blake2b(key.encode(), digest_size=8, key=index.to_bytes(4, "little")).digest()
    return int.from_bytes(digest, "little")


def owner(key: str, count: int) -> int:
    """The replica that owns ``key`` among ``count`` replicas."""
    if count == 1:
        return 0
    return max(range(count), key=lambda i: score(i, key))


@dataclass(frozen=True, slots=True)
class Shard:
    """This replica's place: ``index`` of ``count``."""

    index: int
    count: int

    @property
    def label(self) -> str:
        return f"{self.index}/{self.count}"

    def owns(self, key: str) -> bool:
        return owner(key, self.count) == self.index


def parse_shard(text: str, env: Mapping[str, str]) -> Shard:
    """``INDEX/COUNT`` or ``auto``.

    Raises:
        ValueError: the message names the form and the fix (config reports it with the setting).
    """
    text = text.strip()
    if text == "auto":
        pod = env.get("POD_NAME") or env.get("HOSTNAME") or ""
        m = re.fullmatch(r".*-([0-9]+)", pod)
        if m is None:
            raise ValueError(
                f"--shard auto takes the index from a StatefulSet pod name ending in -ORDINAL, and POD_NAME / "
                f"HOSTNAME is {pod!r}; run it in a StatefulSet, or give --shard INDEX/COUNT"
            )
        raw = env.get(COUNT_ENV, "")
        try:  # never isdigit()/int(): "²" passes one and fails the other, "١٢" reads as 12
            count = ascii_int(raw.strip())
        except ValueError:
            raise ValueError(
                f"--shard auto takes the count from {COUNT_ENV}, which is {raw!r}; set it to the replica "
                "count in ASCII digits, e.g. 3"
            ) from None
        index = int(m.group(1))
    else:
        m = re.fullmatch(r"([0-9]+)/([0-9]+)", text)
        if m is None:
            raise ValueError("write INDEX/COUNT (e.g. 0/3: the first of three replicas) or auto")
        index, count = int(m.group(1)), int(m.group(2))
    if not 1 <= count <= MAX_SHARDS:
        raise ValueError(f"the count must be 1 to {MAX_SHARDS}, not {count}")
    if index >= count:
        raise ValueError(f"the index counts from 0 and must be below the count ({count}), not {index}")
    return Shard(index, count)


def route_key(route: object, uri: str) -> str | None:
    """The shard key of an update ``route`` matched, or None when the route is local to this replica.

    Local: self-subscriptions and watches (routes a session of this replica
    made: ``owner`` set, or a ``self:`` / ``watch:`` id). A continue route's key
    is its session, a spawn route's the URI.
    """
    from agentd.triggers.router import Continue, Route

    assert isinstance(route, Route)
    if route.owner is not None or route.id.startswith(("self:", "watch:")):
        return None
    disposition = route.disposition
    if isinstance(disposition, Continue):
        return "session:" + disposition.session
    return "uri:" + uri


def handles(shard: Shard | None, route: object, uri: str) -> bool:
    """Whether this replica handles an update of ``uri`` that ``route`` matched."""
    if shard is None or shard.count == 1:
        return True
    key = route_key(route, uri)
    return key is None or shard.owns(key)


def shard_for(spec: str | None) -> Shard | None:
    """This replica's shard from the validated ``shard`` setting (None: it handles everything).

    It takes the setting's value, not the settings: config/ validates the
    setting with :func:`parse_shard`, so state/ must not know config/.
    """
    if spec is None:
        return None
    import os

    shard = parse_shard(spec, os.environ)
    return None if shard.count == 1 else shard


def declared_filter(router: Router, shard: Shard) -> Callable[[tuple[str, str]], bool]:
    """Which declared ``(server, uri)`` pairs this replica subscribes: those whose updates it handles."""

    def keep(pair: tuple[str, str]) -> bool:
        route = router.first_match(pair[1])
        return route is None or handles(shard, route, pair[1])

    return keep


__all__ = [
    "COUNT_ENV",
    "MAX_SHARDS",
    "Shard",
    "declared_filter",
    "handles",
    "owner",
    "parse_shard",
    "route_key",
    "score",
    "shard_for",
]

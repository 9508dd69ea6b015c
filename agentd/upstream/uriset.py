"""Which URIs one server's subscription should carry, and what each establishment changed (pure).

One connection carries every subscribed URI of its server at once: one
``subscriptions/listen`` stream (2026-07-28), or one ``resources/subscribe``
per URI on the one session (handshake era). :class:`UriSet` keeps the set
that is wanted, the set the server carries now, and which URIs were carried
before (their next establishment is followed by one "possibly changed": a
change while they were not carried may have been missed). The async shell
(:mod:`agentd.upstream.subscriptions`) asks it what to carry next
(:meth:`UriSet.target`), tells it what the server now carries
(:meth:`UriSet.established`) and what was lost (:meth:`UriSet.lost`), and
performs the I/O.

No trio, no I/O: every method is synchronous and O(changed URIs) except
:meth:`UriSet.target` and :meth:`UriSet.established`, which are O(URIs) and
run once per establishment, not once per URI.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, KeysView, Sequence
from dataclasses import dataclass

__all__ = ["Narrowing", "NarrowingPhase", "Switch", "UriSet"]


@dataclass(frozen=True, slots=True)
class Switch:
    """What one establishment changed (a new listen stream, or a handshake-era batch)."""

    added: frozenset[str]
    """URIs the server carries now and did not before (``subscription.established`` for each)."""
    removed: frozenset[str]
    """URIs it carried before and does not now."""
    reread: frozenset[str]
    """The added URIs that were carried once before: each gets one "possibly changed"."""


class UriSet:
    """The wanted set, the carried set and the URIs carried once (see the module docstring)."""

    __slots__ = ("_failed", "_wanted", "carried", "dirty")

    def __init__(self) -> None:
        self._wanted: dict[str, bool] = {}
        """Wanted URI -> whether it was carried once (its next establishment re-reads it)."""
        self._failed: set[str] = set()
        """Wanted URIs given up until they are wanted again or the connection is new."""
        self.carried: frozenset[str] = frozenset()
        """What the server carries now (empty after a loss and on a new connection)."""
        self.dirty = False
        """The target differs (or may differ) from :attr:`carried`: an establishment is due."""

    def __contains__(self, uri: object) -> bool:
        return uri in self._wanted

    def __len__(self) -> int:
        return len(self._wanted)

    @property
    def wanted(self) -> KeysView[str]:
        """Every wanted URI (a live view: it changes as URIs are wanted and dropped)."""
        return self._wanted.keys()

    @property
    def failed(self) -> frozenset[str]:
        """Wanted URIs that are not carried because the server refused them."""
        return frozenset(self._failed)

    def want(self, uri: str, *, carried_once: bool = False) -> bool:
        """Want ``uri``; True if an establishment is now due for it (new, or given up before).

        ``carried_once``: treat it as carried before, so its first
        establishment is followed by a re-read (a URI wanted while the
        server is down: the subscription is made when it comes back).
        """
        if uri in self._wanted:
            if uri not in self._failed:
                return False
            self._failed.discard(uri)  # failed -> wanted again: the next establishment tries it
        else:
            self._wanted[uri] = carried_once
        self.dirty = True
        return True

    def drop(self, uri: str) -> bool:
        """Stop wanting ``uri``; True if it was wanted."""
        if self._wanted.pop(uri, None) is None:
            return False
        self._failed.discard(uri)
        if uri in self.carried:
            self.dirty = True
        return True

    def target(self) -> frozenset[str]:
        """What the next establishment should carry: every wanted URI not given up."""
        self.dirty = False
        if not self._failed:
            return frozenset(self._wanted)
        return frozenset(u for u in self._wanted if u not in self._failed)

    def established(self, carried: Iterable[str]) -> Switch:
        """The server now carries ``carried`` (what it acknowledged); returns what changed."""
        now = frozenset(carried)
        before = self.carried
        added = now - before
        reread = frozenset(u for u in added if self._wanted.get(u))
        for uri in added:
            if uri in self._wanted:
                self._wanted[uri] = True
        self.carried = now
        if not now <= self._wanted.keys():
            self.dirty = True  # dropped while this establishment was on its way: leave it out next
        return Switch(added=added, removed=before - now, reread=reread)

    def lost(self) -> frozenset[str]:
        """The server stopped carrying everything (a stream ended, the connection dropped).

        Returns what it carried. The next establishment re-reads every URI
        carried once (at-least-once across the loss).
        """
        lost, self.carried = self.carried, frozenset()
        self.dirty = True
        return lost

    def fail(self, uris: Iterable[str]) -> None:
        """The server refused ``uris``: not carried, and not tried again until wanted again."""
        for uri in uris:
            if uri in self._wanted:
                self._failed.add(uri)

    def reset(self) -> None:
        """A new connection: nothing is carried, and every URI given up is tried again."""
        self._failed.clear()
        self.lost()


class NarrowingPhase(enum.Enum):
    """Where a :class:`Narrowing` is."""

    BISECT = "bisect"
    """Looking for the longest prefix of the added URIs the server takes."""
    REST = "rest"
    """The first URI it refuses is known: one try of everything after it."""
    DONE = "done"
    """:attr:`Narrowing.refused` is final."""


class Narrowing:
    """What to ask next after a server refused a whole listen request (pure; rfcs/0261).

    A server may refuse a ``subscriptions/listen`` request as a whole because
    one URI in it is one too many (the bundled servers' ``--max-watchers``
    takes the URIs in the order sent and names the first that does not fit in
    the error's ``data.uri``). The request was ``base`` (carried now, sent
    first) then ``added``, in that order. Rather than asking for the whole set
    again (a loop that never ends while the cap holds), agentd asks for
    shorter prefixes of ``added``: the one before a URI the server named,
    else half (bisection), so the URIs that fit are carried after one try
    with a bundled server and after about log2(len(added)) tries with any
    other. Then everything after the first refused URI is tried once more
    without it (one bad URI among good ones costs only itself). What is left
    is :attr:`refused`: dropped from the set and reported, never asked again
    until subscribed again.

    The shell calls :meth:`next_try`, asks the server for ``base`` plus what
    it returned, and reports :meth:`accepted` or :meth:`refused_by`.
    """

    __slots__ = ("_added", "_hi", "_hinted", "_index", "_lo", "_trying", "phase", "refused")

    def __init__(self, added: Sequence[str], named: str | None = None) -> None:
        self._added = tuple(added)
        self._index = {uri: i for i, uri in enumerate(self._added)}
        self._lo = 0
        """``base`` + ``added[:lo]`` is carried (taken by the server)."""
        self._hi = len(self._added)
        """``base`` + ``added[:hi]`` was refused."""
        self._hinted = False
        self._trying = 0
        self.phase = NarrowingPhase.BISECT if self._added else NarrowingPhase.DONE
        self.refused: tuple[str, ...] = ()
        """The URIs given up (final once :attr:`phase` is DONE)."""
        self._named(named)

    def _named(self, uri: str | None) -> None:
        j = self._index.get(uri) if uri is not None else None
        if j is not None and self._lo <= j < self._hi:
            self._hi, self._hinted = j + 1, True  # the server took everything before it
        else:
            self._hinted = False

    def next_try(self) -> tuple[str, ...] | None:
        """The added URIs to ask for next (after ``base``), or None: :attr:`refused` is final."""
        if self.phase is NarrowingPhase.BISECT:
            if self._hi - self._lo > 1:
                self._trying = self._hi - 1 if self._hinted else (self._lo + self._hi) // 2
                return self._added[: self._trying]
            rest = self._added[self._lo + 1 :]
            if not rest:
                self._finish(self._added[self._lo :])
                return None
            self.phase = NarrowingPhase.REST  # BISECT -> REST
            return self._added[: self._lo] + rest
        return None

    def accepted(self) -> None:
        """The server took the last try."""
        if self.phase is NarrowingPhase.REST:
            self._finish(self._added[self._lo : self._lo + 1])
        else:
            self._lo = self._trying
            self._hinted = False

    def refused_by(self, named: str | None = None) -> None:
        """The server refused the last try (``named``: the URI its error names, if any)."""
        if self.phase is NarrowingPhase.REST:
            self._finish(self._added[self._lo :])
        else:
            self._hi = self._trying
            self._named(named)

    def _finish(self, refused: tuple[str, ...]) -> None:
        self.refused = refused
        self.phase = NarrowingPhase.DONE  # BISECT/REST -> DONE

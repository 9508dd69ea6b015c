"""How two URI patterns relate: does some URI match both, does one cover the other (pure).

A glob (:mod:`agentd.triggers.glob`) or an RFC 6570 resource template, read
as a small automaton over characters, where a character class is a literal
character, SEG (any character but ``/``) or ANY. :func:`overlaps` explores
the product of two automata; :func:`covers` the product of one with the
subsets of the other's states. The routing findings (``agentd check``, the
start-up warnings) and the subscriptions' resolution use them. No trio, no I/O.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from agentd.triggers.glob import Glob

__all__ = ["covers", "overlaps", "template_atoms"]

# A pattern as a small automaton over characters. A character class is a
# literal character, SEG (any character but "/") or ANY.
_SEG = "\x00seg"
_ANY = "\x00any"
Atom = tuple[str, str]
"""``("lit", c)``, ``("one", cls)``, ``("star", cls)`` or ``("dstar_seg", "")``."""


def _glob_atoms(glob: Glob) -> list[Atom]:
    atoms: list[Atom] = []
    for token, wild in zip(glob.tokens, glob.is_wild, strict=True):
        if not wild:
            atoms += [("lit", c) for c in token]
        elif token == "*":
            atoms.append(("star", _SEG))
        elif token == "**":
            atoms.append(("star", _ANY))
        elif token == "?":
            atoms.append(("one", _SEG))
        else:  # "**/": zero segments, or any text that ends in "/"
            atoms.append(("dstar_seg", ""))
    return atoms


def template_atoms(template: str) -> list[Atom]:
    """An RFC 6570 template, read generously: ``{var}`` is any text without "/", other expressions any text."""
    atoms: list[Atom] = []
    i = 0
    while i < len(template):
        c = template[i]
        end = template.find("}", i) if c == "{" else -1
        if end == -1:
            atoms.append(("lit", c))
            i += 1
            continue
        body = template[i + 1 : end]
        atoms.append(("star", _SEG if body[:1].isalnum() or body[:1] == "_" else _ANY))
        i = end + 1
    return atoms


@dataclass(slots=True)
class _Automaton:
    eps: dict[int, list[int]]
    edges: dict[int, list[tuple[str, int]]]
    accept: int


def _automaton(atoms: Sequence[Atom]) -> _Automaton:
    eps: dict[int, list[int]] = {}
    edges: dict[int, list[tuple[str, int]]] = {}
    state = 0
    top = 0
    for kind, cls in atoms:
        if kind == "lit" or kind == "one":
            top += 1
            edges.setdefault(state, []).append((cls, top))
            state = top
        elif kind == "star":
            # A fresh state, so a loop never joins the text before it.
            top += 1
            eps.setdefault(state, []).append(top)
            edges.setdefault(top, []).append((cls, top))
            state = top
        else:  # dstar_seg: "" or ANY* "/"
            loop, after = top + 1, top + 2
            top += 2
            eps.setdefault(state, []).extend((after, loop))
            edges.setdefault(loop, []).extend(((_ANY, loop), ("/", after)))
            state = after
    return _Automaton(eps, edges, state)


def _meet(a: str, b: str) -> bool:
    """Whether two character classes share a character."""
    if a == _ANY or b == _ANY:
        return True
    if a == _SEG:
        return b != "/"
    if b == _SEG:
        return a != "/"
    return a == b


def overlaps(glob: Glob, other: Glob | Sequence[Atom]) -> bool:
    """Whether some URI matches both ``glob`` and ``other`` (a glob, or template atoms)."""
    left = _automaton(_glob_atoms(glob))
    right = _automaton(_glob_atoms(other) if isinstance(other, Glob) else other)
    seen = {(0, 0)}
    todo = [(0, 0)]
    while todo:
        p, q = todo.pop()
        if p == left.accept and q == right.accept:
            return True
        following = [(p2, q) for p2 in left.eps.get(p, ())]
        following += [(p, q2) for q2 in right.eps.get(q, ())]
        following += [
            (p2, q2) for a, p2 in left.edges.get(p, ()) for b, q2 in right.edges.get(q, ()) if _meet(a, b)
        ]
        for pair in following:
            if pair not in seen:
                seen.add(pair)
                todo.append(pair)
    return False


def covers(outer: Glob, inner: Glob) -> bool:
    """Whether every URI ``inner`` matches, ``outer`` matches too (``outer`` covers ``inner`` wholly).

    Exact, by a product of ``inner``'s automaton with the subsets of
    ``outer``'s states over a finite alphabet: every character either
    pattern names, ``/``, and one character neither names.
    """
    left = _automaton(_glob_atoms(inner))
    right = _automaton(_glob_atoms(outer))
    named = {cls for a in (left, right) for edges in a.edges.values() for cls, _ in edges}
    other = next(c for c in (chr(0xE000 + k) for k in range(len(named) + 1)) if c not in named)
    alphabet = sorted({c for c in named if c not in (_SEG, _ANY)} | {"/", other})

    def closure(automaton: _Automaton, states: Iterable[int]) -> frozenset[int]:
        found = set(states)
        todo = list(found)
        while todo:
            for nxt in automaton.eps.get(todo.pop(), ()):
                if nxt not in found:
                    found.add(nxt)
                    todo.append(nxt)
        return frozenset(found)

    def step(automaton: _Automaton, states: frozenset[int], char: str) -> frozenset[int]:
        return closure(
            automaton, (n for s in states for cls, n in automaton.edges.get(s, ()) if _meet(cls, char))
        )

    start = (closure(left, (0,)), closure(right, (0,)))
    seen = {start}
    todo = [start]
    while todo:
        mine, theirs = todo.pop()
        if left.accept in mine and right.accept not in theirs:
            return False
        for char in alphabet:
            nxt = (step(left, mine, char), step(right, theirs, char))
            if nxt[0] and nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return True

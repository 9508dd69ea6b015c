"""A set of integers stored as sorted, disjoint half-open ranges (pure, synchronous).

The inbox keeps acknowledged sequence numbers and, per channel client, the
sequence numbers already pushed. Both grow mostly in order, so ranges keep
them tiny: a million acknowledgements in order are one range.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Iterable, Iterator

__all__ = ["IntervalSet"]


class IntervalSet:
    """Integers as sorted disjoint ``[start, end)`` ranges."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, ranges: Iterable[tuple[int, int]] = ()) -> None:
        self._starts: list[int] = []
        self._ends: list[int] = []
        for start, end in ranges:
            self.add_range(start, end)

    # ------------------------------------------------------------------ queries

    def __contains__(self, x: int) -> bool:
        i = bisect_right(self._starts, x) - 1
        return i >= 0 and x < self._ends[i]

    def __len__(self) -> int:
        return sum(e - s for s, e in zip(self._starts, self._ends, strict=True))

    def __bool__(self) -> bool:
        return bool(self._starts)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, IntervalSet) and self.ranges() == other.ranges()

    def __repr__(self) -> str:
        return f"IntervalSet({self.ranges()!r})"

    def ranges(self) -> list[tuple[int, int]]:
        """The ranges as ``(start, end)`` pairs, ascending."""
        return list(zip(self._starts, self._ends, strict=True))

    def range_count(self) -> int:
        return len(self._starts)

    def count_in(self, lo: int, hi: int) -> int:
        """How many members lie in ``[lo, hi)``."""
        if hi <= lo:
            return 0
        n = 0
        i = max(0, bisect_right(self._starts, lo) - 1)
        while i < len(self._starts) and self._starts[i] < hi:
            n += max(0, min(hi, self._ends[i]) - max(lo, self._starts[i]))
            i += 1
        return n

    def first_missing(self, lo: int) -> int:
        """The smallest integer ``>= lo`` that is not a member."""
        i = bisect_right(self._starts, lo) - 1
        if i >= 0 and lo < self._ends[i]:
            return self._ends[i]
        return lo

    def last_missing(self, hi: int) -> int:
        """The largest integer ``< hi`` that is not a member (may be anything below ``hi``)."""
        x = hi - 1
        i = bisect_right(self._starts, x) - 1
        if i >= 0 and x < self._ends[i]:
            return self._starts[i] - 1
        return x

    def missing(self, lo: int, hi: int) -> Iterator[int]:
        """Non-members in ``[lo, hi)``, ascending."""
        x = self.first_missing(lo)
        while x < hi:
            yield x
            x = self.first_missing(x + 1)

    # ------------------------------------------------------------------ changes

    def add(self, x: int) -> bool:
        """Add one member; returns False if it was already there."""
        if x in self:
            return False
        self.add_range(x, x + 1)
        return True

    def add_range(self, start: int, end: int) -> None:
        """Add every integer in ``[start, end)``."""
        if end <= start:
            return
        i = bisect_right(self._starts, start) - 1
        if i >= 0 and self._ends[i] >= start:
            start = self._starts[i]
        else:
            i += 1
        j = i
        while j < len(self._starts) and self._starts[j] <= end:
            end = max(end, self._ends[j])
            j += 1
        self._starts[i:j] = [start]
        self._ends[i:j] = [end]

    def trim_below(self, lo: int) -> None:
        """Forget every member ``< lo``."""
        i = bisect_right(self._starts, lo) - 1
        if i >= 0 and self._ends[i] > lo:
            self._starts[i] = lo
            del self._starts[:i]
            del self._ends[:i]
        else:
            del self._starts[: i + 1]
            del self._ends[: i + 1]

"""The tree-wide budget: tokens, steps, US dollars and a wall-clock deadline.

One :class:`Budget` covers the whole process lifetime: every model call of
every subagent (roots, children, warm sessions) is charged to it, and it is
never reset between loop shifts or reactive events (rfcs/0167: the cap is
cumulative). When it is spent the drivers stop starting work and the process
exits 7 (or 3 with a partial result in ``once``); the USD ceiling behaves
exactly like the token ceiling. Tokens are counted as the providers bill
them: every input token, those read from or written to the prompt cache
included, plus the output tokens. Pure: time is passed in.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

BudgetKind = Literal["tokens", "steps", "usd"]
"""Which ceiling was reached."""


@dataclass(slots=True)
class Budget:
    """Lifetime ceilings for the whole agent tree.

    Attributes:
        max_steps: model calls allowed in total; None = unlimited.
        max_tokens: input + output tokens allowed in total; None = unlimited.
        deadline_at: monotonic time the run must end by; None = none.
        max_usd: US dollars allowed in total (priced calls only); None = unlimited.
        steps: model calls charged so far.
        tokens: tokens charged so far.
        usd: US dollars charged so far (calls of unknown price add nothing).
        unpriced_calls: calls whose price was unknown.
    """

    max_steps: int | None = None
    max_tokens: int | None = None
    deadline_at: float | None = None
    max_usd: float | None = None
    steps: int = field(default=0, init=False)
    tokens: int = field(default=0, init=False)
    usd: float = field(default=0.0, init=False)
    unpriced_calls: int = field(default=0, init=False)

    def __post_init__(self) -> None:
        for name in ("max_steps", "max_tokens"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"{name}: {v!r} is not valid: give a whole number >= 1, or leave it unset")
        if self.deadline_at is not None and not math.isfinite(self.deadline_at):
            raise ValueError(f"deadline_at: {self.deadline_at!r} is not valid: give a finite monotonic time")
        if self.max_usd is not None and not (math.isfinite(self.max_usd) and self.max_usd > 0):
            raise ValueError(
                f"max_usd: {self.max_usd!r} is not valid: give a positive amount, or leave it unset"
            )

    def charge(
        self, *, input_tokens: int, output_tokens: int, steps: int = 0, cost_usd: float | None = 0.0
    ) -> BudgetKind | None:
        """Add one report of usage; return :meth:`spent` afterwards.

        ``cost_usd`` is the call's price; ``None`` means unknown (counted in
        :attr:`unpriced_calls`, adding nothing to :attr:`usd`).

        Raises:
            ValueError: a negative or non-finite count (a child reporting garbage); nothing is charged.
        """
        if input_tokens < 0 or output_tokens < 0 or steps < 0:
            raise ValueError(
                f"usage report input_tokens={input_tokens!r} output_tokens={output_tokens!r} steps={steps!r} "
                "is not valid: counts must be >= 0"
            )
        if cost_usd is not None and not (math.isfinite(cost_usd) and cost_usd >= 0):
            raise ValueError(
                f"usage report cost_usd={cost_usd!r} is not valid: a cost is a finite amount >= 0"
            )
        self.tokens += input_tokens + output_tokens
        self.steps += steps
        if cost_usd is None:
            self.unpriced_calls += 1
        else:
            self.usd += cost_usd
        return self.spent()

    def spent(self) -> BudgetKind | None:
        """The ceiling that is reached (tokens, then US dollars, then steps), or None."""
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            return "tokens"
        if self.max_usd is not None and self.usd >= self.max_usd:
            return "usd"
        if self.max_steps is not None and self.steps >= self.max_steps:
            return "steps"
        return None

    def cost_usd(self) -> float | str:
        """The run's cost so far: US dollars when every call was priced, else ``"unknown"``."""
        return "unknown" if self.unpriced_calls else round(self.usd, 8)

    def remaining_tokens(self) -> int | None:
        """Tokens left before the ceiling (never negative), or None when unlimited."""
        return None if self.max_tokens is None else max(0, self.max_tokens - self.tokens)

    def remaining_steps(self) -> int | None:
        """Steps left before the ceiling (never negative), or None when unlimited."""
        return None if self.max_steps is None else max(0, self.max_steps - self.steps)

    def deadline_reached(self, now: float) -> bool:
        """Whether ``now`` (monotonic) is at or past the deadline."""
        return self.deadline_at is not None and now >= self.deadline_at

    def next_deadline(self) -> float | None:
        """The deadline for the reactor's receive bound, or None."""
        return self.deadline_at

    def snapshot(self) -> dict[str, int | float | None]:
        """Counters for telemetry and the status endpoint."""
        return {
            "steps": self.steps,
            "tokens": self.tokens,
            "usd": round(self.usd, 8),
            "max_steps": self.max_steps,
            "max_tokens": self.max_tokens,
            "max_usd": self.max_usd,
            "deadline_at": self.deadline_at,
        }

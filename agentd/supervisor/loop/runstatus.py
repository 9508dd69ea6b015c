"""How the run stands: the process phase and every fact the mode's driver reads to decide the exit.

:class:`RunStatus` owns the phase (``RUNNING → DRAINING → STOPPED``), the
drain's deadline, a forced exit (drain timed out or a second signal), a fatal
infrastructure error, a failed required server (and the message the user
reads), the restart breaker, the root's last terminal status and text, the
loop's next re-entry, whether ``budget.exhausted`` was written, and the exit
code. Its methods are the transitions; a move the lifecycle does not connect
raises :class:`~agentd.supervisor.loop.agents.IllegalTransition` (a reactor bug),
as the agent table does. Other parts read its attributes and never write
them. :meth:`RunStatus.view` is what the driver may read.
"""

from __future__ import annotations

from agentd.core.exitcodes import ExitCode, TerminalStatus
from agentd.supervisor.loop.agents import AgentTable, IllegalTransition
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.seams import Phase
from agentd.triggers import mode as modes


class RunStatus:
    """The run's phase and exit facts; transitions are methods (see the module docstring)."""

    __slots__ = (
        "_agents",
        "_budget",
        "breaker_open",
        "budget_reported",
        "drain_deadline",
        "exit_code",
        "fatal_infra",
        "forced_exit",
        "phase",
        "reenter_at",
        "required_failed",
        "required_failed_error",
        "root_status",
        "root_text",
    )

    def __init__(self, budget: Budget, agents: AgentTable) -> None:
        self._budget = budget
        self._agents = agents
        self.phase = Phase.RUNNING
        self.drain_deadline: float | None = None
        self.reenter_at: float | None = None
        """When the loop's root re-enters (a shift, or a restart after the governor's backoff)."""
        self.forced_exit: ExitCode | None = None
        self.fatal_infra: str | None = None
        self.required_failed: str | None = None
        self.required_failed_error: str | None = None
        """Why :attr:`required_failed` ended the run, for the user (exit 6, rfcs/0135)."""
        self.breaker_open = False
        self.root_status: TerminalStatus | None = None
        self.root_text = ""
        self.budget_reported = False
        self.exit_code: ExitCode | None = None

    @property
    def running(self) -> bool:
        """Not draining, not stopped: triggers are armed."""
        return self.phase is Phase.RUNNING

    def may_start_work(self) -> bool:
        """A new turn or agent may start: running and the budget is not spent."""
        return self.phase is Phase.RUNNING and self._budget.spent() is None

    def begin_drain(self, now: float, grace: float) -> None:
        """The first signal. RUNNING -> DRAINING: no re-entry, agents get ``grace`` seconds."""
        if self.phase is not Phase.RUNNING:
            raise IllegalTransition(f"the run cannot start draining while {self.phase.value} (a reactor bug)")
        self.phase = Phase.DRAINING
        self.drain_deadline = now + grace
        self.reenter_at = None

    def force_exit(self) -> None:
        """The drain timed out or a second signal arrived: the run ends with exit 143."""
        if self.phase is not Phase.DRAINING:
            raise IllegalTransition(f"the run cannot be forced out while {self.phase.value} (a reactor bug)")
        self.forced_exit = ExitCode.DRAIN_TIMEOUT

    def stop(self, code: ExitCode) -> None:
        """The driver's exit predicate fired. RUNNING|DRAINING -> STOPPED."""
        if self.phase is Phase.STOPPED:
            raise IllegalTransition("the run stopped already (a reactor bug)")
        self.phase = Phase.STOPPED
        self.exit_code = code

    def record_fatal_infra(self, error: str) -> None:
        """A model call failed for good (bad key, unknown model): the run ends."""
        self.fatal_infra = error

    def record_required_failed(self, server: str, attempt: int, error: str | None) -> None:
        """A required server failed for good: the run ends with exit 6."""
        self.required_failed = server
        self.required_failed_error = (
            f"required server {server!r} could not be started or reconnected after {attempt} "
            f"attempts (last error: {error}); fix its command or URL, or drop `required` if agentd "
            "may run without it"
        )

    def open_breaker(self) -> None:
        """The restart intensity was exceeded: the run ends with exit 1."""
        self.breaker_open = True

    def record_root_terminal(self, status: TerminalStatus, text: str) -> None:
        """The root's turn (or process) ended with ``status``."""
        self.root_status = status
        self.root_text = text

    def schedule_reentry(self, at: float) -> None:
        """The root re-enters at ``at`` (a loop shift or a restart)."""
        self.reenter_at = at

    def reentry_due(self, now: float) -> bool:
        """Whether a re-entry is due at ``now``; a due one is taken (cleared)."""
        if self.reenter_at is not None and now >= self.reenter_at:
            self.reenter_at = None
            return True
        return False

    def report_budget(self) -> bool:
        """True the first time only: ``budget.exhausted`` is written once per run."""
        if self.budget_reported:
            return False
        self.budget_reported = True
        return True

    def view(self, now: float) -> modes.SupervisorView:
        """What the driver may read."""
        live = self._agents.live()
        return modes.SupervisorView(
            draining=self.phase is Phase.DRAINING,
            drain_timed_out=self.forced_exit is ExitCode.DRAIN_TIMEOUT,
            children_running=len(live),
            turns_running=sum(1 for a in live if a.busy),
            warm_sessions=sum(1 for a in live if a.warm),
            budget_spent=self._budget.spent(),
            deadline_reached=self._budget.deadline_reached(now),
            fatal_infra=self.fatal_infra is not None,
            required_server_failed=self.required_failed is not None,
            breaker_open=self.breaker_open,
            root_status=self.root_status,
            root_partial=bool(self.root_text.strip()),
        )

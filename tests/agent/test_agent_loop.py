"""The inner loop's per-turn step cap, with fakes at its two seams (a model and a supervisor link)."""

from __future__ import annotations

from agentd.agent.loop import NextTurn, RunState, ToolResult, UsageVerdict, run_turn
from agentd.models import Message, ModelReply, Prompt, ToolCall, ToolSpec, Usage


class _ToolsForever:
    """A model that asks for a (different) tool call every time."""

    provider = "fake"
    name = "forever"

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, prompt: Prompt) -> ModelReply:
        self.calls += 1
        call = ToolCall(id=f"c{self.calls}", name="t", arguments={"n": self.calls}, raw_arguments="{}")
        return ModelReply(text=f"step {self.calls}", tool_calls=[call], stop="tool_use", usage=Usage(1, 1))

    async def aclose(self) -> None:
        return None


class _Link:
    def __init__(self) -> None:
        self.tool_calls = 0

    async def call_tool(self, name: str, arguments: dict[str, object]) -> ToolResult:
        self.tool_calls += 1
        return ToolResult("ok")

    async def report_usage(self, **_: object) -> UsageVerdict:
        return UsageVerdict(proceed=True)

    async def turn_end(self, **_: object) -> NextTurn:
        return NextTurn(action="exit")

    def tool_refused(self, name: str) -> None:
        raise AssertionError(f"the model was offered {name!r}")


#: The one tool the fake model calls, offered to it (anything else is refused before the link).
TOOLS = [ToolSpec(name="t", description="a tool", input_schema={"type": "object"})]


async def test_a_turn_stops_exhausted_steps_at_the_cap_without_running_the_last_tools() -> None:
    model, link = _ToolsForever(), _Link()
    state = RunState(messages=[Message.user("go")])
    status = await run_turn(model, link, state, system=None, tools=TOOLS, max_turn_steps=5)
    assert status == "exhausted_steps"
    assert (model.calls, link.tool_calls) == (5, 4)
    assert state.last_text == "step 5"  # the partial result


async def test_the_cap_counts_per_turn() -> None:
    model, link = _ToolsForever(), _Link()
    state = RunState(messages=[Message.user("go")])
    for _ in range(3):
        assert (
            await run_turn(model, link, state, system=None, tools=TOOLS, max_turn_steps=2)
            == "exhausted_steps"
        )
    assert model.calls == 6


class _Recording(_ToolsForever):
    """The same model, keeping every prompt it was asked."""

    def __init__(self) -> None:
        super().__init__()
        self.prompts: list[Prompt] = []

    async def complete(self, prompt: Prompt) -> ModelReply:
        self.prompts.append(prompt)
        return await super().complete(prompt)


async def test_each_call_gets_the_system_the_tools_and_a_snapshot_of_the_transcript() -> None:
    model, link = _Recording(), _Link()
    state = RunState(messages=[Message.user("go")])
    await run_turn(model, link, state, system="sys", tools=TOOLS, max_turn_steps=2)
    first, second = model.prompts
    assert (first.system, list(first.tools), second.system) == ("sys", TOOLS, "sys")
    # The loop appended the reply and the tool result after the first call; its prompt kept what it was asked.
    assert [m.role for m in first.messages] == ["user"]
    assert [m.role for m in second.messages] == ["user", "assistant", "tool"]
    assert len(state.messages) == 4  # the second reply too (its tools not run: the cap)

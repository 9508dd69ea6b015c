"""What the supervisor keeps of an agent goes when the agent does (rfcs/0281).

The reactor, the hub and the tree, wired as the app wires them, run a few
hundred real agent children (forked from the real zygote, script model) off
one spawn route. Afterwards nothing is left of them but the bounded record:
the agent table, the tree's children, the hub's bindings and the reply
causes hold no exited agent.
"""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import trio

from agentd.core.exitcodes import ExitCode
from agentd.events import ResourceChanged, SignalReceived
from agentd.observe.streamjson import Causes
from agentd.selfmcp.protocol import SpawnPayload, ToolSpecFrame
from agentd.selfmcp.server import serve_child
from agentd.supervisor.children.tree import Tree
from agentd.supervisor.hub import SupervisorHub
from agentd.supervisor.loop.agents import RECENT_EXITED
from agentd.supervisor.loop.budget import Budget
from agentd.supervisor.loop.governor import RestartGovernor
from agentd.supervisor.loop.reactor import Agent, Reactor
from agentd.supervisor.toolpolicy import ToolPolicy, ToolRules
from agentd.triggers import mode as modes
from agentd.triggers.router import Router, RouteSpec, Spawn
from tests.support.agentd_proc import script
from tests.support.reactor import spawn_hooks
from tests.support.telemetry import RecordingTelemetry

#: Agents started: enough that a record per agent would show, few enough for a busy CI machine.
AGENTS = 200


@pytest.mark.slow
async def test_a_few_hundred_real_agents_leave_only_a_bounded_record(tmp_path: Path) -> None:
    telemetry = RecordingTelemetry(timeout=300)
    causes = Causes()
    telemetry.add_tap(causes.on_event)
    router = Router()
    router.add_route(
        RouteSpec(
            match="n://*", disposition=Spawn(max_inflight=8), debounce=0.0, route_id="n", queue_cap=AGENTS
        )
    )
    model = script(tmp_path, [{"text": "done"}])
    boxes: dict[str, SupervisorHub | Tree] = {}

    def spawn(agent: Agent) -> None:
        hub, tree = boxes["hub"], boxes["tree"]
        assert isinstance(hub, SupervisorHub)
        assert isinstance(tree, Tree)
        hub.bind(agent.id, agent.route)
        payload = SpawnPayload(
            agent=agent.id,
            model=model,
            instruction=agent.instruction,
            tools=tuple(ToolSpecFrame(**spec) for spec in hub.tool_specs(agent.id)),
        )
        tree.spawn(agent.id, payload)

    reactor = Reactor(
        driver=modes.Reactive(), router=router, budget=Budget(),
        governor=RestartGovernor(intensity=3, period=60.0), hooks=spawn_hooks(spawn),
        telemetry=telemetry, instruction="work", grace=30.0, mode="reactive", session="fresh",
    )  # fmt: skip
    # Route n's agents are not offered list_resources: a binding shows in an agent's catalog.
    policy = ToolPolicy(routes={"n": ToolRules.of(None, ["list_resources"])})
    hub = SupervisorHub(events=reactor.send, upstreams={}, telemetry=telemetry, policy=policy)

    async def serve_bound(agent: str, stream: trio.SocketStream) -> None:
        try:
            await serve_child(hub, agent, stream)
        finally:
            hub.release(agent)

    tree = Tree(events=reactor.send, serve_child=serve_bound, telemetry=telemetry)
    boxes.update(hub=hub, tree=tree)
    result: list[ExitCode] = []
    finished = trio.Event()
    async with trio.open_nursery() as nursery:
        await nursery.start(tree.run)

        async def run_reactor() -> None:
            result.append(await reactor.run())
            finished.set()

        nursery.start_soon(run_reactor)
        for n in range(AGENTS):
            await reactor.send.send(ResourceChanged(server="s", uri=f"n://{n}"))
        await telemetry.wait("subagent.exit", count=AGENTS)
        exits = telemetry.find("subagent.exit")
        assert {e["status"] for e in exits} == {"completed"}, exits[:3]
        agents = reactor.agents
        assert (len(agents), agents.started, agents.forgotten) == (0, AGENTS, AGENTS)
        assert len(agents.recent()) == RECENT_EXITED
        # The tree's records go once each exit is reported; the hub's bindings and the causes too.
        assert tree.children == {}
        assert all(hub.offers(f"a{n}", "list_resources") for n in range(1, AGENTS + 1))  # no binding left
        assert len(causes) == 0
        await reactor.send.send(SignalReceived(signum=signal.SIGTERM))
        with trio.fail_after(60):
            await finished.wait()
        nursery.cancel_scope.cancel()
    assert result == [ExitCode.OK]

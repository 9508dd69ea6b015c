"""The reactor loop and its parts: one trio task that owns the run's state.

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`~agentd.supervisor.loop.reactor`       the loop over the parts below.
* :mod:`~agentd.supervisor.loop.delivery`      a resource change into the router, due deliveries out.
* :mod:`~agentd.supervisor.loop.turns`         what agents report: turn ends, exits, the root's disposition.
* :mod:`~agentd.supervisor.loop.drain`         the drain a signal starts; reaping every agent.
* :mod:`~agentd.supervisor.loop.notices`       watch and staged-route notices into sessions or agents.
* :mod:`~agentd.supervisor.loop.readiness`     whether agentd is ready.
* :mod:`~agentd.supervisor.loop.usage`         a model call's usage: charge the budget, say whether to go on.
* :mod:`~agentd.supervisor.loop.subagents`     agents that start agents: their records, caps, limits, ends.
* :mod:`~agentd.supervisor.loop.runstatus`     the process phase and the facts the exit is decided on.
* :mod:`~agentd.supervisor.loop.selftools`     ``subscribe``, ``unsubscribe`` and the watch routes.
* :mod:`~agentd.supervisor.loop.spawner`       start an agent, give a session its next turn.
* :mod:`~agentd.supervisor.loop.seams`         what the reactor is given: the I/O hooks, the phase.
* :mod:`~agentd.supervisor.loop.agents`        the agent table (pure).
* :mod:`~agentd.supervisor.loop.backpressure`  the ``block`` overflow: pause and resume feeding servers.
* :mod:`~agentd.supervisor.loop.budget`        the tree-wide budget (pure).
* :mod:`~agentd.supervisor.loop.governor`      the restart governor (pure).
"""

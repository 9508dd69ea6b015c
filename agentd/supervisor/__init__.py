"""The supervisor: one process that holds the servers, routes their changes and runs the agents.

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`agentd.supervisor.app`           wiring: settings in, exit code out.
* :mod:`agentd.supervisor.checkconnect`  ``agentd check --connect``.
* :mod:`agentd.supervisor.statusview`    the status document (``GET /status``), read from the reactor.
* :mod:`agentd.supervisor.report`        the end of a run: the once result, the JSON summary, the error and its fix.
* :mod:`agentd.supervisor.runlog`        the run's telemetry, Python ``logging`` routed into it, model warnings.
* :mod:`agentd.supervisor.conversation`  a once run's conversation: what it continues, where its turn is saved.
* :mod:`agentd.supervisor.hub`           the supervisor's answers to its children's self-MCP requests.
* :mod:`agentd.supervisor.toolpolicy`    which tools an agent is offered.
* :mod:`agentd.supervisor.loop`          the reactor loop and its parts (one trio task).
* :mod:`agentd.supervisor.children`      the child processes: tree, control channel, zygote client.
* :mod:`agentd.supervisor.routing`       subscriptions and routes: what agentd wants from whom.
"""

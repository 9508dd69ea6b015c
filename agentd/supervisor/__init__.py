"""The supervisor: one process that holds the servers, routes their changes and runs the agents.

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`agentd.supervisor.app`           wiring: settings in, exit code out.
* :mod:`agentd.supervisor.checkconnect`  ``agentd check --connect``.
* :mod:`agentd.supervisor.statusview`    the status document (``GET /status``), read from the reactor.
* :mod:`agentd.supervisor.hub`           the supervisor's answers to its children's self-MCP requests.
* :mod:`agentd.supervisor.toolpolicy`    which tools an agent is offered.
* :mod:`agentd.supervisor.loop`          the reactor loop and its parts (one trio task).
* :mod:`agentd.supervisor.children`      the child processes: zygote client, tree, control channel.
* :mod:`agentd.supervisor.routing`       subscriptions and routes: what agentd wants from whom.
"""

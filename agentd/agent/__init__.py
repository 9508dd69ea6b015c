"""The agent side: what runs in an agent's child process.

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`agentd.agent.prefork`     the prefork root forked before the heavy imports.
* :mod:`agentd.agent.zygote`      the zygote: warm imports, one fork per agent.
* :mod:`agentd.agent.child`       the child process entry: payload in, agent run, exit.
* :mod:`agentd.agent.loop`        the inner agentic loop: model call, tool calls, repeat.
* :mod:`agentd.agent.content`     what a tool result becomes for the model (images bounded).
* :mod:`agentd.agent.transcript`  transcript messages as data (frames, journal records).
"""

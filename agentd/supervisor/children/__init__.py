"""The child processes: every agent runs in one, spawned through one chokepoint.

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`~agentd.supervisor.children.tree`     the spawn chokepoint, the zygote client, the kill ladder.
* :mod:`~agentd.supervisor.children.channel`  the supervisor's end of one child's control channel.
"""

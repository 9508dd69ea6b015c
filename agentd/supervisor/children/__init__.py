"""The child processes: every agent runs in one, spawned through one chokepoint.

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`~agentd.supervisor.children.tree`     the spawn chokepoint, the children, the kill ladder.
* :mod:`~agentd.supervisor.children.channel`  the supervisor's end of one child's control channel.
* :mod:`~agentd.supervisor.children.zygote`   the zygote client: start one, ask it to fork, read what it says.
"""

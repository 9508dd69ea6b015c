"""Subscriptions and routes: what agentd wants from which server, and where a change goes.

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`~agentd.supervisor.routing.declared`       keeping the configured subscriptions subscribed.
* :mod:`~agentd.supervisor.routing.unmatched`      settings that match nothing, told before start (pure).
* :mod:`~agentd.supervisor.routing.routes`         from settings to the router and the timer source.
* :mod:`~agentd.supervisor.routing.sessionroutes`  the routes sessions make (``subscribe``, watches).
* :mod:`~agentd.supervisor.routing.subscriptions`  which subscriptions agentd wants and why (pure).
"""

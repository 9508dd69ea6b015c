"""Defaults and choices that a setting configures and a lower layer applies (upstream connections, caps).

The settings (:mod:`agentd.config`) and the upstream connections both import
them from here, so each is defined once and the upstream layer never imports
the settings. The caps on what a model may create (:data:`ModelLimit`,
rfcs/0265) are named here too, for the parts that hold them, ``/metrics``
and the settings alike. Also the process's open-files limit, raised at every start
(:func:`raise_open_files_limit`; here rather than in :mod:`agentd.observe.health`, so
a run without probes does not import the HTTP and metrics stack for it).
"""

from __future__ import annotations

import resource
from typing import Literal, get_args

TokenAuthMethod = Literal["client_secret_basic", "client_secret_post"]
"""How an OAuth client authenticates at the token endpoint (``token_endpoint_auth_method``)."""

#: Default cap on one resource read: large enough for any sane state
#: document, small enough that a runaway resource cannot balloon memory.
DEFAULT_MAX_READ_BYTES = 8 * 1024 * 1024

#: Self-subscriptions (the model's ``subscribe``) one session may hold at once
#: (``max_self_subscriptions_per_session``): far more than a task that reads
#: its resources one by one needs, few enough that one runaway reply (a loop
#: of ``subscribe`` calls) cannot take a large share of the total (rfcs/0265).
DEFAULT_MAX_SELF_SUBSCRIPTIONS_PER_SESSION = 64

#: Self-subscriptions all sessions together may hold (``max_self_subscriptions``):
#: each is a route and an upstream subscription; 1,024 is what a server built on
#: the Python SDK accepts as listen streams on one connection (rfcs/0265).
DEFAULT_MAX_SELF_SUBSCRIPTIONS = 1024

#: How deep agents may start agents (``max_depth``; roots are depth 0, rfcs/0370): a root
#: that delegates to workers which may delegate once more covers the plans seen in
#: practice (planner, worker, helper); each level multiplies the processes and the
#: spend a single reply can set going, so deeper trees are the operator's choice.
DEFAULT_MAX_DEPTH = 2

#: Children one agent may have running at once (``max_children``, rfcs/0370): enough
#: for a fan-out over a handful of parts; every child is a process, so a reply that
#: asks for fifty gets a tool error instead of fifty processes.
DEFAULT_MAX_CHILDREN = 8

#: Agents started by agents that may run at once in all (``max_agents``, rfcs/0370):
#: the default depth and fan-out allow 8 + 8 x 8 = 72; 64 keeps the process count of
#: one agentd well inside a container's pid and memory limits.
DEFAULT_MAX_AGENTS = 64

ModelLimit = Literal[
    "max_self_subscriptions_per_session",
    "max_self_subscriptions",
    "watches.max_watches",
    "watches.max_watches_total",
    "max_children",
    "max_agents",
]
"""A cap on what a model may create, named as its setting (rfcs/0265, rfcs/0370): the label of
``agentd_limit_refusals_total`` and the ``limit`` of ``limit.reached``."""

MODEL_LIMITS: tuple[ModelLimit, ...] = get_args(ModelLimit)

#: Seconds one upstream tool call may take (``tool_timeout``; per server ``timeout``).
DEFAULT_TOOL_TIMEOUT = 30.0

#: Seconds for a server's start + handshake + first catalog fetch (per server ``startup_timeout``).
DEFAULT_STARTUP_TIMEOUT = 15.0


def raise_open_files_limit() -> tuple[int, int]:
    """Raise this process's soft ``RLIMIT_NOFILE`` to its hard limit; return ``(before, after)``.

    A daemon that any client can open connections to needs file descriptors
    to spare: with the common soft limit of 1,024 a flood of idle connections
    would exhaust them, and then no probe, child socket or server pipe could
    be opened. Raising the soft limit up to the hard one needs no privilege.
    Children inherit the raised limit. If the kernel refuses, the limit is
    left as it was (``before == after``).
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard
    if hard == resource.RLIM_INFINITY:
        # "unlimited" is capped by the kernel's nr_open; ask for a large, always-valid value.
        target = 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            return soft, soft
        return soft, target
    return soft, soft

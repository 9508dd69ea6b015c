"""Optional lists and the silent probe, at the component level (rfcs/0378).

:class:`agentd.upstream.Upstream` against ``tests/mcpservers/partial_server.py``
(standard library only, so it starts in milliseconds): a list the server does
not implement is empty and not asked again on the connection, an optional one
that is not answered is given up after its bound, and a server that is slow to
start is never taken for one that ignores the probe. The same cases through the
real command are the fault catalog's OL1–OL4 and V4.
"""

from __future__ import annotations

import sys

import trio

from agentd.events import ServerState
from agentd.upstream.catalog import OPTIONAL_LIST_TIMEOUT
from agentd.upstream.stdio import PROBE_SILENCE
from tests.mcpservers.helpers import running_upstream
from tests.support.agentd_proc import REPO
from tests.support.telemetry import RecordingTelemetry
from tests.support.watch import Spec

PARTIAL_SERVER = REPO / "tests/mcpservers/partial_server.py"


def partial(*knobs: str, protocol: str = "auto") -> Spec:
    return Spec(name="partial", command=sys.executable, args=[str(PARTIAL_SERVER), *knobs], protocol=protocol)


async def test_templates_not_implemented_are_empty_and_not_asked_again_on_the_connection() -> None:
    telemetry = RecordingTelemetry()
    async with running_upstream(partial(), telemetry=telemetry) as (up, _events):
        assert up.templates == []
        assert [str(r.uri) for r in up.resources] == ["note://alpha"]
        assert await up.list_resource_templates() == []
        assert [r.name for r in await up.list_resources()] == ["alpha"]
    [skipped] = telemetry.fields("upstream.list_skipped")
    assert skipped == {
        "server": "partial",
        "method": "resources/templates/list",
        "reason": "the server does not implement it (-32601 Method not found)",
    }


async def test_templates_never_answered_cost_their_bound_once_per_connection() -> None:
    telemetry = RecordingTelemetry()
    bound = 0.5  # the request timeout, below OPTIONAL_LIST_TIMEOUT: the optional list's bound is the lower
    assert bound < OPTIONAL_LIST_TIMEOUT
    spec = partial("--drop", "resources/templates/list", protocol="2024-11-05")
    async with running_upstream(spec, telemetry=telemetry, request_timeout=bound) as (up, _events):
        assert up.state is ServerState.CONNECTED
        assert up.templates == []
        t0 = trio.current_time()
        assert await up.list_resource_templates() == []
        assert trio.current_time() - t0 < bound  # not asked again: no second wait
    [skipped] = telemetry.fields("upstream.list_skipped")
    assert skipped["reason"] == f"no answer within {bound:g}s; not asked again on this connection"


async def test_a_server_slow_to_read_its_stdin_is_not_taken_for_one_that_ignores_the_probe() -> None:
    telemetry = RecordingTelemetry()
    # It reads nothing for twice the silence bound, then answers the probe (with an error).
    spec = partial("--sleep", str(2 * PROBE_SILENCE))
    async with running_upstream(spec, telemetry=telemetry) as (up, _events):
        assert up.negotiated is not None
        assert up.negotiated.probe == "refused"
    assert telemetry.find("upstream.fallback") == []

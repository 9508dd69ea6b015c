"""From settings to the router and clock: declared routes, default routes, the timer source.

Pure construction, no I/O: turns :class:`agentd.config.RouteConfig` entries
into :class:`agentd.triggers.router.RouteSpec` and adds the default route for
every declared subscription that no declared route matches (spawn in
reactive and schedule, continue into the root session in a warm loop).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from agentd.triggers.glob import is_glob
from agentd.triggers.router import (
    DEFAULT_TEMPLATE,
    Continue,
    Router,
    RouteSpec,
    Spawn,
    default_route_for,
)
from agentd.triggers.timer import CronSource, IntervalSource

#: The session name of the root agent in ``loop --session warm``.
ROOT_SESSION = "root"


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def spawn_template(route_template: str | None, instruction: str | None) -> str:
    """A spawn route's instruction template: the route's own, else the main instruction plus the event."""
    if route_template is not None:
        return route_template
    if instruction:
        return f"{_escape(instruction)}\n\n{DEFAULT_TEMPLATE}"
    return DEFAULT_TEMPLATE


def route_specs(settings: Any) -> list[RouteSpec]:
    """The declared routes, in declaration order, as router specs."""
    specs: list[RouteSpec] = []
    for rc in settings.routes:
        if rc.disposition == "spawn":
            disposition: Spawn | Continue = Spawn(
                max_inflight=rc.max_inflight or 4, template=spawn_template(rc.template, settings.instruction)
            )
        else:
            disposition = Continue(session=rc.session or ROOT_SESSION)
        specs.append(
            RouteSpec(
                match=rc.match or "",
                disposition=disposition,
                debounce=rc.debounce,
                max_wait=rc.max_wait,
                queue_cap=rc.queue_cap,
                overflow=rc.overflow,
                route_id=rc.name,
                timer=rc.timer,
            )
        )
    return specs


def build_router(settings: Any) -> Router:
    """The router with declared routes plus default routes for unrouted subscriptions."""
    router = Router()
    for spec in route_specs(settings):
        router.add_route(spec)
    warm_loop = settings.mode == "loop" and settings.session == "warm"
    for sub in settings.subscriptions:
        uri = sub.uri
        if is_glob(uri):
            covered = any(r.match == uri for r in settings.routes)
            if not covered:
                disposition: Spawn | Continue = (
                    Continue(ROOT_SESSION) if warm_loop else Spawn(template=spawn_template(None, settings.instruction))
                )
                router.add_route(RouteSpec(match=uri, disposition=disposition))
            continue
        if router.first_match(uri) is not None:
            continue
        spec = default_route_for(uri, settings.mode, ROOT_SESSION if warm_loop else None)
        if isinstance(spec.disposition, Spawn):
            spec = RouteSpec(
                match=uri, disposition=Spawn(template=spawn_template(None, settings.instruction)), exact=True
            )
        router.add_route(spec)
    return router


def make_clock(settings: Any, *, now: float) -> IntervalSource | CronSource | None:
    """The clock source that feeds the reactive timer route (schedule's lives in its driver)."""
    if settings.mode != "reactive":
        return None
    if settings.cron:
        return CronSource(settings.cron, now_mono=now, now_wall=_dt.datetime.now(_dt.UTC))
    if settings.interval:
        return IntervalSource(settings.interval, start=now + settings.interval)
    return None

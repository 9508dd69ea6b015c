"""From settings to the router and clock: declared routes, default routes, the timer source.

Pure construction, no I/O: turns :class:`agentd.config.RouteConfig` entries
into :class:`agentd.triggers.router.RouteSpec` and adds the default route for
every declared subscription that no declared route matches (spawn in
reactive and schedule, continue into the root session in a warm loop).

A declared route with ``extract`` (or ``on_event``) is *staged*
(rfcs/0078): the router still matches, debounces and queues its changes, but
delivers them to a pseudo-session ``stage:<route id>`` that the reactor hands
to the watch manager; the route's real disposition (:class:`StagedRoute`)
applies to the stage's notices.
"""

from __future__ import annotations

import datetime as _dt
from collections.abc import Callable
from dataclasses import dataclass, replace

from agentd.config import RouteConfig, Settings, route_model_settings
from agentd.core.errors import ConfigError
from agentd.triggers.glob import compile_glob
from agentd.triggers.router import (
    DEFAULT_TEMPLATE,
    DEFAULT_TIMER_TEMPLATE,
    Continue,
    DropReason,
    Router,
    RouteSpec,
    Spawn,
    default_route_for,
    validate_template,
)
from agentd.triggers.timer import CronSource, IntervalSource
from agentd.watches.stage import StagedRoute

#: The session name of the root agent in ``loop --session warm``.
ROOT_SESSION = "root"


def _escape(text: str) -> str:
    return text.replace("{", "{{").replace("}", "}}")


def spawn_template(route_template: str | None, instruction: str | None, *, timer: bool = False) -> str:
    """A spawn route's instruction template: the route's own, else the main instruction plus the event.

    A timer route's fire carries no resource: without a template of its own it
    runs the main instruction as is (or says that a scheduled run started).
    """
    if route_template is not None:
        return route_template
    if timer:
        return _escape(instruction) if instruction else DEFAULT_TIMER_TEMPLATE
    if instruction:
        return f"{_escape(instruction)}\n\n{DEFAULT_TEMPLATE}"
    return DEFAULT_TEMPLATE


@dataclass(frozen=True, slots=True)
class ModelProfile:
    """What an agent runs: the model spec, the system prompt and the model settings (rfcs/0171).

    Attributes:
        model: The model spec.
        system: The system prompt, if any.
        model_settings: The settings as the spawn payload carries them
            (:meth:`agentd.models.ModelSettings.given`).
    """

    model: str
    system: str | None
    model_settings: dict[str, object]


def model_profiles(settings: Settings) -> tuple[ModelProfile, dict[str, ModelProfile]]:
    """The supervisor's profile, and the profile of every declared route that names its own.

    A route's profile: its ``model`` (else the supervisor's), its ``system``
    (else the supervisor's) and its settings merged over the supervisor's
    (:func:`agentd.config.route_model_settings`). Keyed by route id; agents of
    other routes, roots, self-subscriptions and watches run the supervisor's.
    """
    model = settings.model
    if model is None:  # the settings' validation refuses this before anything runs
        raise ConfigError("model", None, "choose a model with --model or AGENTD_MODEL")
    default = ModelProfile(
        model=model,
        system=settings.system,
        model_settings=settings.model_settings.to_model_settings().given(),
    )
    by_route: dict[str, ModelProfile] = {}
    for i, rc in enumerate(settings.routes):
        if rc.model is None and rc.system is None and rc.model_settings is None:
            continue
        by_route[_route_id(rc, i)] = ModelProfile(
            model=rc.model or model,
            system=rc.system if rc.system is not None else settings.system,
            model_settings=route_model_settings(settings, rc).given(),
        )
    return default, by_route


def _route_id(rc: RouteConfig, index: int) -> str:
    # The router numbers unnamed declared routes r0, r1, ... in this order too.
    return str(rc.name) if rc.name is not None else f"r{index}"


def staged_routes(settings: Settings) -> list[StagedRoute]:
    """The declared routes that carry ``extract`` (``on_event`` implies it), in order.

    Raises:
        ValueError: a spawn route's template is not valid (names the fix).
    """
    out: list[StagedRoute] = []
    for i, rc in enumerate(settings.routes):
        extract = getattr(rc, "extract", None)
        if extract is None or rc.timer:
            continue
        if rc.template is not None:
            validate_template(rc.template)
        out.append(
            StagedRoute(
                route_id=_route_id(rc, i),
                index=i,
                match=rc.match or "",
                disposition="continue" if rc.disposition == "continue" else "spawn",
                extract=extract,
                on_event=rc.on_event,
                session=rc.session or ROOT_SESSION,
                max_inflight=rc.max_inflight or 4,
                template=rc.template,
            )
        )
    return out


def route_specs(settings: Settings) -> list[RouteSpec]:
    """The declared routes, in declaration order, as router specs.

    A staged route (:func:`staged_routes`) becomes a continue route into its
    pseudo-session with the same match, debounce and queue settings.
    """
    specs: list[RouteSpec] = []
    staged = {s.index: s for s in staged_routes(settings)}
    for i, rc in enumerate(settings.routes):
        stage = staged.get(i)
        disposition: Spawn | Continue
        if stage is not None:
            disposition = Continue(session=stage.router_session)
        elif rc.disposition == "spawn":
            disposition = Spawn(
                max_inflight=rc.max_inflight or 4,
                template=spawn_template(rc.template, settings.instruction, timer=rc.timer),
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
                route_id=rc.name if stage is None else stage.route_id,
                timer=rc.timer,  # never a staged route's: a timer route has nothing to extract
                reread_on_start=rc.reread_on_start,
                kind="declared" if stage is None else "stage",
            )
        )
    return specs


def added_route_id(uri: str) -> str:
    """The id of the route agentd adds for subscription ``uri`` (when no route is declared)."""
    return f"added:{uri}"


def routes_declared(settings: Settings) -> bool:
    """Whether the configuration declares a route for resource changes (the timer route is not one)."""
    return any(not r.timer for r in settings.routes)


def build_router(settings: Settings, *, on_drop: Callable[[DropReason, int], None] | None = None) -> Router:
    """The router with the declared routes; with none declared, a route agentd adds per subscription.

    The user's routes are the routes (ARCHITECTURE decision 22): where the
    configuration declares one, agentd adds none, and a change no declared
    route matches is unrouted (counted, logged, dropped; ``agentd check`` and
    the start-up findings say which subscriptions no route covers). A route
    agentd adds has kind ``added`` and id ``added:<uri>``.

    Args:
        settings: the validated settings.
        on_drop: told of every lost change (the run's counter set).
    """
    router = Router(on_drop=on_drop)
    for spec in route_specs(settings):
        router.add_route(spec)
    if routes_declared(settings):
        return router
    warm_loop = settings.mode == "loop" and settings.session == "warm"
    for sub in settings.subscriptions:
        uri = sub.uri
        glob = compile_glob(uri)
        if not glob.exact:
            if router.get(added_route_id(uri)) is None:
                disposition: Spawn | Continue = (
                    Continue(ROOT_SESSION)
                    if warm_loop
                    else Spawn(template=spawn_template(None, settings.instruction))
                )
                router.add_route(
                    RouteSpec(match=uri, disposition=disposition, route_id=added_route_id(uri), kind="added")
                )
            continue
        uri = (
            glob.literal
        )  # a literal '?' may be escaped (rfcs/0010); the default route is for the URI itself
        if router.first_match(uri) is not None:
            continue
        spec = replace(
            default_route_for(uri, settings.mode, ROOT_SESSION if warm_loop else None),
            route_id=added_route_id(uri),
        )
        if isinstance(spec.disposition, Spawn):
            spec = replace(spec, disposition=Spawn(template=spawn_template(None, settings.instruction)))
        router.add_route(spec)
    return router


def make_clock(settings: Settings, *, now: float) -> IntervalSource | CronSource | None:
    """The clock source that feeds the reactive timer route (schedule's lives in its driver)."""
    if settings.mode != "reactive":
        return None
    if settings.cron:
        return CronSource(settings.cron, now_mono=now, now_wall=_dt.datetime.now(_dt.UTC))
    if settings.interval:
        return IntervalSource(settings.interval, start=now + settings.interval)
    return None

"""The rules between settings: per mode, timers, routes, and the model each route runs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from agentd.config._models import RouteConfig
from agentd.config._problems import _Problem
from agentd.config._values import _model_error, _provider_configs
from agentd.config._vocab import MODEL_FORMS

if TYPE_CHECKING:
    from agentd.config._settings import Settings
    from agentd.models import ModelSettings


def run_needs(settings: Settings) -> list[_Problem]:
    """What a run needs that ``agentd check`` may go without: a model, and the instruction its mode needs."""
    problems: list[_Problem] = []
    mode = settings.mode
    if settings.model is None:
        problems.append(
            _Problem(("model",), None, f"choose a model with --model or AGENTD_MODEL: {MODEL_FORMS}")
        )
    needs_instruction = (
        mode != "reactive" or not settings.routes or any(r.template is None for r in settings.routes)
    )
    if needs_instruction and (settings.instruction is None or not settings.instruction.strip()):
        if mode == "reactive":
            fix = "give the instruction (argument, --instruction TEXT or @FILE), or a template on every route"
        else:
            fix = f"--mode {mode} needs an instruction: pass it as the argument, --instruction TEXT or --instruction @FILE"
        problems.append(_Problem(("instruction",), settings.instruction, fix))
    return problems


def cross_field_problems(
    settings: Settings, env: Mapping[str, str], *, run_inputs: bool = True
) -> list[_Problem]:
    """The rules between settings (per mode, timers, routes, model): every problem, none raised.

    ``run_inputs=False`` (``agentd check``) leaves out :func:`run_needs`: a
    server file or a route table can be checked before a model and a task
    are chosen.
    """
    problems: list[_Problem] = run_needs(settings) if run_inputs else []
    add = problems.append
    mode = settings.mode
    timer_routes = [i for i, r in enumerate(settings.routes) if r.timer]
    has_timer = settings.interval is not None or settings.cron is not None

    if settings.model is not None:
        err = _model_error(settings.model, env, settings.providers)
        if err is not None:
            add(_Problem(("model",), err.value, err.fix))
        else:
            from agentd.models import settings_problems

            for p in settings_problems(
                settings.model,
                settings.model_settings.to_model_settings(),
                _provider_configs(settings.providers),
            ):
                add(_Problem(("model_settings", *p.key.split(".")), p.value, p.fix))
    problems += _route_model_problems(settings, env)

    problems += _conversation_problems(settings)

    if settings.shard is not None and mode != "reactive":
        add(
            _Problem(
                ("shard",),
                settings.shard,
                f"--mode {mode} runs its own root on every replica; shard a --mode reactive daemon, "
                "or remove --shard",
            )
        )

    if settings.session == "warm" and mode in ("once", "reactive"):
        add(
            _Problem(
                ("session",),
                settings.session,
                "a once run has one root and no sessions: remove it"
                if mode == "once"
                else "reactive sessions are set per route: deliver into a warm session with a continue "
                "route (--route 'MATCH=continue:NAME'), and remove session",
            )
        )
    seen_ids: dict[str, int] = {}
    for i, r in enumerate(settings.routes):
        rid = r.name if r.name is not None else f"r{i}"
        if rid in seen_ids:
            add(
                _Problem(
                    ("routes", i, "name"),
                    rid,
                    f"route id {rid!r} is already used by routes[{seen_ids[rid]}] (unnamed routes are "
                    "r0, r1, ... in order); give each route a unique name",
                )
            )
        else:
            seen_ids[rid] = i

    if mode == "once":
        if settings.interval is not None:
            add(_Problem(("interval",), settings.interval, _once_timer_fix("--interval")))
        if settings.cron is not None:
            add(_Problem(("cron",), settings.cron, _once_timer_fix("--cron")))
    elif mode == "loop":
        if settings.cron is not None:
            add(
                _Problem(
                    ("cron",),
                    settings.cron,
                    "cron fires belong to --mode schedule (or reactive); loop uses --interval",
                )
            )
    else:
        if settings.interval is not None and settings.cron is not None:
            add(
                _Problem(
                    ("cron",),
                    settings.cron,
                    f"--mode {mode} takes --interval or --cron, not both; remove one",
                )
            )
        if settings.interval == 0:
            add(
                _Problem(
                    ("interval",),
                    settings.interval,
                    f"--mode {mode} needs an interval > 0 (only loop re-enters immediately with 0)",
                )
            )
    if mode == "schedule":
        if not has_timer:
            add(_Problem(("mode",), mode, "--mode schedule needs --interval DURATION or --cron 'EXPR'"))
        if settings.session == "warm":
            add(
                _Problem(
                    ("session",),
                    "warm",
                    "schedule runs a fresh root per fire; use --mode loop --session warm to keep a session",
                )
            )
    if len(timer_routes) > 1:
        add(
            _Problem(
                ("routes", timer_routes[1], "timer"),
                True,
                f"only one route may take the timer (routes {timer_routes} set timer = true); keep one",
            )
        )
    if mode == "reactive" and has_timer and not timer_routes:
        add(
            _Problem(
                ("interval",) if settings.interval is not None else ("cron",),
                settings.interval if settings.interval is not None else settings.cron,
                "in reactive mode a timer needs a route with timer = true (or --route '@timer=spawn')",
            )
        )
    if timer_routes and not has_timer:
        add(
            _Problem(
                ("routes", timer_routes[0], "timer"),
                True,
                "a timer route needs --interval or --cron; add one or remove timer = true",
            )
        )

    for i, sub in enumerate(settings.subscriptions):
        if sub.server is not None and sub.server not in settings.servers:
            add(
                _Problem(
                    ("subscriptions", i),
                    f"{sub.server}:{sub.uri}",
                    f"no server named {sub.server!r}; define it (known: {sorted(settings.servers) or 'none'})",
                )
            )

    if (
        settings.health_addr is not None
        and settings.health_addr == settings.metrics_addr
        and not settings.health_addr.endswith(":0")
    ):
        add(
            _Problem(
                ("metrics_addr",),
                settings.metrics_addr,
                "health and metrics cannot share one address; pick another port",
            )
        )
    if settings.state_dir is not None and settings.watch_state is None:
        # The watch state defaults to a file in the state directory: refused now, like --watch-state.
        from agentd.state.dir import WATCH_STATE_NAME
        from agentd.watches.state import refusal

        default = settings.state_dir / WATCH_STATE_NAME
        why = refusal(default, own_dir=True)
        if why is not None:
            add(
                _Problem(
                    ("state_dir",), str(settings.state_dir), f"its watch-state file {str(default)!r} {why}"
                )
            )
    return problems


def _conversation_problems(settings: Settings) -> list[_Problem]:
    """``--continue`` / ``--resume`` / ``--ephemeral`` (once runs only) and ``-q`` against ``-v``."""
    problems: list[_Problem] = []
    mode = settings.mode
    if settings.resume is not None and settings.continue_conversation:
        problems.append(
            _Problem(
                ("continue_conversation",),
                True,
                "give --continue (the conversation saved last) or --resume ID (that one), not both",
            )
        )
    if mode != "once":
        for field, value, flag in (
            ("continue_conversation", settings.continue_conversation, "--continue"),
            ("resume", settings.resume, "--resume"),
            ("ephemeral", settings.ephemeral, "--ephemeral"),
        ):
            if value:
                problems.append(
                    _Problem(
                        (field,),
                        value,
                        f"{flag} is for --mode once (its conversation); a {mode} daemon keeps its sessions "
                        "with --state-dir and continue routes: remove it",
                    )
                )
    if settings.quiet and (settings.verbose or settings.log_level is not None):
        problems.append(
            _Problem(
                ("quiet",),
                True,
                "-q shows only the answer and errors; it cannot go with -v/--verbose or --log-level: give one",
            )
        )
    return problems


def route_model_settings(settings: Settings, route: RouteConfig) -> ModelSettings:
    """The model settings of the agents ``route`` starts (an :class:`agentd.models.ModelSettings`).

    The supervisor's settings, less those the route's model cannot carry
    (when the route names another model), with the route's own merged over
    them key by key. The route's model spec must be valid.
    """
    from agentd.models import ModelSettings, wire_api

    top = settings.model_settings.to_model_settings()
    own = route.model_settings.to_model_settings() if route.model_settings is not None else ModelSettings()
    model = route.model or settings.model
    if route.model is not None and model is not None:
        top = top.for_api(wire_api(model, _provider_configs(settings.providers)))
    return top.merged(own)


def _route_model_problems(settings: Settings, env: Mapping[str, str]) -> list[_Problem]:
    """Per-route models: valid specs, settings that fit them, one model per continue session."""
    from agentd.models import settings_problems

    problems: list[_Problem] = []
    if settings.model is None:
        return problems
    sessions: dict[str, tuple[int, tuple[object, ...]]] = {}
    for i, route in enumerate(settings.routes):
        model = route.model or settings.model
        if route.model is not None:
            err = _model_error(route.model, env, settings.providers)
            if err is not None:
                problems.append(_Problem(("routes", i, "model"), err.value, err.fix))
                continue
        if route.model is None and route.model_settings is None and route.system is None:
            profile: tuple[object, ...] = ()
        else:
            effective = route_model_settings(settings, route)
            own = route.model_settings.to_model_settings().given() if route.model_settings is not None else {}
            for p in settings_problems(model, effective, _provider_configs(settings.providers)):
                # Inherited keys the route's API cannot carry were left out; an inherited key
                # can still clash with the route's own (a temperature with a thinking budget).
                inherited = (
                    "" if p.key.split(".")[0] in own else " (inherited from the top-level [model_settings])"
                )
                problems.append(
                    _Problem(("routes", i, "model_settings", *p.key.split(".")), p.value, p.fix + inherited)
                )
            profile = (model, route.system, tuple(sorted(str(kv) for kv in effective.given().items())))
        if route.disposition != "continue" or route.timer:
            continue
        # Every delivery of a continue session goes to one child, which runs one model:
        # routes sharing a session must agree on it (the root session runs the supervisor's).
        session = route.session or "root"
        if session == "root" and settings.mode in ("once", "loop", "schedule") and profile:
            problems.append(
                _Problem(
                    ("routes", i, "model" if route.model is not None else "model_settings"),
                    route.model or route.model_settings,
                    "this route delivers into the root session, which runs the supervisor's model and settings; "
                    "name another session, or set them at the top level",
                )
            )
            continue
        seen = sessions.setdefault(session, (i, profile))
        if seen[1] != profile:
            problems.append(
                _Problem(
                    ("routes", i, "session"),
                    session,
                    f"routes[{seen[0]}] delivers into the same session with another model, system prompt or "
                    "model settings; one session runs one model: give them the same ones, or separate sessions",
                )
            )
    return problems


def _once_timer_fix(flag: str) -> str:
    modes = (
        "--mode schedule (a fresh root per fire) or --mode reactive with an '@timer' route"
        if flag == "--cron"
        else "--mode loop, --mode schedule, or --mode reactive with an '@timer' route"
    )
    return f"{flag} does not apply to --mode once; use {modes}, or run --mode once from a Kubernetes CronJob"

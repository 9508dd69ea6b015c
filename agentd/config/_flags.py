"""Command-line values that are small languages of their own: ``--route`` and ``--subscribe``."""

from __future__ import annotations

import difflib
import re

from agentd.config._vocab import (
    _OPTION_RE,
    _SCHEME_RE,
    _SESSION_NAME_RE,
    ROUTE_FLAG_KEYS,
    ROUTE_FORMS,
    SERVER_NAME_RE,
)
from agentd.core.errors import ConfigError


def _disposition(text: str, match: str, disposition: str) -> dict[str, object]:
    """``spawn[:N]`` / ``continue[:SESSION]`` after MATCH; raises ConfigError naming ``text``."""
    kind, sep, arg = disposition.strip().partition(":")
    out: dict[str, object] = {"timer": True} if match == "@timer" else {"match": match}
    if kind == "spawn":
        out["disposition"] = "spawn"
        if sep:
            if not re.fullmatch(r"[0-9]{1,6}", arg) or int(arg) < 1:
                raise ConfigError(
                    "--route", text, "MAX_INFLIGHT after spawn: is a whole number ≥ 1, e.g. spawn:4"
                )
            out["max_inflight"] = int(arg)
    elif kind == "continue":
        out["disposition"] = "continue"
        if sep:
            if not _SESSION_NAME_RE.fullmatch(arg):
                raise ConfigError(
                    "--route", text, "SESSION after continue: is 1-64 letters, digits, '.', '_' or '-'"
                )
            out["session"] = arg
    else:
        raise ConfigError(
            "--route", text, f"unknown disposition {kind!r}: use spawn[:MAX_INFLIGHT] or continue[:SESSION]"
        )
    return out


def _is_disposition(text: str) -> bool:
    kind = text.strip().partition(":")[0]
    return kind in ("spawn", "continue")


def parse_route_spec(text: str) -> dict[str, object]:
    """Parse a ``--route`` value into :class:`RouteConfig` fields.

    Forms: ``MATCH=spawn``, ``MATCH=spawn:MAX_INFLIGHT``, ``MATCH=continue``,
    ``MATCH=continue:SESSION``, each optionally followed by ``,KEY=VALUE``
    settings (:data:`ROUTE_FLAG_KEYS`: ``debounce``, ``max_wait``,
    ``overflow`` …), e.g. ``'memo://*=spawn:2,debounce=50ms,overflow=block'``.
    MATCH may itself contain ``=`` and ``,`` (a query string): the
    disposition is the first ``=spawn``/``=continue`` after which only
    ``KEY=VALUE`` pieces follow. ``@timer`` as MATCH declares the timer route.

    Raises:
        ConfigError: setting ``--route``, the text, and the accepted forms.
    """
    if not isinstance(text, str) or "=" not in text:
        raise ConfigError("--route", text, f"write {ROUTE_FORMS}")
    pieces = text.split(",")
    for k in range(1, len(pieces) + 1):
        base, rest = ",".join(pieces[:k]), pieces[k:]
        match, eq, disposition = base.rpartition("=")
        if not eq or not _is_disposition(disposition):
            continue
        if not all(_OPTION_RE.match(p) for p in rest):
            continue
        break
    else:
        # No recognisable disposition: report it as the old single form would.
        match, _, disposition = text.rpartition("=")
        rest = []
    match = match.strip()
    if not match:
        raise ConfigError("--route", text, f"the MATCH before '=' is empty; write {ROUTE_FORMS}")
    out = _disposition(text, match, disposition)
    for piece in rest:
        m = _OPTION_RE.match(piece)
        assert m is not None
        key, value = m.group(1), m.group(2).strip()
        if key not in ROUTE_FLAG_KEYS:
            close = difflib.get_close_matches(key, ROUTE_FLAG_KEYS, n=1)
            hint = f"did you mean {close[0]!r}? " if close else ""
            raise ConfigError(
                "--route",
                text,
                f"unknown route setting {key!r}; {hint}--route takes {', '.join(ROUTE_FLAG_KEYS)} "
                "(other settings need a [[routes]] table in the config file)",
            )
        if key in out:
            raise ConfigError("--route", text, f"{key} is given twice; keep one")
        out[key] = value
    return out


def parse_subscription(text: str, servers: set[str] | frozenset[str] = frozenset()) -> dict[str, str | None]:
    """Parse ``[SERVER:]URI`` into :class:`SubscriptionSpec` fields.

    URIs contain colons, so a ``SERVER:`` prefix is recognised only when what
    follows is itself a URI with a scheme and the prefix is a configured
    server (``memo:memo://notes``). ``file:///x`` and ``urn:a:b`` stay whole
    URIs. A prefix that is no server but is followed by ``scheme://`` is a
    typo and an error.

    Raises:
        ValueError: the prefix looks like a server name but none is defined.
    """
    text = text.strip()
    prefix, sep, rest = text.partition(":")
    if sep and SERVER_NAME_RE.fullmatch(prefix) and _SCHEME_RE.match(rest):
        if prefix in servers:
            return {"server": prefix, "uri": rest}
        if re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", rest):
            raise ValueError(
                f"no server named {prefix!r} (known: {sorted(servers) or 'none'}); "
                "define it, or drop the SERVER: prefix"
            )
    return {"server": None, "uri": text}

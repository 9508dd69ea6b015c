"""Redaction: the one function every error, event, ``check`` output and metric label goes through.

agentd holds credentials it must never show: provider keys, tokens in MCP
server URLs, arguments and environments, ``Authorization`` headers. Anything
agentd writes that may contain a user-provided string is passed through
:func:`redact` first:

* every :class:`~agentd.core.errors.AgentdError` message (``AgentdError.__str__``);
* every telemetry field (``Telemetry.emit``, the last line of defence);
* ``agentd check`` output (after it hides server ``env`` and ``headers`` values);
* metric label values and the health endpoints' error texts.

What is replaced by :data:`REDACTED` (``***``):

* values under a credential-looking name (:func:`is_secret_key`): mapping
  entries (``{"api_key": ...}``), ``NAME=VALUE`` / ``NAME: VALUE`` text
  (``OPENAI_API_KEY=…``, ``Authorization: Bearer …``), query parameters
  (``?api-key=…``, ``&sig=…``) and command-line flags (``--api-key VALUE``,
  ``--token=VALUE``, ``-k VALUE``, also as adjacent items of a list);
* URL userinfo (``postgres://user:pw@host`` → ``postgres://***@host``);
* ``Bearer``/``Basic`` credentials and token shapes that announce
  themselves (``ghp_…``, ``github_pat_…``, ``sk-…``, ``xox…-``, ``glpat-…``,
  ``AKIA…``, ``hf_…``, JSON Web Tokens);
* any value registered with :func:`register_secrets` (the values of
  credential-named environment variables and server settings, registered at
  start-up), wherever it appears. Only values that can be told from text are
  registered (:func:`registrable`, rfcs/0300): shorter than
  :data:`MIN_REGISTERED_CHARS`, plain words (``cursor``, ``application/json``)
  and absolute paths never are, so they cannot mask a file name or the
  working directory; under their names they are still hidden.

``PWD`` and ``OLDPWD`` are the shell's working directories, never credentials
(``DB_PWD`` and a ``pwd`` field still are). A variable reference (``${NAME}``,
``${env:NAME}``) is shown, even under a credential's name: it names where a
value comes from. The default written in ``${NAME:-DEFAULT}`` is hidden when
``NAME`` or the name it is under is a credential's, except the word
``default`` of agentd's own fixes. A name that describes a credential rather
than holds one (``signature_header``, ``token_url``, ``password_file``) shows
its value.

Redaction is best-effort by design: a secret with no recognisable name,
shape or registration cannot be told from data. It errs towards hiding (an
argument after ``--token`` is hidden even when it was not a token).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Iterable, Mapping
from typing import Final, TypeVar, overload

__all__ = [
    "MIN_REGISTERED_CHARS",
    "REDACTED",
    "is_secret_flag",
    "is_secret_key",
    "is_secret_param",
    "looks_like_token",
    "redact",
    "register_secrets",
    "registrable",
    "secret_values",
    "secrets_in",
]

REDACTED: Final = "***"
"""What a hidden value is replaced by."""

MIN_REGISTERED_CHARS: Final = 6
"""Shortest registered value that is replaced wherever it appears. A shorter
"secret" (``1``, ``true``, ``dev``) would mangle unrelated text and is not a
credential worth the name; such values are still hidden under their names."""

# Name words that mark a credential (after splitting on ``-``, ``_``, ``.``, spaces).
_SECRET_WORDS: Final = frozenset(
    {
        "apikey",
        "token",
        "secret",
        "password",
        "passwd",
        "passphrase",
        "pwd",
        "pass",
        "auth",
        "authorization",
        "credential",
        "credentials",
        "cookie",
        "sig",
        "signature",
        "pat",
        "bearer",
    }
)
# Substrings that mark a credential even inside a longer word (``apiKey``, ``PGPASSWORD``).
_SECRET_PARTS: Final = (
    "apikey",
    "api_key",
    "secret",
    "password",
    "passwd",
    "authorization",
    "credential",
    "private_key",
    "privatekey",
    "cookie",
    "accesstoken",
    "access_token",
    "authtoken",
    "auth_token",
    "refreshtoken",
    "refresh_token",
)
_WORD_SPLIT = re.compile(r"[-_.\s]+")

# "key" marks a credential as part of a longer name (STRIPE_KEY, access-key), or
# alone as a query parameter or flag (?key=, --key); alone in text or a mapping
# it is far more often a data key (a watch item's key), so it is left shown there.
_KEY_WORD: Final = "key"

# A last word that makes the name describe a credential rather than hold one:
# ``token_endpoint_auth_method``, ``token_url``, ``bearer_token_env`` (the name of
# a variable), ``password_file`` (a path), ``signature_header`` (the name of the
# header a signature comes in), ``signature_prefix`` / ``signature_encoding`` (how
# it is written) hold no secret and are worth showing.
_DESCRIBING_WORDS: Final = frozenset(
    {
        "method",
        "methods",
        "url",
        "uri",
        "endpoint",
        "env",
        "var",
        "type",
        "file",
        "path",
        "header",
        "headers",
        "name",
        "prefix",
        "encoding",
        "algorithm",
        "scheme",
    }
)

# Names that hold the shell's working directories, whatever words they share with
# credentials ("pwd"): the value is a path every message may legitimately show.
_SHELL_NAMES: Final = frozenset({"PWD", "OLDPWD"})

# Single-letter flags that take a key in common MCP server command lines.
_SECRET_SHORT_FLAGS: Final = frozenset({"k"})


@functools.lru_cache(maxsize=1024)
def is_secret_key(name: str) -> bool:
    """Whether a field, variable, header or parameter called ``name`` holds a credential.

    ``api_key``, ``X-Api-Key``, ``GITHUB_TOKEN``, ``token``, ``PGPASSWORD``,
    ``Authorization``, ``sig`` do; ``input_tokens``, ``max_tokens``,
    ``keyboard``, ``token_endpoint_auth_method``, ``bearer_token_env`` do not.
    """
    if name in _SHELL_NAMES:
        return False
    lowered = name.lower()
    words = [w for w in _WORD_SPLIT.split(lowered) if w]
    if len(words) > 1 and words[-1] in _DESCRIBING_WORDS:
        return False
    if any(part in lowered for part in _SECRET_PARTS):
        return True
    return any(w in _SECRET_WORDS for w in words) or (len(words) > 1 and _KEY_WORD in words)


@functools.lru_cache(maxsize=1024)
def is_secret_param(name: str) -> bool:
    """Whether a URL query parameter called ``name`` holds a credential (``api-key``, ``key``, ``sig`` …)."""
    return is_secret_key(name) or name.lower() == _KEY_WORD


def is_secret_flag(flag: str) -> bool:
    """Whether a command-line flag (``--api-key``, ``--token``, ``--key``, ``-k``) takes a credential."""
    name = flag.lstrip("-")
    if not name or name == flag:
        return False
    if flag.startswith("--") or len(name) > 1:
        return is_secret_param(name)
    return name in _SECRET_SHORT_FLAGS


# The text patterns. Each pass runs only when a cheap substring check says it
# could match, so the common string (an id, a URI, a short message) costs a
# few hundred nanoseconds.
_USERINFO = re.compile(r"://[^\s/?#\[\]]*@")
_TOKEN_PREFIXES: Final = (
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "xox", "sk-", "hf_", "npm_",
    "pypi-", "AKIA", "ASIA", "AIza", "eyJ",
)  # fmt: skip
_TOKEN = re.compile(
    r"""
    (?P<tok>(?<![A-Za-z0-9])(?:gh[pousr]_|github_pat_|glpat-|xox[abposre]-|sk-|hf_|npm_|pypi-|AKIA|ASIA|AIza))
    (?P<tokval>[A-Za-z0-9_\-]{8,})
    | (?P<jwt>(?<![A-Za-z0-9])eyJ[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]*)
    """,
    re.VERBOSE,
)
# Lower-case fragments without which no named credential can be in a string.
_NAME_HINTS: Final = (
    "key", "token", "secret", "pass", "pwd", "auth", "credential", "cookie", "sig", "pat",
    "bearer", "basic", "-k",
)  # fmt: skip
_NAMED = re.compile(
    r"""
    \$\{(?P<refname>[A-Za-z_][A-Za-z0-9_]*):-(?P<refval>[^}]*)
    | (?P<qsep>[?&;])(?P<qname>[A-Za-z0-9_.\-\[\]]+)=(?P<qval>[^&#\s'"<>]*)
    | (?P<auth>(?<![A-Za-z0-9])(?i:bearer|basic)[ \t]+)(?P<authval>[A-Za-z0-9._~+/=\-]{6,})
    | (?P<flag>(?<![\w\-])--?[A-Za-z][A-Za-z0-9_\-]*)(?P<fsep>=|[ \t]+)(?P<fval>[^\s'"]+)
    | (?<![A-Za-z0-9_.\-])(?P<kv>[A-Za-z_][A-Za-z0-9_.\-]*)(?P<kvsep>['"]?[ \t]*[=:][ \t]*['"]?)
      (?P<kvval>(?:(?i:bearer|basic|token)[ \t]+)?[^\s'",;&}]+)
    """,
    re.VERBOSE,
)

_known: set[str] = set()
"""Registered secret values (process-wide: see :func:`register_secrets`)."""
_known_sorted: list[str] = []


# One plain word, as words of a language are written: lower-case, upper-case or
# capitalised letters, and short. A run of mixed-case letters (``xKqPzLmNaBvC``)
# or a long one is no word; words joined by ``-`` (``sk-secret``) are left to the
# name they are under.
_PLAIN_WORD = re.compile(r"[a-z]{1,16}|[A-Z]{1,16}|[A-Z][a-z]{1,15}")
_SPACE = re.compile(r"\s")

#: Shortest value :func:`looks_like_token` takes for a credential: generated keys
#: are 20 characters and more; client names, versions and flags are shorter.
TOKEN_MIN_CHARS: Final = 20


def registrable(value: str) -> bool:
    """Whether ``value`` may be registered (hidden wherever it appears).

    No: a value shorter than :data:`MIN_REGISTERED_CHARS`; a plain word
    (``cursor``, ``oauth``, ``Bearer``: it would mask the same word in file
    names, URIs and messages); an absolute path (it names where a credential
    is kept, and would mask every path under it). Such a value is still
    hidden under its name (``PGPASSWORD=…``, a header's value in ``agentd
    check``). See rfcs/0300.
    """
    if len(value) < MIN_REGISTERED_CHARS:
        return False
    if value.startswith(("/", "~/")) and not _SPACE.search(value):
        return False
    return not _PLAIN_WORD.fullmatch(value)


def looks_like_token(value: str) -> bool:
    """Whether a value under a name that says nothing (a custom header) looks generated, like a key.

    One piece (no white space) of at least :data:`TOKEN_MIN_CHARS` characters
    holding letters and digits, and no path: ``X-Team-Key``-style headers
    whose names :func:`is_secret_key` cannot tell carry such values; client
    names, versions and content types do not.
    """
    if len(value) < TOKEN_MIN_CHARS or _SPACE.search(value) or value.startswith(("/", "~/")):
        return False
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


def register_secrets(values: Iterable[str]) -> None:
    """Remember values to replace wherever they appear in anything :func:`redact` sees.

    Called at start-up with the values of credential-named environment
    variables (:func:`secret_values`) and of credential-named server
    ``env``/``headers`` entries. Values that are not :func:`registrable`
    (short, plain words, paths) are ignored. Process-wide and append-only:
    a secret once seen stays hidden.
    """
    global _known_sorted
    added = {v for v in values if isinstance(v, str) and registrable(v)} - _known
    if added:
        _known.update(added)
        _known_sorted = sorted(_known, key=len, reverse=True)
        _cached_text.cache_clear()


def secret_values(env: Mapping[str, str]) -> list[str]:
    """The credentials in an environment: the values of credential-named entries
    (``OPENAI_API_KEY`` …) and the credentials inside any other value
    (the password of ``DATABASE_URL=postgres://u:pw@…``, the ``api-key`` of
    ``OPENAI_BASE_URL=…?api-key=…``; see :func:`secrets_in`)."""
    found: list[str] = []
    for k, v in env.items():
        if not v:
            continue
        if is_secret_key(k):
            found.append(v)
        else:
            found += secrets_in(v)
    return found


def secrets_in(value: str | Iterable[str]) -> list[str]:
    """The credentials :func:`redact` would hide in ``value`` (a string, or a list of arguments).

    Used to register them (:func:`register_secrets`), so that they stay hidden
    even where they later appear alone: a server that prints the password of
    its ``DATABASE_URL``, a provider that echoes the key it was given.
    """
    if not isinstance(value, str):
        items = list(value)
        found: list[str] = []
        for before, item in zip(["", *items], items, strict=False):
            if before.startswith("-") and "=" not in before and is_secret_flag(before):
                found.append(item)
            found += secrets_in(item)
        return found
    found = []
    for m in _USERINFO.finditer(value):
        userinfo = m[0][3:-1]
        found.append(userinfo)
        found += [part for part in userinfo.split(":", 1)[1:] if part]
    for m in _TOKEN.finditer(value):
        found.append(m[0])
    return found + _named_secrets(value)


# A value that is already a placeholder (``KEY=...`` in a message telling the user what to set).
_PLACEHOLDER = re.compile(r"[.*]+")
_SCHEME_WORD = re.compile(r"^(?i:bearer|basic|token)[ \t]+")
# The default of a reference in a fix (``${GITHUB_TOKEN:-default}``): the word, not a value.
_REF_PLACEHOLDER = re.compile(r"[.*]*|default")
# A value that is a reference to a variable (``${GITHUB_TOKEN}``, ``${env:GITHUB_TOKEN}``,
# ``${GITHUB_TOKEN:-…}``): it names where the value comes from, and is not the value.
_REFERENCE = re.compile(r"(?P<head>\$\{(?:env:)?(?P<name>[A-Za-z_][A-Za-z0-9_]*))(?::-(?P<default>.*))?")


def _reference(m: re.Match[str]) -> re.Match[str] | None:
    """A ``NAME=VALUE`` match's value as a variable reference (its ``}`` right after it), or None."""
    if m.string[m.end() : m.end() + 1] != "}":
        return None
    return _REFERENCE.fullmatch(m["kvval"])


def _reference_default(m: re.Match[str], ref: re.Match[str]) -> str | None:
    """The default written in a reference under ``m``'s name, when it is a credential: the name or
    the variable's name says so, and it is not the ``default`` placeholder of a fix."""
    default = ref["default"]
    if not default or _REF_PLACEHOLDER.fullmatch(default):
        return None
    return default if is_secret_key(m["kv"]) or is_secret_key(ref["name"]) else None


def _named_secrets(text: str) -> list[str]:
    found: list[str] = []
    for m in _NAMED.finditer(text):
        group = m.lastgroup
        if group == "refval":
            if _hides_default(m):
                found.append(m["refval"])
            else:
                found += _named_secrets(m["refval"])
        elif group == "qval":
            if is_secret_param(m["qname"]) and m["qval"]:
                found.append(m["qval"])
        elif group == "authval":
            found.append(m["authval"])
        elif group == "fval":
            found += [m["fval"]] if is_secret_flag(m["flag"]) else _named_secrets(m["fval"])
        elif group == "kvval":
            ref = _reference(m)
            if ref is not None:
                default = _reference_default(m, ref)
                found += [default] if default is not None else _named_secrets(ref["default"] or "")
            elif is_secret_key(m["kv"]):
                found.append(m["kvval"])
                bare = _SCHEME_WORD.sub("", m["kvval"])
                if bare != m["kvval"]:
                    found.append(bare)
            else:
                found += _named_secrets(m["kvval"])
    return found


def _replace_token(m: re.Match[str]) -> str:
    return REDACTED if m.lastgroup == "jwt" else m["tok"] + REDACTED


def _hides_default(m: re.Match[str]) -> bool:
    """Whether ``${NAME:-DEFAULT}`` holds a credential: a credential-named variable's written default.

    The reference names a variable, so ``NAME`` is always shown (it is no
    ``NAME: value`` pair); ``default`` in agentd's own fixes is a placeholder.
    """
    return is_secret_key(m["refname"]) and not _REF_PLACEHOLDER.fullmatch(m["refval"])


def _replace_named(m: re.Match[str]) -> str:
    group = m.lastgroup
    if group == "refval":
        shown = REDACTED if _hides_default(m) else _named(m["refval"])
        return f"${{{m['refname']}:-{shown}"  # the closing brace, when there is one, follows
    if group == "qval":
        return f"{m['qsep']}{m['qname']}={REDACTED}" if is_secret_param(m["qname"]) else m[0]
    if group == "authval":
        return m["auth"] + REDACTED
    if group == "fval":
        if is_secret_flag(m["flag"]):
            return m["flag"] + m["fsep"] + REDACTED
        return m["flag"] + m["fsep"] + _named(m["fval"])
    if group == "kvval":
        ref = _reference(m)
        if ref is not None:  # the variable is named, never hidden; a credential's written default is
            if ref["default"] is None:
                return m[0]
            default = _reference_default(m, ref)
            shown = REDACTED if default is not None else _named(ref["default"])
            return f"{m['kv']}{m['kvsep']}{ref['head']}:-{shown}"
        if is_secret_key(m["kv"]) and not _PLACEHOLDER.fullmatch(m["kvval"]):
            return m["kv"] + m["kvsep"] + REDACTED
        # The value may itself hold a secret-named part (url=https://h/?token=...).
        return m["kv"] + m["kvsep"] + _named(m["kvval"])
    return m[0]  # pragma: no cover - every alternative ends in a named group


def _contains_any(text: str, needles: tuple[str, ...]) -> bool:
    # A plain loop: several times faster than any() over a generator, and this
    # runs for every string field of every telemetry event.
    return any(needle in text for needle in needles)


def _named(text: str) -> str:
    if _contains_any(text.lower(), _NAME_HINTS):
        return _NAMED.sub(_replace_named, text)
    return text


def _text(text: str, extra: Collection[str]) -> str:
    out = text
    if "@" in out and "://" in out:
        out = _USERINFO.sub("://" + REDACTED + "@", out)
    if _contains_any(out, _TOKEN_PREFIXES):
        out = _TOKEN.sub(_replace_token, out)
    out = _named(out)
    for secret in _known_sorted:
        if secret in out:
            out = out.replace(secret, REDACTED)
    for secret in extra:
        if secret in out:
            out = out.replace(secret, REDACTED)
    return out


#: Shortest string that can hold anything to hide (a registered value, ``k=v12345``…).
_SHORTEST = min(MIN_REGISTERED_CHARS, 6)

#: Strings up to this long are remembered with their redacted form: telemetry
#: repeats the same server names, URIs, routes and messages again and again.
_CACHED_CHARS = 512


@functools.lru_cache(maxsize=4096)
def _cached_text(text: str) -> str:
    return _text(text, ())


#: Longest run of letters and digits alone that can hold nothing but a registered value:
#: every other pattern needs a separator (``@``, ``=``, ``:``, ``-``, ``_``, a space, a
#: dot), and the shortest token shape of letters and digits alone (``AKIA`` and 8 more)
#: is 12 characters long.
_PLAIN_CHARS = 11


def _registered(text: str) -> str:
    """``text`` with every registered value in it replaced (longest first)."""
    out = text
    for secret in _known_sorted:
        if secret in out:
            out = out.replace(secret, REDACTED)
    return out


def _string(text: str, extra: Collection[str]) -> str:
    if len(text) < _SHORTEST:
        return text
    if extra or len(text) > _CACHED_CHARS:
        return _text(text, extra)
    if len(text) <= _PLAIN_CHARS and text.isalnum():
        # An agent id (``a10000``), a number, a word: only a registered value can be in
        # it. A daemon makes such strings by the hundred thousand, one id per agent,
        # each shown in a handful of lines and never again: remembered, they would
        # fill the cache with strings no line shows again (rfcs/0355).
        return _registered(text)
    return _cached_text(text)


def _sequence(items: list[object], extra: Collection[str]) -> list[object]:
    out: list[object] = []
    hide_next = False
    for item in items:
        if hide_next:
            out.append(REDACTED if isinstance(item, str) else redact(item, extra=extra))
            hide_next = False
            continue
        if isinstance(item, str):
            flag, eq, _value = item.partition("=")
            if not eq and (item.startswith("-") and is_secret_flag(item)):
                # "--api-key VALUE" as two list items: hide the next one.
                hide_next = True
                out.append(item)
                continue
            if eq and flag.startswith("-") and is_secret_flag(flag):
                out.append(f"{flag}={REDACTED}")
                continue
        out.append(redact(item, extra=extra))
    return out


T = TypeVar("T")


@overload
def redact(value: str, *, extra: Collection[str] = ()) -> str: ...
@overload
def redact(value: T, *, extra: Collection[str] = ()) -> T: ...
def redact(value: object, *, extra: Collection[str] = ()) -> object:
    """Return ``value`` with every credential in it replaced by ``***`` (see the module docstring).

    Strings are scanned for the patterns above and registered values;
    mappings hide the values of credential-named keys and redact the rest;
    lists and tuples are redacted item by item, and an item that is a
    credential flag (``--token``) hides the item after it. Other values
    are returned unchanged. The input is never modified.

    Args:
        value: what to redact.
        extra: more values to hide wherever they appear, for this call only
            (``agentd check`` passes the values it hid under their names).
    """
    if isinstance(value, str):
        return _string(value, extra)
    if isinstance(value, Mapping):
        return {
            k: (REDACTED if isinstance(k, str) and is_secret_key(k) and v else redact(v, extra=extra))
            for k, v in value.items()
        }
    if isinstance(value, list | tuple):
        return _sequence(list(value), extra)
    return value

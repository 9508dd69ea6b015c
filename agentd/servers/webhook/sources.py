"""Webhook sources as configuration: one path ``/hooks/NAME`` each, with its kind and credentials.

Pure apart from reading the secrets it is pointed at (an environment variable
or a file; never a value on the command line). Sources come from the TOML file
(``--config``, tables ``[sources.NAME]``) and from ``--source
NAME=KIND,key=value,...`` flags (a flag replaces a file's source of the same
name). Every problem is a :class:`~agentd.core.errors.ConfigError` that names the
setting, the value and the fix; a secret's value is never part of a message or
a ``repr``.

Keys of a source (TOML keys; in a flag ``-`` may replace ``_``):

==================  ===========================================================
``kind``            ``github``, ``slack``, ``alertmanager``, ``generic``
``secret_env``      environment variable holding the HMAC secret (github, slack, generic)
``secret_file``     file whose non-empty lines are accepted HMAC secrets (rotation)
``token_env/_file`` a bearer token (alertmanager, generic)
``username``        basic auth user (alertmanager), with ``password_env/_file``
``signature_header``  generic: the header with the HMAC-SHA256 (e.g. ``X-Signature``)
``signature_encoding``  generic: ``hex`` (default) or ``base64``
``signature_prefix``  generic: text before the digest (e.g. ``sha256=``)
``id_header``       generic: the idempotency header (default ``Idempotency-Key``)
``event_header``    generic: a header naming the event (else ``delivery``)
``dedupe_window``   how long a repeated delivery id counts as a retry (default: the
                    retention; alertmanager: 5m, its retries' horizon)
``max_body``        this source's body cap (default the server's ``--max-body``)
==================  ===========================================================
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from agentd.core.durations import parse_duration, parse_size
from agentd.core.errors import ConfigError

__all__ = [
    "ALERTMANAGER_DEDUPE_WINDOW",
    "KINDS",
    "MIN_TOKEN_LENGTH",
    "Credential",
    "Encoding",
    "Kind",
    "SourceSpec",
    "merge_sources",
    "parse_flag",
    "parse_table",
    "valid_name",
]

Kind = Literal["github", "slack", "alertmanager", "generic"]
KINDS: Final[tuple[Kind, ...]] = get_args(Kind)
Encoding = Literal["hex", "base64"]

MIN_TOKEN_LENGTH: Final = 16
"""Shortest bearer token or basic-auth password accepted: anything shorter is guessable."""
ALERTMANAGER_DEDUPE_WINDOW: Final = 300.0
"""Alertmanager sends no delivery id; an identical body within 5 minutes is its retry (it retries a
failed notification until the next ``group_interval``, 5 m by default); a later identical one is
its ``repeat_interval`` reminder, a new delivery."""
SECRET_FILE_LIMIT: Final = 64 * 1024
"""Largest secret file read (a secret is a line; anything bigger is not a secret file)."""

_NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]{0,62}")
_HEADER_RE: Final = re.compile(r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}")
_KEYS: Final = frozenset(
    {
        "kind",
        "secret_env",
        "secret_file",
        "token_env",
        "token_file",
        "username",
        "password_env",
        "password_file",
        "signature_header",
        "signature_encoding",
        "signature_prefix",
        "id_header",
        "event_header",
        "dedupe_window",
        "max_body",
    }
)
_SECRET_VALUES: Final = frozenset({"secret", "token", "password"})

EnvLookup = Mapping[str, str]
FileReader = Callable[[str], bytes]


def valid_name(name: str) -> bool:
    """A source name: lowercase letters, digits, ``_``, ``-`` (it is a URI host and a path part)."""
    return bool(_NAME_RE.fullmatch(name))


@dataclass(frozen=True, slots=True)
class Credential:
    """Accepted secret values and where they came from; the values never appear in ``repr``."""

    values: tuple[bytes, ...] = field(repr=False)
    origin: str
    """``$VAR`` or the file path: what messages name."""


@dataclass(frozen=True, slots=True)
class SourceSpec:
    """One webhook source, validated (see the module docstring for the keys)."""

    name: str
    kind: Kind
    secret: Credential | None = None
    token: Credential | None = None
    username: str | None = None
    password: Credential | None = None
    signature_header: str | None = None
    signature_encoding: Encoding = "hex"
    signature_prefix: str = ""
    id_header: str = "Idempotency-Key"
    event_header: str | None = None
    dedupe_window: float | None = None
    """Seconds a repeated dedupe key counts as a retry; None: as long as the delivery is retained."""
    max_body: int | None = None

    @property
    def path(self) -> str:
        return f"/hooks/{self.name}"

    def describe_auth(self) -> str:
        """How a sender proves itself, for messages and the status (never the secret)."""
        if self.kind == "github":
            return f"X-Hub-Signature-256 with the secret from {self._origin(self.secret)}"
        if self.kind == "slack":
            return f"X-Slack-Signature with the signing secret from {self._origin(self.secret)}"
        if self.token is not None:
            return f"Authorization: Bearer with the token from {self.token.origin}"
        if self.password is not None:
            return f"basic auth as {self.username!r} with the password from {self.password.origin}"
        return f"{self.signature_header} with the secret from {self._origin(self.secret)}"

    @staticmethod
    def _origin(cred: Credential | None) -> str:
        return cred.origin if cred is not None else "(none)"


# --------------------------------------------------------------------------- reading


def _read_env(setting: str, var: object, env: EnvLookup) -> Credential:
    if not isinstance(var, str) or not var:
        raise ConfigError(setting, var, "name an environment variable, e.g. GITHUB_WEBHOOK_SECRET")
    value = env.get(var)
    if not value or not value.strip():
        raise ConfigError(
            setting,
            var,
            f"the environment variable {var} is not set or empty; set it to the secret (agentd passes a "
            f"server only the variables its 'env' names: add {var} there)",
        )
    return Credential((value.strip().encode(),), f"${var}")


def _read_file(setting: str, path: object, read: FileReader) -> Credential:
    if not isinstance(path, str) or not path:
        raise ConfigError(setting, path, "name a file holding the secret, e.g. /run/secrets/github-webhook")
    try:
        raw = read(path)
    except OSError as exc:
        raise ConfigError(
            setting, path, f"it cannot be read ({exc.strerror or exc}); check the path"
        ) from exc
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(
            setting, path, "it is not UTF-8 text; write the secret as one line of text"
        ) from exc
    values = tuple(line.strip().encode() for line in text.splitlines() if line.strip())
    if not values:
        raise ConfigError(setting, path, "it is empty; write the secret on its first line")
    return Credential(values, path)


def _credential(
    table: Mapping[str, object], label: str, base: str, env: EnvLookup, read: FileReader
) -> Credential | None:
    env_key, file_key = f"{base}_env", f"{base}_file"
    if env_key in table and file_key in table:
        raise ConfigError(f"{label}.{base}_env", table[env_key], f"give {base}_env or {base}_file, not both")
    if env_key in table:
        return _read_env(f"{label}.{env_key}", table[env_key], env)
    if file_key in table:
        return _read_file(f"{label}.{file_key}", table[file_key], read)
    return None


def _string(table: Mapping[str, object], key: str, label: str) -> str | None:
    value = table.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise ConfigError(f"{label}.{key}", value, "give a string")
    return value


def _header(table: Mapping[str, object], key: str, label: str) -> str | None:
    value = _string(table, key, label)
    if value is not None and not _HEADER_RE.fullmatch(value):
        raise ConfigError(f"{label}.{key}", value, "give an HTTP header name such as X-Signature-256")
    return value


def _require(cred: Credential | None, setting: str, value: object, fix: str) -> Credential:
    if cred is None:
        raise ConfigError(setting, value, fix)
    return cred


def _long_enough(cred: Credential | None, label: str) -> None:
    if cred is None:
        return
    short = [v for v in cred.values if len(v) < MIN_TOKEN_LENGTH]
    if short:
        raise ConfigError(
            label,
            cred.origin,
            f"it holds a credential of {len(short[0])} characters: use at least {MIN_TOKEN_LENGTH} random "
            "characters (e.g. from `openssl rand -hex 32`)",
        )


def parse_table(
    name: str, table: Mapping[str, object], *, env: EnvLookup | None = None, read: FileReader | None = None
) -> SourceSpec:
    """Validate one source (a TOML table or a parsed flag) and read its credentials.

    Raises:
        ConfigError: a bad name, an unknown key, a secret given as a value, a
            missing or unreadable credential, a key that does not fit the kind.
    """
    env = os.environ if env is None else env
    read = _default_read if read is None else read
    label = f"sources.{name}"
    if not valid_name(name):
        raise ConfigError(
            label, name, "name a source with lowercase letters, digits, '_' or '-' (it becomes /hooks/NAME)"
        )
    for key in table:
        if key in _SECRET_VALUES:
            raise ConfigError(
                f"{label}.{key}",
                "(hidden)",  # never echo a credential
                f"secrets never go in configuration or on the command line: use {key}_env=VAR or {key}_file=PATH",
            )
        if key not in _KEYS:
            raise ConfigError(
                f"{label}.{key}", table[key], f"unknown key; use one of {', '.join(sorted(_KEYS))}"
            )
    kind = table.get("kind")
    if kind not in KINDS:
        raise ConfigError(f"{label}.kind", kind, f"choose one of {', '.join(KINDS)}")
    secret = _credential(table, label, "secret", env, read)
    token = _credential(table, label, "token", env, read)
    password = _credential(table, label, "password", env, read)
    username = _string(table, "username", label)
    signature_header = _header(table, "signature_header", label)
    event_header = _header(table, "event_header", label)
    id_header = _header(table, "id_header", label) or "Idempotency-Key"
    encoding = table.get("signature_encoding", "hex")
    if encoding not in ("hex", "base64"):
        raise ConfigError(f"{label}.signature_encoding", encoding, "choose hex or base64")
    prefix = _string(table, "signature_prefix", label) or ""
    dedupe_window: float | None = None
    if "dedupe_window" in table:
        try:
            dedupe_window = parse_duration(table["dedupe_window"])  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{label}.dedupe_window", table["dedupe_window"], str(exc)) from exc
    elif kind == "alertmanager":
        dedupe_window = ALERTMANAGER_DEDUPE_WINDOW
    max_body: int | None = None
    if "max_body" in table:
        try:
            max_body = parse_size(table["max_body"])  # type: ignore[arg-type]
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"{label}.max_body", table["max_body"], str(exc)) from exc
        if max_body < 1:
            raise ConfigError(f"{label}.max_body", table["max_body"], "give a size of at least 1 byte")

    def only(keys: Iterable[str], kinds: str) -> None:
        for key in keys:
            if key in table:
                raise ConfigError(f"{label}.{key}", table[key], f"{key} applies to {kinds} sources only")

    if kind in ("github", "slack"):
        what = "webhook secret" if kind == "github" else "signing secret"
        secret = _require(
            secret,
            f"{label}.secret_env",
            None,
            f"a {kind} source needs its {what} (give secret_env or secret_file)",
        )
        only(("token_env", "token_file", "username", "password_env", "password_file"), "alertmanager/generic")
        only(
            ("signature_header", "signature_encoding", "signature_prefix", "event_header", "id_header"),
            "generic",
        )
    elif kind == "alertmanager":
        only(("secret_env", "secret_file"), "github/slack/generic")
        only(
            ("signature_header", "signature_encoding", "signature_prefix", "event_header", "id_header"),
            "generic",
        )
        if token is None and password is None:
            raise ConfigError(
                f"{label}.token_file",
                None,
                "an alertmanager source needs a bearer token (token_env/token_file, Alertmanager's "
                "http_config.authorization) or basic auth (username + password_env/password_file)",
            )
        if token is not None and password is not None:
            raise ConfigError(
                f"{label}.token_file", token.origin, "give a bearer token or basic auth, not both"
            )
        if password is not None and not username:
            raise ConfigError(
                f"{label}.username", username, "basic auth needs a username as well as the password"
            )
        if username and password is None:
            raise ConfigError(f"{label}.password_env", None, "basic auth needs password_env or password_file")
    else:  # generic
        only(("username", "password_env", "password_file"), "alertmanager")
        if (secret is None) == (token is None):
            raise ConfigError(
                f"{label}.secret_env",
                None,
                "a generic source needs exactly one of an HMAC secret (secret_env/secret_file with "
                "signature_header) or a bearer token (token_env/token_file)",
            )
        if secret is not None and signature_header is None:
            raise ConfigError(
                f"{label}.signature_header",
                None,
                "an HMAC secret needs the header the sender puts its signature in, e.g. signature_header = 'X-Signature-256'",
            )
        if token is not None and signature_header is not None:
            raise ConfigError(
                f"{label}.signature_header", signature_header, "a bearer-token source has no signature header"
            )
    _long_enough(token, f"{label}.token")
    _long_enough(password, f"{label}.password")
    return SourceSpec(
        name=name,
        kind=kind,
        secret=secret,
        token=token,
        username=username,
        password=password,
        signature_header=signature_header,
        signature_encoding="base64" if encoding == "base64" else "hex",
        signature_prefix=prefix,
        id_header=id_header,
        event_header=event_header,
        dedupe_window=dedupe_window,
        max_body=max_body,
    )


def parse_flag(value: str) -> tuple[str, dict[str, object]]:
    """Split ``--source NAME=KIND[,key=value...]`` into the name and a table for :func:`parse_table`.

    Raises:
        ConfigError: not of that form.
    """
    name, sep, rest = value.partition("=")
    if not sep or not name:
        raise ConfigError(
            "--source",
            value,
            "write NAME=KIND[,key=value...], e.g. github=github,secret_env=GITHUB_WEBHOOK_SECRET",
        )
    kind, *pairs = rest.split(",")
    table: dict[str, object] = {"kind": kind.strip()}
    for pair in pairs:
        key, sep, val = pair.partition("=")
        key = key.strip().replace("-", "_")
        if key in _SECRET_VALUES:
            raise ConfigError(
                f"--source {name}",
                "(hidden)",
                f"secrets never go on the command line (other users can read it): use {key}_env=VAR or {key}_file=PATH",
            )
        if not sep or not key:
            raise ConfigError("--source", value, f"{pair!r} is not key=value; write NAME=KIND,key=value,...")
        table[key] = val.strip()
    return name.strip(), table


def merge_sources(
    file_tables: Mapping[str, object] | None,
    flags: Sequence[str],
    *,
    env: EnvLookup | None = None,
    read: FileReader | None = None,
) -> list[SourceSpec]:
    """Every source: the file's ``[sources.*]`` tables, then the flags (a flag replaces a file's source)."""
    tables: dict[str, Mapping[str, object]] = {}
    if file_tables is not None:
        for name, table in file_tables.items():
            if not isinstance(table, Mapping):
                raise ConfigError(
                    f"sources.{name}", table, "each source is a table: [sources.NAME] with kind = ..."
                )
            tables[name] = table
    for flag in flags:
        name, table = parse_flag(flag)
        tables[name] = table
    return [parse_table(name, table, env=env, read=read) for name, table in tables.items()]


def _default_read(path: str) -> bytes:
    """A secret file's bytes. Symlinks are followed: Kubernetes mounts Secret keys as links into
    ``..data/``; the operator named the path. Never blocks on a FIFO; must be a regular file."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError(errno.EINVAL, "not a regular file")
        return os.read(fd, SECRET_FILE_LIMIT)
    finally:
        os.close(fd)

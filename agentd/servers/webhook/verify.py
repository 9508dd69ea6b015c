"""Who sent a delivery: each kind's signature or credential check (pure, no I/O, time passed in).

Two steps, so an unauthenticated request costs as little as possible:

* :func:`check_headers` runs as soon as the headers are in: a bearer token or
  basic auth is checked there (alertmanager, generic with a token); an HMAC
  kind only checks that its signature header is present. A refusal here means
  the body is never read.
* :func:`check_body` runs on the whole raw body (as received, before any
  parsing): the HMAC kinds recompute the signature.

=============  ====================================================================
kind           what is checked
=============  ====================================================================
github         ``X-Hub-Signature-256: sha256=HEX``, HMAC-SHA256(secret, body)
slack          ``X-Slack-Signature: v0=HEX``, HMAC-SHA256(secret, ``v0:TS:BODY``), with
               ``X-Slack-Request-Timestamp`` within :data:`SLACK_WINDOW` of now
alertmanager   ``Authorization: Bearer TOKEN`` or ``Basic`` (username:password)
generic        the named header: HMAC-SHA256(secret, body) as hex or base64 after an
               optional prefix, or ``Authorization: Bearer TOKEN``
=============  ====================================================================

Every comparison is constant-time (:func:`hmac.compare_digest`); a secret file
with several lines accepts any of them (rotation). A refusal's ``reason`` is
sent back to the sender and counted: it names what was wrong and never
includes a secret or the expected signature.
"""

from __future__ import annotations

import base64
import binascii
import hmac
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

from agentd.servers.webhook.sources import Credential, SourceSpec

__all__ = [
    "SLACK_WINDOW",
    "Refusal",
    "RefusalCode",
    "check_body",
    "check_headers",
    "github_signature",
    "slack_signature",
]

SLACK_WINDOW: Final = 300.0
"""Seconds a Slack request timestamp may differ from now (Slack's own replay window: 5 minutes)."""

RefusalCode = Literal["unauthenticated", "bad_signature", "stale", "malformed", "too_large", "unsupported"]
"""Why a delivery was refused (a closed vocabulary: the status resource counts by it)."""


@dataclass(frozen=True, slots=True)
class Refusal:
    """The request is refused with ``status``; ``reason`` goes back to the sender."""

    status: int
    code: RefusalCode
    reason: str


def github_signature(secret: bytes, body: bytes) -> str:
    """``X-Hub-Signature-256`` for ``body``: ``sha256=`` + hex HMAC-SHA256."""
    return "sha256=" + hmac.digest(secret, body, "sha256").hex()


def slack_signature(secret: bytes, timestamp: str, body: bytes) -> str:
    """``X-Slack-Signature`` for ``body`` sent at ``timestamp``: ``v0=`` + hex HMAC-SHA256 of ``v0:TS:BODY``."""
    return "v0=" + hmac.digest(secret, b"v0:" + timestamp.encode() + b":" + body, "sha256").hex()


def _any_matches(given: bytes, expected: list[bytes]) -> bool:
    ok = False
    for candidate in expected:  # no early exit: the time does not say which secret matched
        ok |= hmac.compare_digest(given, candidate)
    return ok


def _unauthenticated(spec: SourceSpec, what: str) -> Refusal:
    return Refusal(401, "unauthenticated", f"{what}; this endpoint accepts {_scheme(spec)}")


def _scheme(spec: SourceSpec) -> str:
    if spec.kind == "github":
        return "requests signed with X-Hub-Signature-256"
    if spec.kind == "slack":
        return "requests signed with X-Slack-Signature"
    if spec.token is not None:
        return "Authorization: Bearer"
    if spec.password is not None:
        return "Authorization: Basic"
    return f"requests signed with {spec.signature_header}"


def _bad_signature(header: str) -> Refusal:
    return Refusal(
        401, "bad_signature", f"{header} does not match the body; check the secret configured at the sender"
    )


def _check_bearer(spec: SourceSpec, token: Credential, auth: str | None) -> Refusal | None:
    if auth is None:
        return _unauthenticated(spec, "no Authorization header")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return _unauthenticated(spec, "the Authorization header is not a bearer token")
    if not _any_matches(given.strip().encode("latin-1"), list(token.values)):
        return Refusal(401, "unauthenticated", "the bearer token is wrong")
    return None


def _check_basic(spec: SourceSpec, password: Credential, auth: str | None) -> Refusal | None:
    if auth is None:
        return _unauthenticated(spec, "no Authorization header")
    scheme, _, given = auth.partition(" ")
    if scheme.lower() != "basic":
        return _unauthenticated(spec, "the Authorization header is not basic auth")
    try:
        decoded = base64.b64decode(given.strip(), validate=True)
    except (binascii.Error, ValueError):
        return Refusal(401, "unauthenticated", "the basic auth credentials are not base64")
    user, sep, pw = decoded.partition(b":")
    expected_user = (spec.username or "").encode()
    user_ok = hmac.compare_digest(user, expected_user)
    pw_ok = _any_matches(pw, list(password.values))
    if not (sep and user_ok and pw_ok):
        return Refusal(401, "unauthenticated", "the basic auth username or password is wrong")
    return None


def check_headers(spec: SourceSpec, headers: Mapping[str, str]) -> Refusal | None:
    """What can be checked before the body is read (``headers``: lowercase names). None: read the body."""
    auth = headers.get("authorization")
    if spec.token is not None:
        return _check_bearer(spec, spec.token, auth)
    if spec.password is not None:
        return _check_basic(spec, spec.password, auth)
    if spec.kind == "github" and "x-hub-signature-256" not in headers:
        return _unauthenticated(spec, "no X-Hub-Signature-256 header (set a secret on the GitHub webhook)")
    if spec.kind == "slack":
        for name in ("x-slack-signature", "x-slack-request-timestamp"):
            if name not in headers:
                return _unauthenticated(spec, f"no {name} header")
    if (
        spec.kind == "generic"
        and spec.signature_header is not None
        and spec.signature_header.lower() not in headers
    ):
        return _unauthenticated(spec, f"no {spec.signature_header} header")
    return None


def check_body(spec: SourceSpec, headers: Mapping[str, str], body: bytes, *, now: float) -> Refusal | None:
    """The signature over the raw ``body``; ``now`` is the wall clock (Slack's replay window). None: authentic."""
    secret = spec.secret
    if secret is None:
        return None  # a token or basic-auth source: done in check_headers
    keys = list(secret.values)
    if spec.kind == "github":
        given = headers.get("x-hub-signature-256", "").strip()
        if not given.startswith("sha256="):
            return Refusal(401, "bad_signature", "X-Hub-Signature-256 must be sha256=HEX")
        expected = [github_signature(k, body).encode() for k in keys]
        return (
            None if _any_matches(given.encode("latin-1"), expected) else _bad_signature("X-Hub-Signature-256")
        )
    if spec.kind == "slack":
        stamp = headers.get("x-slack-request-timestamp", "").strip()
        # ASCII digits only: isdigit() is true for ``²``, which int() refuses (and ``١٢`` it reads).
        if not (0 < len(stamp) <= 12 and stamp.isascii() and stamp.isdigit()):
            return Refusal(
                400,
                "malformed",
                "X-Slack-Request-Timestamp must be Unix seconds in ASCII digits, e.g. 1531420618",
            )
        if abs(now - int(stamp)) > SLACK_WINDOW:
            return Refusal(
                401,
                "stale",
                f"X-Slack-Request-Timestamp {stamp} is more than {SLACK_WINDOW:.0f} s from this server's "
                "clock: a replayed request, or a clock to fix (NTP)",
            )
        given = headers.get("x-slack-signature", "").strip()
        expected = [slack_signature(k, stamp, body).encode() for k in keys]
        return (
            None if _any_matches(given.encode("latin-1"), expected) else _bad_signature("X-Slack-Signature")
        )
    # generic HMAC
    name = spec.signature_header or ""
    given_text = headers.get(name.lower(), "").strip()
    if spec.signature_prefix:
        if not given_text.startswith(spec.signature_prefix):
            return Refusal(401, "bad_signature", f"{name} must start with {spec.signature_prefix!r}")
        given_text = given_text[len(spec.signature_prefix) :]
    digests = [hmac.digest(k, body, "sha256") for k in keys]
    if spec.signature_encoding == "hex":
        expected = [d.hex().encode() for d in digests]
        return None if _any_matches(given_text.lower().encode("latin-1"), expected) else _bad_signature(name)
    try:
        given_raw = base64.b64decode(given_text, validate=True)
    except (binascii.Error, ValueError):
        return Refusal(401, "bad_signature", f"{name} is not base64")
    return None if _any_matches(given_raw, digests) else _bad_signature(name)

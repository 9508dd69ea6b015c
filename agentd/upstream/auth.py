"""Credentials for remote MCP servers: a bearer token from the environment, or OAuth client credentials.

:func:`auth_for` turns a server's settings into what its HTTP client sends:

* ``bearer_token_env = "VAR"`` -> ``Authorization: Bearer $VAR`` on every request;
* ``[servers.NAME.oauth]`` -> the SDK's OAuth 2.1 client-credentials provider
  (:class:`mcp.client.auth.extensions.client_credentials.ClientCredentialsOAuthProvider`):
  on the first 401 it discovers the resource server's metadata and its
  authorization server (which must be the configured ``issuer``), asks for a
  token with the client id and secret, and retries the request.

agentd adds two things the SDK leaves to its caller:

* **A token cache** in the state directory (``STATE_DIR/oauth/SERVER.json``,
  mode 0600, written atomically), holding the token and its absolute expiry,
  bound to the server URL, issuer and client id it was issued for: a restart
  reuses a live token instead of asking again. Without a state directory the
  token is kept in memory only. The file follows the state directory's rule
  (:mod:`agentd.state.files`, rfcs/0275): never opened through a link, read up
  to a bound; not a regular file, or agentd's own and damaged: moved aside
  (``state.moved_aside``); another user's, or not a token cache: refused
  (``state.refused``), neither read nor replaced (the token stays in memory).
* **Refresh before expiry**: a token is treated as expired
  :func:`refresh_margin` seconds early; the next request then fetches a new
  one first (client credentials have no refresh token: the grant is simply
  repeated), so no request is sent with a token about to lapse.

The SDK hooks used here (``_initialize``, ``_handle_token_response``,
``_auth_flow``, ``_exchange_token_client_credentials`` and the ``context``
fields) are not public API; they are used only in this module, and
``tests/upstream/test_upstream_oauth.py`` exercises every one of them
against a real authorization server, so an SDK release that changes them
fails that test.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from collections.abc import AsyncGenerator, Generator, Mapping
from pathlib import Path
from typing import Protocol

import anyio.to_thread
import httpx2
from mcp.client.auth import OAuthTokenError
from mcp.client.auth.extensions.client_credentials import ClientCredentialsOAuthProvider
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from agentd.core.errors import NotAFile, NotOurs
from agentd.core.limits import TokenAuthMethod
from agentd.observe.telemetry import Telemetry
from agentd.state import files
from agentd.state.dir import OAUTH_NAME

__all__ = ["TokenCache", "auth_for", "refresh_margin"]

#: Largest token cache read: a token response is a few KiB; anything near this is not one.
MAX_TOKEN_CACHE_BYTES = 1024 * 1024

MAX_REFRESH_MARGIN = 60.0
"""Seconds before expiry at which a token is replaced: a minute covers clock skew between
agentd and the authorization server and a slow token request."""


def refresh_margin(lifetime: float) -> float:
    """How early a token of ``lifetime`` seconds is replaced: a tenth of it, at most a minute."""
    return min(MAX_REFRESH_MARGIN, max(0.0, lifetime) / 10)


class OAuthLike(Protocol):
    """What :func:`auth_for` needs from ``agentd.config.OAuthSpec``."""

    @property
    def client_id(self) -> str: ...
    @property
    def client_secret(self) -> str | None: ...
    @property
    def client_secret_env(self) -> str | None: ...
    @property
    def issuer(self) -> str: ...
    @property
    def scope(self) -> str | None: ...
    @property
    def token_endpoint_auth_method(self) -> TokenAuthMethod: ...


class AuthSpecLike(Protocol):
    """What :func:`auth_for` needs from ``agentd.config.ServerSpec``."""

    @property
    def name(self) -> str: ...
    @property
    def url(self) -> str | None: ...
    @property
    def bearer_token_env(self) -> str | None: ...
    @property
    def oauth(self) -> OAuthLike | None: ...


class TokenCache:
    """The SDK's ``TokenStorage`` over one JSON file (or memory when ``path`` is None).

    Args:
        path: the cache file; its folder is created (mode 0700) on first write.
        binding: what the token was issued for (URL, issuer, client id): a file
            written for another binding is ignored.
        telemetry: where a file moved aside or refused is reported (None: not reported).
    """

    def __init__(self, path: Path | None, binding: str, telemetry: Telemetry | None = None) -> None:
        self.path = path
        self._binding = binding
        self._telemetry = telemetry
        self._token: OAuthToken | None = None
        self._expires_at: float | None = None
        self._client: OAuthClientInformationFull | None = None
        self.loaded = False
        self.write_error: str | None = None
        """Why the last token could not be written (it is kept in memory)."""
        self.refused: str | None = None
        """Why the file is not agentd's: it is neither read nor replaced."""

    @property
    def expires_at(self) -> float | None:
        """Absolute (wall-clock) expiry of the held token, if it has one."""
        return self._expires_at

    async def get_tokens(self) -> OAuthToken | None:
        if not self.loaded:
            self.loaded = True
            if self.path is not None:
                await anyio.to_thread.run_sync(self._load)
        if self._token is None:
            return None
        if self._expires_at is not None:
            # The SDK counts expires_in from when it reads it: hand it what is left.
            left = self._expires_at - time.time()
            return self._token.model_copy(update={"expires_in": max(0, int(left))})
        return self._token

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self._token = tokens
        self._expires_at = None if tokens.expires_in is None else time.time() + tokens.expires_in
        if self.path is not None:
            if self.refused is not None:
                self.write_error = f"not caching the token in {self.path}: {self.refused}"
                return
            try:
                await anyio.to_thread.run_sync(self._save)
            except (OSError, NotAFile, NotOurs) as exc:
                # A full or read-only state directory costs a token request at the next
                # start, never the connection: the token stays in memory.
                reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                self.write_error = f"cannot cache the token in {self.path}: {reason}"

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self._client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self._client = client_info  # fixed by configuration: never written to disk

    def _load(self) -> None:
        assert self.path is not None
        try:
            raw = files.read_state_file(self.path, MAX_TOKEN_CACHE_BYTES)
        except NotAFile as exc:
            self._move_aside(files.UNSAFE, exc.problem)
            return
        except NotOurs as exc:
            self._refuse(exc.problem)
            return
        except OSError:
            return  # no cache: a new token is fetched
        if len(raw) > MAX_TOKEN_CACHE_BYTES:
            self._move_aside(files.CORRUPT, f"it is larger than {MAX_TOKEN_CACHE_BYTES} bytes")
            return
        try:
            doc = json.loads(raw)
        except ValueError:
            if raw.lstrip().startswith(b'{"binding"'):
                self._move_aside(files.CORRUPT, "it is cut short (not valid JSON)")
            else:
                self._refuse("it is not JSON, so not an agentd token cache")
            return
        if not isinstance(doc, dict) or "binding" not in doc or "token" not in doc:
            self._refuse('it is not an agentd token cache ({"binding": ..., "token": ...})')
            return
        if doc.get("binding") != self._binding:
            return  # issued for another server or client: replaced by the next token
        try:
            token = OAuthToken.model_validate(doc["token"])
        except ValueError as exc:
            self._move_aside(files.CORRUPT, f"its token is not valid ({str(exc).splitlines()[0]})")
            return
        expires_at = doc.get("expires_at")
        if isinstance(expires_at, int | float) and expires_at - time.time() <= 0:
            return
        self._token = token
        self._expires_at = float(expires_at) if isinstance(expires_at, int | float) else None

    def _move_aside(self, why: str, problem: str) -> None:
        assert self.path is not None
        try:
            moved_to = files.move_aside(self.path, why)
        except OSError as exc:
            self._refuse(f"{problem}, and it cannot be moved aside ({exc.strerror or exc})")
            return
        if self._telemetry is not None:
            self._telemetry.emit(
                "state.moved_aside",
                file="oauth token cache",
                path=str(self.path),
                moved_to=str(moved_to),
                problem=problem,
                kept=0,
                fix="a new token is fetched and cached; inspect or delete the moved file",
            )

    def _refuse(self, problem: str) -> None:
        assert self.path is not None
        self.refused = problem
        if self._telemetry is not None:
            self._telemetry.emit(
                "state.refused",
                file="oauth token cache",
                path=str(self.path),
                problem=problem,
                fix="left untouched; the token is kept in memory only until it is removed",
            )

    def _save(self) -> None:
        assert self.path is not None
        assert self._token is not None
        doc = {
            "binding": self._binding,
            "expires_at": self._expires_at,
            "token": self._token.model_dump(mode="json", exclude_none=True),
        }
        if not self.path.parent.parent.exists():  # no claimed state directory (a test, a tool): make it
            files.make_private_dir(self.path.parent.parent)
        files.make_private_dir(self.path.parent)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        # O_EXCL: a fresh file, never a link or anything planted under the name.
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(doc, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise


class _ClientCredentials(ClientCredentialsOAuthProvider):
    """The SDK's client-credentials provider with a token cache and refresh before expiry.

    Args:
        server_url: the MCP server's URL.
        oauth: the server's ``[oauth]`` settings.
        client_secret: the secret they give or name (read from the environment).
        cache: where the token is kept across reconnects and restarts.
    """

    def __init__(self, server_url: str, oauth: OAuthLike, *, client_secret: str, cache: TokenCache) -> None:
        super().__init__(
            server_url,
            cache,
            oauth.client_id,
            client_secret,
            token_endpoint_auth_method=oauth.token_endpoint_auth_method,
            scope=oauth.scope,
            issuer=oauth.issuer,
        )
        self._cache = cache

    def _set_expiry(self) -> None:
        # The SDK's expiry is the token's; agentd's is a margin earlier (see the module docstring).
        expires_at = self._cache.expires_at
        token = self.context.current_tokens
        if expires_at is None or token is None:
            return
        lifetime = float(token.expires_in) if token.expires_in is not None else expires_at - time.time()
        self.context.token_expiry_time = expires_at - refresh_margin(lifetime)

    async def _initialize(self) -> None:
        await super()._initialize()
        self._set_expiry()

    async def _handle_token_response(self, response: httpx2.Response) -> None:
        await super()._handle_token_response(response)
        self._set_expiry()

    async def _auth_flow(self, request: httpx2.Request) -> AsyncGenerator[httpx2.Request, httpx2.Response]:
        async with self.context.lock:
            if not self._initialized:
                await self._initialize()
            # A token about to expire is replaced before the request goes out, once the
            # authorization server is known (after the first discovery in this process).
            if (
                self.context.current_tokens is not None
                and not self.context.is_token_valid()
                and self.context.oauth_metadata is not None
            ):
                response = yield await self._exchange_token_client_credentials()
                try:
                    await self._handle_token_response(response)
                except OAuthTokenError:
                    self.context.clear_tokens()  # the full flow below starts again
        inner = super()._auth_flow(request)
        try:
            outgoing = await inner.__anext__()
            while True:
                response = yield outgoing
                outgoing = await inner.asend(response)
        except StopAsyncIteration:
            return
        finally:
            await inner.aclose()


class _Bearer(httpx2.Auth):
    """``Authorization: Bearer TOKEN`` on every request."""

    def __init__(self, token: str) -> None:
        self._value = f"Bearer {token}"

    def auth_flow(self, request: httpx2.Request) -> Generator[httpx2.Request, httpx2.Response, None]:
        request.headers["Authorization"] = self._value
        yield request


def auth_for(
    spec: AuthSpecLike,
    *,
    state_dir: Path | None,
    env: Mapping[str, str] | None = None,
    telemetry: Telemetry | None = None,
) -> httpx2.Auth | None:
    """The authentication for one HTTP server's client (None: only its configured headers).

    Built once per server and kept across reconnects, so an OAuth token
    outlives a dropped connection.
    """
    env = os.environ if env is None else env
    if spec.bearer_token_env is not None:
        # Checked at load (exit 2 when unset); read now so the value is never part of the settings.
        return _Bearer(env.get(spec.bearer_token_env, ""))
    oauth = spec.oauth
    if oauth is None or spec.url is None:
        return None
    secret = (
        oauth.client_secret if oauth.client_secret is not None else env.get(oauth.client_secret_env or "", "")
    )
    binding = "\n".join((spec.url, oauth.issuer, oauth.client_id))
    path = None
    if state_dir is not None:
        digest = hashlib.sha256(binding.encode()).hexdigest()[:12]
        path = state_dir / OAUTH_NAME / f"{spec.name}-{digest}.json"
    return _ClientCredentials(
        spec.url, oauth, client_secret=secret, cache=TokenCache(path, binding, telemetry)
    )

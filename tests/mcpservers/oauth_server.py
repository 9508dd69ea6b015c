"""A loopback OAuth 2.1 authorization server and a protected MCP resource server, from the SDK's auth parts.

Run as ``python oauth_server.py --as-fd A --rs-fd B --log FILE`` with two
already-listening sockets (the test owns the ports):

* the **authorization server** on ``A`` serves its metadata
  (``/.well-known/oauth-authorization-server``, built by the SDK's
  ``build_metadata``) and a ``/token`` endpoint for the
  ``client_credentials`` grant that authenticates the client with the SDK's
  ``ClientAuthenticator`` (``client_secret_basic`` or ``client_secret_post``);
  the SDK's own token handler has no client-credentials grant;
* the **resource server** on ``B`` is an ``MCPServer`` with a token verifier
  and ``AuthSettings``: the SDK serves its protected-resource metadata and
  answers 401 with ``WWW-Authenticate`` to a request without a valid token.

Every token issued, every token refused and every 401 the resource server
answers is a line in ``--log`` (``issued N`` / ``refused …`` / ``unauthorized``). The tool ``whoami`` answers with the client
id and the serial number of the token the call carried.
"""

from __future__ import annotations

import argparse
import base64
import secrets
import socket
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import anyio
import uvicorn
from mcp.server.auth.handlers.metadata import MetadataHandler
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.middleware.client_auth import AuthenticationError, ClientAuthenticator
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.routes import build_metadata
from mcp.server.auth.settings import AuthSettings, ClientRegistrationOptions, RevocationOptions
from mcp.server.mcpserver import MCPServer
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import AnyHttpUrl
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

CLIENT_ID = "agentd-test"
CLIENT_SECRET = "s3cret-client-value"


class Clients:
    """The one registered client (what ``ClientAuthenticator`` asks a provider for)."""

    def __init__(self, method: str) -> None:
        self.client = OAuthClientInformationFull(
            client_id=CLIENT_ID,
            client_secret=CLIENT_SECRET,
            redirect_uris=None,
            grant_types=["client_credentials"],
            token_endpoint_auth_method=method,  # type: ignore[arg-type]
        )

    async def get_client(self, client_id: str) -> OAuthClientInformationFull | None:
        return self.client if client_id == CLIENT_ID else None


class Tokens:
    """Tokens issued by the authorization server, checked by the resource server (same process)."""

    def __init__(self, lifetime: int, log: Path) -> None:
        self.lifetime = lifetime
        self.log = log
        self.issued: dict[str, tuple[int, float]] = {}

    def note(self, line: str) -> None:
        with self.log.open("a") as f:
            f.write(line + "\n")

    def issue(self) -> tuple[str, int]:
        serial = len(self.issued) + 1
        token = secrets.token_urlsafe(24)
        self.issued[token] = (serial, time.time() + self.lifetime)
        self.note(f"issued {serial}")
        return token, serial

    async def verify_token(self, token: str) -> AccessToken | None:
        found = self.issued.get(token)
        if found is None:
            self.note("refused unknown")
            return None
        serial, expires_at = found
        if time.time() > expires_at:
            self.note(f"refused expired {serial}")
            return None
        return AccessToken(token=token, client_id=CLIENT_ID, scopes=[], expires_at=int(expires_at))


def authorization_server(issuer: str, tokens: Tokens, method: str) -> Starlette:
    metadata = build_metadata(
        AnyHttpUrl(issuer), None, ClientRegistrationOptions(enabled=False), RevocationOptions(enabled=False)
    )
    metadata.grant_types_supported = ["client_credentials"]
    authenticator = ClientAuthenticator(Clients(method))  # type: ignore[arg-type]

    async def token(request: Request) -> Response:
        form = await request.form()
        header = request.headers.get("authorization", "")
        if "client_id" not in form and header.startswith("Basic "):
            # RFC 6749 2.3.1: with HTTP Basic the client id is in the header only (the SDK's
            # client sends it so); the SDK's authenticator looks it up in the form first.
            basic_id = unquote(base64.b64decode(header[6:]).decode().partition(":")[0])
            request._form = FormData([*form.multi_items(), ("client_id", basic_id)])
        try:
            await authenticator.authenticate_request(request)
        except AuthenticationError as exc:
            tokens.note(f"refused client {exc.message}")
            return JSONResponse(
                {"error": "invalid_client", "error_description": exc.message}, status_code=401
            )
        if form.get("grant_type") != "client_credentials":
            return JSONResponse({"error": "unsupported_grant_type"}, status_code=400)
        value, _serial = tokens.issue()
        return JSONResponse({"access_token": value, "token_type": "Bearer", "expires_in": tokens.lifetime})

    return Starlette(
        routes=[
            Route(
                "/.well-known/oauth-authorization-server", MetadataHandler(metadata).handle, methods=["GET"]
            ),
            Route("/token", token, methods=["POST"]),
        ]
    )


def resource_server(issuer: str, resource: str, tokens: Tokens) -> Starlette:
    mcp: MCPServer[Any] = MCPServer(
        "secure",
        token_verifier=tokens,
        auth=AuthSettings(
            issuer_url=AnyHttpUrl(issuer),
            resource_server_url=AnyHttpUrl(resource),
            validate_token_resource=False,
        ),
    )

    @mcp.tool()
    def whoami() -> str:
        """The client id and the serial number of the token this call carried."""
        access = get_access_token()
        if access is None:
            return "anonymous"
        serial, _ = tokens.issued[access.token]
        return f"{access.client_id} token={serial}"

    return mcp.streamable_http_app()


def noting_401(app: Any, tokens: Tokens) -> Any:
    """The resource server, with every 401 it answers noted as ``unauthorized``."""

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        async def noting(message: Any) -> None:
            if message["type"] == "http.response.start" and message["status"] == 401:
                tokens.note("unauthorized")
            await send(message)

        await app(scope, receive, noting)

    return wrapped


async def main_async(args: argparse.Namespace) -> None:
    as_sock = socket.socket(fileno=args.as_fd)
    rs_sock = socket.socket(fileno=args.rs_fd)
    issuer = f"http://127.0.0.1:{as_sock.getsockname()[1]}"
    resource = f"http://127.0.0.1:{rs_sock.getsockname()[1]}/mcp"
    tokens = Tokens(args.lifetime, Path(args.log))
    servers = [
        uvicorn.Server(
            uvicorn.Config(authorization_server(issuer, tokens, args.method), log_level="warning")
        ),
        uvicorn.Server(
            uvicorn.Config(
                noting_401(resource_server(issuer, resource, tokens), tokens),
                log_level="warning",
                lifespan="on",
            )
        ),
    ]
    async with anyio.create_task_group() as tg:
        tg.start_soon(servers[0].serve, [as_sock])
        tg.start_soon(servers[1].serve, [rs_sock])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--as-fd", type=int, required=True)
    parser.add_argument("--rs-fd", type=int, required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--lifetime", type=int, default=3600, help="seconds a token lives")
    parser.add_argument(
        "--method", default="client_secret_basic", choices=["client_secret_basic", "client_secret_post"]
    )
    anyio.run(main_async, parser.parse_args())


if __name__ == "__main__":
    main()

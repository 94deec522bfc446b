"""Helpers for the vault tests: a settable clock, a local OAuth token endpoint (Starlette on
127.0.0.1, port 0, under uvicorn), and builders of credential requests."""

from __future__ import annotations

import asyncio
import base64
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import unquote

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from control_plane.vault.params import CredentialCreate
from tests.support import eventually

T0 = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


class Clock:
    def __init__(self, now: datetime = T0) -> None:
        self.now = now

    def __call__(self) -> datetime:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += timedelta(seconds=seconds)


@dataclass
class TokenRequest:
    form: dict[str, str]
    basic: tuple[str, str] | None  # (client_id, client_secret) from HTTP Basic


@dataclass
class TokenEndpoint:
    """A token endpoint. ``gate``: requests wait for it to be set (open by default).
    ``fail``: answer 400 ``invalid_grant`` (echoing the refresh token, to test scrubbing)."""

    url: str = ""
    requests: list[TokenRequest] = field(default_factory=list)
    gate: asyncio.Event = field(default_factory=asyncio.Event)
    fail: bool = False
    rotate: bool = True
    expires_in: int = 3600

    async def handle(self, request: Request) -> JSONResponse:
        form = {k: str(v) for k, v in (await request.form()).items()}
        basic = None
        header = request.headers.get("authorization", "")
        if header.startswith("Basic "):
            user, _, password = base64.b64decode(header[6:]).decode().partition(":")
            basic = (unquote(user), unquote(password))
        self.requests.append(TokenRequest(form, basic))
        n = len(self.requests)
        await self.gate.wait()
        if self.fail:
            message = f"refresh token {form.get('refresh_token')} is revoked"
            return JSONResponse({"error": "invalid_grant", "error_description": message}, status_code=400)
        body: dict[str, Any] = {"access_token": f"at-new-{n}", "token_type": "Bearer"}
        if self.expires_in:
            body["expires_in"] = self.expires_in
        if self.rotate:
            body["refresh_token"] = f"rt-new-{n}"
        return JSONResponse(body)


@asynccontextmanager
async def token_endpoint() -> AsyncIterator[TokenEndpoint]:
    endpoint = TokenEndpoint()
    endpoint.gate.set()
    app = Starlette(routes=[Route("/token", endpoint.handle, methods=["POST"])])
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(
            app, lifespan="off", log_level="warning", access_log=False, timeout_graceful_shutdown=1
        )
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        await eventually(lambda: server.started or task.done())
        if task.done():
            task.result()
        endpoint.url = f"http://127.0.0.1:{port}/token"
        yield endpoint
    finally:
        endpoint.gate.set()
        server.should_exit = True
        await asyncio.wait_for(task, timeout=10)
        sock.close()


def static_bearer(url: str = "https://mcp.example.com/mcp", token: str = "sb-token-1") -> CredentialCreate:
    return CredentialCreate.model_validate(
        {"auth": {"type": "static_bearer", "mcp_server_url": url, "token": token}}
    )


def mcp_oauth(
    *,
    url: str = "https://oauth-mcp.example.com/mcp",
    token_endpoint: str = "https://auth.example.com/token",
    access_token: str = "at-old",
    refresh_token: str = "rt-old",
    client_secret: str | None = "cs-secret",
    method: str = "client_secret_basic",
    expires_at: datetime | None = None,
    refresh: bool = True,
) -> CredentialCreate:
    auth: dict[str, Any] = {"type": "mcp_oauth", "mcp_server_url": url, "access_token": access_token}
    if expires_at is not None:
        auth["expires_at"] = expires_at.isoformat()
    if refresh:
        endpoint_auth: dict[str, Any] = {"type": method}
        if method != "none":
            endpoint_auth["client_secret"] = client_secret
        auth["refresh"] = {
            "client_id": "client-1",
            "refresh_token": refresh_token,
            "token_endpoint": token_endpoint,
            "token_endpoint_auth": endpoint_auth,
            "scope": "read write",
            "resource": "https://oauth-mcp.example.com/",
        }
    return CredentialCreate.model_validate({"auth": auth})


def env_var(
    value: str = "ev-secret-1", hosts: list[str] | None = None, name: str = "API_KEY"
) -> CredentialCreate:
    networking: dict[str, Any] = (
        {"type": "unrestricted"} if hosts is None else {"type": "limited", "allowed_hosts": hosts}
    )
    return CredentialCreate.model_validate(
        {
            "auth": {
                "type": "environment_variable",
                "secret_name": name,
                "secret_value": value,
                "networking": networking,
            }
        }
    )

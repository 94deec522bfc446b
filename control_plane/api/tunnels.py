"""``/v1/tunnels`` and ``/v1/tunnels/{tunnel_id}/certificates`` (MCP tunnels) — HTTP only.

Each route calls one method of :class:`~control_plane.mcp_tunnels.service.TunnelService` (which
holds the rules: domains, tokens, the certificate checks and limits) and shows the result as the
SDK's ``BetaTunnel``, ``BetaTunnelToken`` and ``BetaTunnelCertificate``. A certificate's PEM is
never shown. Tunnels belong to no environment: any key may read them (a read never shows the
token); creating, archiving, revealing or rotating the token and adding or archiving certificates
need an unscoped ``read_write`` or ``admin`` key (the router's dependency, in ``app.py``). The
tokens are sealed with the vault's keyring: without a vault every route answers 503.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from control_plane.api.query import check_limit, page_body
from control_plane.errors import NotConfigured
from control_plane.mcp_tunnels import ListQuery, RevealedToken, TunnelService
from control_plane.mcp_tunnels.service import MAX_PAGE
from control_plane.store.base import Resource
from control_plane.timestamps import timestamp

__all__ = ["certificate_json", "tunnel_json", "tunnels_router"]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class TunnelCreate(_Body):
    display_name: str | None = None


class TokenRotate(_Body):
    reason: str | None = None


class CertificateCreate(_Body):
    ca_certificate_pem: str


def _stamp(value: datetime | None) -> str | None:
    return timestamp(value) if value is not None else None


def tunnel_json(res: Resource) -> dict[str, Any]:
    return {
        "type": "tunnel",
        "id": res.id,
        "domain": res.body["domain"],
        "display_name": res.body.get("display_name"),
        "created_at": timestamp(res.created_at),
        "archived_at": _stamp(res.archived_at),
    }


def _token_json(token: RevealedToken) -> dict[str, Any]:
    return {"type": "tunnel_token", "id": token.id, "tunnel_token": token.token}


def certificate_json(res: Resource) -> dict[str, Any]:
    return {
        "type": "tunnel_certificate",
        "id": res.id,
        "tunnel_id": res.body["tunnel_id"],
        "fingerprint": res.body["fingerprint"],
        "expires_at": res.body.get("expires_at"),
        "created_at": timestamp(res.created_at),
        "archived_at": _stamp(res.archived_at),
    }


class _TunnelRoutes:
    """The routes, one service call each."""

    def __init__(self, service: TunnelService | None) -> None:
        self._configured = service

    @property
    def _service(self) -> TunnelService:
        if self._configured is None:
            raise NotConfigured("MCP tunnels need the vault (it seals their tokens); none is configured")
        return self._configured

    async def create(self, body: TunnelCreate) -> dict[str, Any]:
        return tunnel_json(await self._service.create(body.display_name))

    async def retrieve(self, tunnel_id: str) -> dict[str, Any]:
        return tunnel_json(await self._service.get(tunnel_id))

    async def list_(
        self, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        query = ListQuery(check_limit(limit, MAX_PAGE), page, include_archived)
        found = await self._service.list(query)
        return page_body([tunnel_json(r) for r in found.items], found.next_cursor)

    async def archive(self, tunnel_id: str) -> dict[str, Any]:
        return tunnel_json(await self._service.archive(tunnel_id))

    async def reveal_token(self, tunnel_id: str) -> dict[str, Any]:
        return _token_json(await self._service.reveal_token(tunnel_id))

    async def rotate_token(self, tunnel_id: str, body: TokenRotate | None = None) -> dict[str, Any]:
        reason = body.reason if body is not None else None
        return _token_json(await self._service.rotate_token(tunnel_id, reason))

    async def add_certificate(self, tunnel_id: str, body: CertificateCreate) -> dict[str, Any]:
        return certificate_json(await self._service.add_certificate(tunnel_id, body.ca_certificate_pem))

    async def retrieve_certificate(self, tunnel_id: str, certificate_id: str) -> dict[str, Any]:
        return certificate_json(await self._service.get_certificate(tunnel_id, certificate_id))

    async def list_certificates(
        self, tunnel_id: str, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        query = ListQuery(check_limit(limit, MAX_PAGE), page, include_archived)
        found = await self._service.list_certificates(tunnel_id, query)
        return page_body([certificate_json(r) for r in found.items], found.next_cursor)

    async def archive_certificate(self, tunnel_id: str, certificate_id: str) -> dict[str, Any]:
        return certificate_json(await self._service.archive_certificate(tunnel_id, certificate_id))


def tunnels_router(service: TunnelService | None) -> APIRouter:
    routes = _TunnelRoutes(service)
    router = APIRouter()
    one = "/v1/tunnels/{tunnel_id}"
    certs, cert = one + "/certificates", one + "/certificates/{certificate_id}"
    router.add_api_route("/v1/tunnels", routes.create, methods=["POST"])
    router.add_api_route("/v1/tunnels", routes.list_, methods=["GET"])
    router.add_api_route(one, routes.retrieve, methods=["GET"])
    router.add_api_route(one + "/archive", routes.archive, methods=["POST"])
    router.add_api_route(one + "/reveal_token", routes.reveal_token, methods=["POST"])
    router.add_api_route(one + "/rotate_token", routes.rotate_token, methods=["POST"])
    router.add_api_route(certs, routes.add_certificate, methods=["POST"])
    router.add_api_route(certs, routes.list_certificates, methods=["GET"])
    router.add_api_route(cert, routes.retrieve_certificate, methods=["GET"])
    router.add_api_route(cert + "/archive", routes.archive_certificate, methods=["POST"])
    return router

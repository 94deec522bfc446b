"""``/v1/vaults`` and ``/v1/vaults/{vault_id}/credentials``: write-only credential storage, HTTP only.

Each route calls one method of :class:`~control_plane.vault.service.VaultService` (which holds the
rules, credential validation included) and shows the result. Responses carry public fields only.
The ``auth`` of a credential is rebuilt from an allow-list per auth type (:func:`auth_json`), never
copied from storage, so a secret cannot reach a response even if it were stored in the wrong place.
``mcp_oauth_validate`` does not probe the MCP server; for a credential with a refresh configuration
it performs a refresh (``valid`` when it succeeds, ``invalid`` when the token endpoint refuses,
``unknown`` when it cannot be reached or the outbound rules refuse its address); without one the
status is ``unknown``. The token endpoint's answer is summarized (status code, content type), never
echoed: ``http_response.body`` is always empty. When the control plane runs without a vault, every
route answers 503.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from fastapi import APIRouter

from control_plane.api.errors import ApiError
from control_plane.api.query import check_limit, page_body
from control_plane.store.base import Resource
from control_plane.timestamps import timestamp
from control_plane.vault.components import Vault
from control_plane.vault.params import CredentialCreate, CredentialUpdate, VaultCreate, VaultUpdate
from control_plane.vault.service import CredentialValidation, VaultService

__all__ = ["auth_json", "credential_json", "vault_json", "vaults_router"]

MAX_PAGE = 100


def _stamp(value: datetime | None) -> str | None:
    return timestamp(value) if value is not None else None


def vault_json(res: Resource) -> dict[str, Any]:
    return {
        "type": "vault",
        "id": res.id,
        "display_name": res.body["display_name"],
        "metadata": res.body.get("metadata", {}),
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
        "archived_at": _stamp(res.archived_at),
    }


def auth_json(auth: dict[str, Any]) -> dict[str, Any]:
    """The returned fields of a stored ``auth``, by allow-list."""
    kind = auth["type"]
    if kind == "static_bearer":
        return {"type": kind, "mcp_server_url": auth["mcp_server_url"]}
    if kind == "mcp_oauth":
        refresh = auth.get("refresh")
        return {
            "type": kind,
            "mcp_server_url": auth["mcp_server_url"],
            "expires_at": auth.get("expires_at"),
            "refresh": None
            if refresh is None
            else {
                "client_id": refresh["client_id"],
                "token_endpoint": refresh["token_endpoint"],
                "token_endpoint_auth": {"type": refresh["token_endpoint_auth"]["type"]},
                "resource": refresh.get("resource"),
                "scope": refresh.get("scope"),
            },
        }
    networking = auth["networking"]
    locations = auth["injection_location"]
    return {
        "type": kind,
        "secret_name": auth["secret_name"],
        "networking": {"type": "unrestricted"}
        if networking["type"] == "unrestricted"
        else {"type": "limited", "allowed_hosts": list(networking["allowed_hosts"])},
        "injection_location": {"header": bool(locations["header"]), "body": bool(locations["body"])},
    }


def credential_json(res: Resource) -> dict[str, Any]:
    return {
        "type": "vault_credential",
        "id": res.id,
        "vault_id": res.body["vault_id"],
        "display_name": res.body.get("display_name"),
        "metadata": res.body.get("metadata", {}),
        "auth": auth_json(res.body["auth"]),
        "created_at": timestamp(res.created_at),
        "updated_at": timestamp(res.updated_at),
        "archived_at": _stamp(res.archived_at),
    }


def _validation_json(vault_id: str, credential_id: str, found: CredentialValidation) -> dict[str, Any]:
    return {
        "type": "vault_credential_validation",
        "credential_id": credential_id,
        "vault_id": vault_id,
        "status": found.status,
        "has_refresh_token": found.has_refresh_token,
        "validated_at": timestamp(found.validated_at),
        "mcp_probe": None,
        "refresh": found.refresh,
    }


class _VaultRoutes:
    """The routes, one service call each; every one answers 503 when there is no vault."""

    def __init__(self, vault: Vault | None) -> None:
        self._vault = vault

    def _parts(self) -> Vault:
        if self._vault is None:
            raise ApiError(503, "the vault is not configured on this control plane")
        return self._vault

    @property
    def _service(self) -> VaultService:
        return self._parts().service

    # -- vaults -----------------------------------------------------------------------------------

    async def create(self, body: VaultCreate) -> dict[str, Any]:
        return vault_json(await self._service.create_vault(body))

    async def retrieve(self, vault_id: str) -> dict[str, Any]:
        return vault_json(await self._service.get_vault(vault_id))

    async def update(self, vault_id: str, body: VaultUpdate) -> dict[str, Any]:
        return vault_json(await self._service.update_vault(vault_id, body))

    async def list_(
        self, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        result = await self._service.list_vaults(
            include_archived=include_archived, limit=check_limit(limit, MAX_PAGE), cursor=page
        )
        return page_body([vault_json(r) for r in result.items], result.next_cursor)

    async def archive(self, vault_id: str) -> dict[str, Any]:
        return vault_json(await self._service.archive_vault(vault_id))

    async def delete(self, vault_id: str) -> dict[str, Any]:
        await self._service.delete_vault(vault_id)
        return {"id": vault_id, "type": "vault_deleted"}

    # -- credentials ------------------------------------------------------------------------------

    async def create_credential(self, vault_id: str, body: CredentialCreate) -> dict[str, Any]:
        return credential_json(await self._service.create_credential(vault_id, body))

    async def retrieve_credential(self, vault_id: str, credential_id: str) -> dict[str, Any]:
        return credential_json(await self._service.get_credential(vault_id, credential_id))

    async def update_credential(
        self, vault_id: str, credential_id: str, body: CredentialUpdate
    ) -> dict[str, Any]:
        return credential_json(await self._service.update_credential(vault_id, credential_id, body))

    async def list_credentials(
        self, vault_id: str, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        result = await self._service.list_credentials(
            vault_id, include_archived=include_archived, limit=check_limit(limit, MAX_PAGE), cursor=page
        )
        return page_body([credential_json(r) for r in result.items], result.next_cursor)

    async def archive_credential(self, vault_id: str, credential_id: str) -> dict[str, Any]:
        return credential_json(await self._service.archive_credential(vault_id, credential_id))

    async def delete_credential(self, vault_id: str, credential_id: str) -> dict[str, Any]:
        await self._service.delete_credential(vault_id, credential_id)
        return {"id": credential_id, "type": "vault_credential_deleted"}

    async def validate(self, vault_id: str, credential_id: str) -> dict[str, Any]:
        vault = self._parts()
        found = await vault.service.validate_credential(vault_id, credential_id, vault.refresher)
        return _validation_json(vault_id, credential_id, found)


def vaults_router(vault: Vault | None) -> APIRouter:
    routes = _VaultRoutes(vault)
    router = APIRouter()
    one = "/v1/vaults/{vault_id}"
    credential = one + "/credentials/{credential_id}"
    router.add_api_route("/v1/vaults", routes.create, methods=["POST"])
    router.add_api_route(one, routes.retrieve, methods=["GET"])
    router.add_api_route(one, routes.update, methods=["POST"])
    router.add_api_route("/v1/vaults", routes.list_, methods=["GET"])
    router.add_api_route(one + "/archive", routes.archive, methods=["POST"])
    router.add_api_route(one, routes.delete, methods=["DELETE"])
    router.add_api_route(one + "/credentials", routes.create_credential, methods=["POST"])
    router.add_api_route(credential, routes.retrieve_credential, methods=["GET"])
    router.add_api_route(credential, routes.update_credential, methods=["POST"])
    router.add_api_route(one + "/credentials", routes.list_credentials, methods=["GET"])
    router.add_api_route(credential + "/archive", routes.archive_credential, methods=["POST"])
    router.add_api_route(credential, routes.delete_credential, methods=["DELETE"])
    router.add_api_route(credential + "/mcp_oauth_validate", routes.validate, methods=["POST"])
    return router

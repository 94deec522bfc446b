"""``/v1/vaults`` and ``/v1/vaults/{vault_id}/credentials``: write-only credential storage.

Responses carry public fields only. The ``auth`` of a credential is rebuilt from an allow-list per
auth type (:func:`auth_json`), never copied from storage, so a secret cannot reach a response even
if it were stored in the wrong place. ``mcp_oauth_validate`` does not probe the MCP server; for a
credential with a refresh configuration it performs a refresh (``valid`` when it succeeds,
``invalid`` when the token endpoint refuses, ``unknown`` when it cannot be reached or the outbound
rules refuse its address); without one the status is ``unknown``. The token endpoint's answer is
summarized (status code, content type), never echoed: ``http_response.body`` is always empty.
When the control plane runs without a vault, every route answers 503.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from fastapi import APIRouter

from control_plane.api.errors import ApiError
from control_plane.api.query import check_limit
from control_plane.api.wire import page_body, timestamp
from control_plane.errors import InvalidRequest
from control_plane.store.base import Resource
from control_plane.vault.components import Vault
from control_plane.vault.params import CredentialCreate, CredentialUpdate, VaultCreate, VaultUpdate

__all__ = ["auth_json", "credential_json", "vault_json", "vaults_router"]

MAX_PAGE = 100
_VALIDATION_STATUS = {
    "succeeded": "valid",
    "failed": "invalid",
    "no_refresh_token": "invalid",
    "connect_error": "unknown",
}


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


def vaults_router(vault: Vault | None, clock: Callable[[], datetime]) -> APIRouter:
    router = APIRouter()

    def parts() -> Vault:
        if vault is None:
            raise ApiError(503, "the vault is not configured on this control plane")
        return vault

    # -- vaults -----------------------------------------------------------------------------------

    @router.post("/v1/vaults")
    async def create(body: VaultCreate) -> dict[str, Any]:
        return vault_json(await parts().service.create_vault(body))

    @router.get("/v1/vaults/{vault_id}")
    async def retrieve(vault_id: str) -> dict[str, Any]:
        return vault_json(await parts().service.get_vault(vault_id))

    @router.post("/v1/vaults/{vault_id}")
    async def update(vault_id: str, body: VaultUpdate) -> dict[str, Any]:
        return vault_json(await parts().service.update_vault(vault_id, body))

    @router.get("/v1/vaults")
    async def list_(
        limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        result = await parts().service.list_vaults(
            include_archived=include_archived, limit=check_limit(limit, MAX_PAGE), cursor=page
        )
        return page_body([vault_json(r) for r in result.items], result.next_cursor)

    @router.post("/v1/vaults/{vault_id}/archive")
    async def archive(vault_id: str) -> dict[str, Any]:
        return vault_json(await parts().service.archive_vault(vault_id))

    @router.delete("/v1/vaults/{vault_id}")
    async def delete(vault_id: str) -> dict[str, Any]:
        await parts().service.delete_vault(vault_id)
        return {"id": vault_id, "type": "vault_deleted"}

    # -- credentials ------------------------------------------------------------------------------

    @router.post("/v1/vaults/{vault_id}/credentials")
    async def create_credential(vault_id: str, body: CredentialCreate) -> dict[str, Any]:
        return credential_json(await parts().service.create_credential(vault_id, body))

    @router.get("/v1/vaults/{vault_id}/credentials/{credential_id}")
    async def retrieve_credential(vault_id: str, credential_id: str) -> dict[str, Any]:
        return credential_json(await parts().service.get_credential(vault_id, credential_id))

    @router.post("/v1/vaults/{vault_id}/credentials/{credential_id}")
    async def update_credential(vault_id: str, credential_id: str, body: CredentialUpdate) -> dict[str, Any]:
        return credential_json(await parts().service.update_credential(vault_id, credential_id, body))

    @router.get("/v1/vaults/{vault_id}/credentials")
    async def list_credentials(
        vault_id: str, limit: int = 20, page: str | None = None, include_archived: bool = False
    ) -> dict[str, Any]:
        result = await parts().service.list_credentials(
            vault_id, include_archived=include_archived, limit=check_limit(limit, MAX_PAGE), cursor=page
        )
        return page_body([credential_json(r) for r in result.items], result.next_cursor)

    @router.post("/v1/vaults/{vault_id}/credentials/{credential_id}/archive")
    async def archive_credential(vault_id: str, credential_id: str) -> dict[str, Any]:
        return credential_json(await parts().service.archive_credential(vault_id, credential_id))

    @router.delete("/v1/vaults/{vault_id}/credentials/{credential_id}")
    async def delete_credential(vault_id: str, credential_id: str) -> dict[str, Any]:
        await parts().service.delete_credential(vault_id, credential_id)
        return {"id": credential_id, "type": "vault_credential_deleted"}

    @router.post("/v1/vaults/{vault_id}/credentials/{credential_id}/mcp_oauth_validate")
    async def validate(vault_id: str, credential_id: str) -> dict[str, Any]:
        v = parts()
        res = await v.service.get_credential(vault_id, credential_id)
        if res.body["auth"]["type"] != "mcp_oauth":
            raise InvalidRequest(
                f"credential {credential_id!r} is {res.body['auth']['type']!r}; only mcp_oauth credentials "
                "can be validated",
                param="credential_id",
            )
        if res.archived_at is not None:
            raise InvalidRequest(f"credential {credential_id!r} is archived", param="credential_id")
        refresh: dict[str, Any] | None
        if res.body["auth"].get("refresh") is None or not res.body.get("has_refresh_token"):
            status, refresh = "unknown", {"status": "no_refresh_token", "http_response": None}
        else:
            result = await v.refresher.refresh(credential_id)
            status = _VALIDATION_STATUS[result.status]
            refresh = {"status": result.status, "http_response": result.http_response}
        current = await v.service.get_credential(vault_id, credential_id)
        return {
            "type": "vault_credential_validation",
            "credential_id": credential_id,
            "vault_id": vault_id,
            "status": status,
            "has_refresh_token": bool(current.body.get("has_refresh_token")),
            "validated_at": timestamp(clock()),
            "mcp_probe": None,
            "refresh": refresh,
        }

    return router

"""From request parameters to a stored credential ``auth``: the public part and the secrets.

``new_auth`` validates a create request; ``apply_auth_update`` validates an update against the
stored ``auth`` and says which secrets change. Rules (as the API documents them):

* ``auth.type`` never changes; neither do ``mcp_server_url``, ``secret_name``, ``refresh.client_id``
  and ``refresh.token_endpoint``.
* ``expires_at`` must be in the future. A new ``access_token`` without ``expires_at`` keeps the
  stored expiry.
* ``refresh.scope = ""`` clears the scope; ``refresh = null`` removes the refresh configuration.
* A new ``client_secret`` keeps the stored ``token_endpoint_auth`` type; it needs a stored type of
  ``client_secret_basic`` or ``client_secret_post``.
* ``networking`` is replaced whole; ``injection_location`` is patched and must keep one location on.
* A token endpoint must be ``https`` (plain ``http`` only to a loopback host): the refresh token and
  client secret are sent there.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from control_plane.errors import InvalidRequest
from control_plane.timestamps import timestamp
from control_plane.urls import normalize_url
from control_plane.vault.binding import check_allowed_host, is_loopback_host
from control_plane.vault.params import (
    EnvironmentVariableCreate,
    EnvironmentVariableUpdate,
    LimitedNetworking,
    McpOAuthCreate,
    McpOAuthUpdate,
    RefreshCreate,
    StaticBearerCreate,
    StaticBearerUpdate,
    TokenEndpointAuthSecret,
    UnrestrictedNetworking,
)

__all__ = ["AuthChange", "AuthCreate", "AuthUpdate", "apply_auth_update", "new_auth"]

AuthCreate = McpOAuthCreate | StaticBearerCreate | EnvironmentVariableCreate
AuthUpdate = McpOAuthUpdate | StaticBearerUpdate | EnvironmentVariableUpdate


@dataclass
class AuthChange:
    """The new public ``auth``; secrets to set and secrets to drop in the payload."""

    auth: dict[str, Any]
    set_secrets: dict[str, str] = field(default_factory=dict)
    drop_secrets: set[str] = field(default_factory=set)


def _future(value: datetime, now: datetime, param: str) -> str:
    value = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if value <= now:
        raise InvalidRequest(f"{param}: must be in the future", param=param)
    return timestamp(value)


def _token_endpoint(url: str) -> str:
    param = "auth.refresh.token_endpoint"
    normalized = normalize_url(url, param=param)
    if normalized.startswith("http://") and not is_loopback_host(normalized):
        raise InvalidRequest(
            f"{param}: must be an https URL (the refresh token and client secret are sent there)",
            param=param,
        )
    return url


def _networking(value: UnrestrictedNetworking | LimitedNetworking) -> dict[str, Any]:
    if isinstance(value, UnrestrictedNetworking):
        return {"type": "unrestricted"}
    hosts = [check_allowed_host(h, param="auth.networking.allowed_hosts") for h in value.allowed_hosts]
    return {"type": "limited", "allowed_hosts": list(dict.fromkeys(hosts))}


def _check_locations(locations: dict[str, bool]) -> dict[str, bool]:
    if not (locations["header"] or locations["body"]):
        raise InvalidRequest(
            "auth.injection_location: at least one of header and body must be enabled",
            param="auth.injection_location",
        )
    return locations


def _refresh(refresh: RefreshCreate) -> tuple[dict[str, Any], dict[str, str]]:
    endpoint_auth = refresh.token_endpoint_auth
    public = {
        "client_id": refresh.client_id,
        "token_endpoint": _token_endpoint(refresh.token_endpoint),
        "token_endpoint_auth": {"type": endpoint_auth.type},
        "resource": refresh.resource or None,
        "scope": refresh.scope or None,
    }
    secrets = {"refresh_token": refresh.refresh_token.get_secret_value()}
    if isinstance(endpoint_auth, TokenEndpointAuthSecret):
        secrets["client_secret"] = endpoint_auth.client_secret.get_secret_value()
    return public, secrets


def new_auth(params: AuthCreate, now: datetime) -> AuthChange:
    """The stored form of a create request's ``auth``; ``set_secrets`` is the whole payload."""
    if isinstance(params, StaticBearerCreate):
        normalize_url(params.mcp_server_url, param="auth.mcp_server_url")
        return AuthChange(
            {"type": "static_bearer", "mcp_server_url": params.mcp_server_url},
            {"token": params.token.get_secret_value()},
        )
    if isinstance(params, McpOAuthCreate):
        normalize_url(params.mcp_server_url, param="auth.mcp_server_url")
        auth: dict[str, Any] = {
            "type": "mcp_oauth",
            "mcp_server_url": params.mcp_server_url,
            "expires_at": _future(params.expires_at, now, "auth.expires_at") if params.expires_at else None,
            "refresh": None,
        }
        secrets = {"access_token": params.access_token.get_secret_value()}
        if params.refresh is not None:
            auth["refresh"], refresh_secrets = _refresh(params.refresh)
            secrets.update(refresh_secrets)
        return AuthChange(auth, secrets)
    locations = params.injection_location
    return AuthChange(
        {
            "type": "environment_variable",
            "secret_name": params.secret_name,
            "networking": _networking(params.networking),
            "injection_location": _check_locations(
                {"header": locations.header, "body": locations.body}
                if locations is not None
                else {"header": True, "body": False}
            ),
        },
        {"secret_value": params.secret_value.get_secret_value()},
    )


def _immutable(sent: str | None, stored: str, param: str) -> None:
    if sent is not None and sent != stored:
        raise InvalidRequest(f"{param} cannot be changed; create a new credential instead", param=param)


def apply_auth_update(current: dict[str, Any], params: AuthUpdate, now: datetime) -> AuthChange:
    """The stored ``auth`` after an update request's ``auth``."""
    if params.type != current["type"]:
        raise InvalidRequest(
            f"auth.type cannot be changed (the credential is {current['type']!r}, not {params.type!r})",
            param="auth.type",
        )
    change = AuthChange(dict(current))
    sent = params.model_fields_set
    if isinstance(params, StaticBearerUpdate):
        _immutable(params.mcp_server_url, current["mcp_server_url"], "auth.mcp_server_url")
        if params.token is not None:
            change.set_secrets["token"] = params.token.get_secret_value()
    elif isinstance(params, McpOAuthUpdate):
        _immutable(params.mcp_server_url, current["mcp_server_url"], "auth.mcp_server_url")
        if params.access_token is not None:
            change.set_secrets["access_token"] = params.access_token.get_secret_value()
        if "expires_at" in sent:
            expires = params.expires_at
            change.auth["expires_at"] = _future(expires, now, "auth.expires_at") if expires else None
        if "refresh" in sent:
            _update_refresh(change, params)
    else:
        _immutable(params.secret_name, current["secret_name"], "auth.secret_name")
        if params.secret_value is not None:
            change.set_secrets["secret_value"] = params.secret_value.get_secret_value()
        if params.networking is not None:
            change.auth["networking"] = _networking(params.networking)
        if params.injection_location is not None:
            patch = params.injection_location.model_dump(exclude_none=True)
            change.auth["injection_location"] = _check_locations({**current["injection_location"], **patch})
    return change


def _update_refresh(change: AuthChange, params: McpOAuthUpdate) -> None:
    update = params.refresh
    if update is None:  # null: the credential no longer refreshes
        change.auth["refresh"] = None
        change.drop_secrets |= {"refresh_token", "client_secret"}
        return
    current = change.auth.get("refresh")
    if current is None:
        raise InvalidRequest(
            "auth.refresh: the credential has no refresh configuration to update; create a new "
            "credential with one",
            param="auth.refresh",
        )
    refresh = dict(current)
    _immutable(update.client_id, current["client_id"], "auth.refresh.client_id")
    _immutable(update.token_endpoint, current["token_endpoint"], "auth.refresh.token_endpoint")
    if update.refresh_token is not None:
        change.set_secrets["refresh_token"] = update.refresh_token.get_secret_value()
    if update.scope is not None:
        refresh["scope"] = update.scope or None
    endpoint_auth = update.token_endpoint_auth
    if endpoint_auth is not None and endpoint_auth.client_secret is not None:
        if current["token_endpoint_auth"]["type"] == "none":
            raise InvalidRequest(
                "auth.refresh.token_endpoint_auth: the credential authenticates to its token endpoint "
                "with no client secret; a client secret cannot be added",
                param="auth.refresh.token_endpoint_auth",
            )
        change.set_secrets["client_secret"] = endpoint_auth.client_secret.get_secret_value()
    change.auth["refresh"] = refresh

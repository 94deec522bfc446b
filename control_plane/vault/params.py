"""Request bodies of ``/v1/vaults`` and their credentials (pydantic, unknown keys refused).

Secret fields are :class:`~pydantic.SecretStr`: a request model that ends up in a log line or a
traceback shows ``'**********'``, never the value. Whether an optional field was sent at all
(``null`` vs omitted) is read from ``model_fields_set``. Immutable fields (``mcp_server_url``,
``secret_name``, ``client_id``, ``token_endpoint``) are accepted on update only so that the
service can refuse a *change* with a message naming the field.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr

__all__ = [
    "CredentialCreate",
    "CredentialUpdate",
    "EnvironmentVariableCreate",
    "EnvironmentVariableUpdate",
    "InjectionLocation",
    "InjectionLocationUpdate",
    "LimitedNetworking",
    "McpOAuthCreate",
    "McpOAuthUpdate",
    "RefreshCreate",
    "RefreshUpdate",
    "StaticBearerCreate",
    "StaticBearerUpdate",
    "TokenEndpointAuthNone",
    "TokenEndpointAuthSecret",
    "TokenEndpointAuthSecretUpdate",
    "UnrestrictedNetworking",
    "VaultCreate",
    "VaultUpdate",
]

MAX_SECRET_CHARS = 16_384

Secret = Annotated[SecretStr, Field(min_length=1, max_length=MAX_SECRET_CHARS)]
DisplayName = Annotated[str, Field(min_length=1, max_length=255)]
Url = Annotated[str, Field(min_length=1, max_length=2048)]
ShortText = Annotated[str, Field(max_length=1024)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


# -- vaults ---------------------------------------------------------------------------------------


class VaultCreate(_Body):
    display_name: DisplayName
    metadata: dict[str, str] = Field(default_factory=dict)


class VaultUpdate(_Body):
    display_name: DisplayName | None = None
    metadata: dict[str, str | None] | None = None


# -- credential auth: create ----------------------------------------------------------------------


class TokenEndpointAuthNone(_Body):
    type: Literal["none"]


class TokenEndpointAuthSecret(_Body):
    type: Literal["client_secret_basic", "client_secret_post"]
    client_secret: Secret


class RefreshCreate(_Body):
    client_id: Annotated[str, Field(min_length=1, max_length=1024)]
    refresh_token: Secret
    token_endpoint: Url
    token_endpoint_auth: Annotated[
        TokenEndpointAuthNone | TokenEndpointAuthSecret, Field(discriminator="type")
    ]
    resource: ShortText | None = None
    scope: ShortText | None = None


class McpOAuthCreate(_Body):
    type: Literal["mcp_oauth"]
    mcp_server_url: Url
    access_token: Secret
    expires_at: datetime | None = None
    refresh: RefreshCreate | None = None


class StaticBearerCreate(_Body):
    type: Literal["static_bearer"]
    mcp_server_url: Url
    token: Secret


class UnrestrictedNetworking(_Body):
    type: Literal["unrestricted"]


class LimitedNetworking(_Body):
    type: Literal["limited"]
    allowed_hosts: Annotated[list[Annotated[str, Field(max_length=255)]], Field(min_length=1, max_length=16)]


Networking = Annotated[UnrestrictedNetworking | LimitedNetworking, Field(discriminator="type")]


class InjectionLocation(_Body):
    header: bool = True
    body: bool = False


class EnvironmentVariableCreate(_Body):
    type: Literal["environment_variable"]
    secret_name: Annotated[str, Field(min_length=1, max_length=255, pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")]
    secret_value: Secret
    networking: Networking
    injection_location: InjectionLocation | None = None


class CredentialCreate(_Body):
    auth: Annotated[
        McpOAuthCreate | StaticBearerCreate | EnvironmentVariableCreate, Field(discriminator="type")
    ]
    display_name: Annotated[str, Field(max_length=255)] | None = None
    metadata: dict[str, str] = Field(default_factory=dict)


# -- credential auth: update ----------------------------------------------------------------------


class TokenEndpointAuthSecretUpdate(_Body):
    type: Literal["client_secret_basic", "client_secret_post"]
    client_secret: Secret | None = None


class RefreshUpdate(_Body):
    refresh_token: Secret | None = None
    scope: ShortText | None = None  # "" clears
    token_endpoint_auth: TokenEndpointAuthSecretUpdate | None = None
    client_id: str | None = None  # immutable
    token_endpoint: str | None = None  # immutable


class McpOAuthUpdate(_Body):
    type: Literal["mcp_oauth"]
    access_token: Secret | None = None
    expires_at: datetime | None = None  # omitted: kept; null: unknown expiry
    refresh: RefreshUpdate | None = None  # null: remove the refresh configuration
    mcp_server_url: str | None = None  # immutable


class StaticBearerUpdate(_Body):
    type: Literal["static_bearer"]
    token: Secret | None = None
    mcp_server_url: str | None = None  # immutable


class InjectionLocationUpdate(_Body):
    header: bool | None = None
    body: bool | None = None


class EnvironmentVariableUpdate(_Body):
    type: Literal["environment_variable"]
    secret_value: Secret | None = None
    networking: Networking | None = None  # replaces the stored one as a whole
    injection_location: InjectionLocationUpdate | None = None
    secret_name: str | None = None  # immutable


class CredentialUpdate(_Body):
    auth: (
        Annotated[
            McpOAuthUpdate | StaticBearerUpdate | EnvironmentVariableUpdate, Field(discriminator="type")
        ]
        | None
    ) = None
    display_name: Annotated[str, Field(max_length=255)] | None = None
    metadata: dict[str, str | None] | None = None

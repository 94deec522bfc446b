"""``client.beta.vaults`` and ``client.beta.vaults.credentials`` end to end with the official SDK,
for all three auth types. Write-only: no secret comes back in any response body, none is in the
SQLite files in plaintext, none is logged; the broker hands the secret out for a live session."""

from __future__ import annotations

import logging
import secrets
from datetime import UTC, datetime, timedelta

import anthropic
import pytest
from anthropic.types.beta.beta_managed_agents_vault import BetaManagedAgentsVault
from anthropic.types.beta.vaults import BetaManagedAgentsCredential, BetaManagedAgentsCredentialValidation

from tests.support.api_app import assert_complete, assert_valid
from tests.support.vault_app import VaultApi

MCP_URL = "https://mcp.example.com/mcp"
OAUTH_MCP_URL = "https://oauth-mcp.example.com/mcp"
CLIENT_LOGGERS = ("anthropic", "httpx2", "httpcore2")  # the official SDK and its HTTP stack


def canary(name: str) -> str:
    return f"canary-{name}-{secrets.token_hex(8)}"


async def test_vault_lifecycle(vault_api: VaultApi) -> None:
    vaults = vault_api.client.beta.vaults
    vault = await vaults.create(display_name="Alice", metadata={"external_user_id": "usr_1", "x": "1"})
    assert isinstance(vault, BetaManagedAgentsVault)
    assert_complete(vault)
    assert vault.id.startswith("vlt_")
    assert vault.type == "vault"
    assert vault.archived_at is None
    assert await vaults.retrieve(vault.id) == vault

    updated = await vaults.update(
        vault.id, display_name="Alice B", metadata={"external_user_id": None, "tier": "gold"}
    )
    assert_complete(updated)
    assert (updated.display_name, updated.metadata) == ("Alice B", {"x": "1", "tier": "gold"})

    other = await vaults.create(display_name="Bob")
    assert [v.id async for v in vaults.list(limit=1)] == [other.id, vault.id]

    archived = await vaults.archive(vault.id)
    assert archived.archived_at is not None
    assert [v.id async for v in vaults.list()] == [other.id]
    assert [v.id async for v in vaults.list(include_archived=True)] == [other.id, vault.id]
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        await vaults.update(vault.id, display_name="again")

    deleted = await vaults.delete(vault.id)
    assert (deleted.id, deleted.type) == (vault.id, "vault_deleted")
    with pytest.raises(anthropic.NotFoundError):
        await vaults.retrieve(vault.id)
    with pytest.raises(anthropic.BadRequestError):
        await vaults.create(display_name="")


async def test_credentials_are_write_only(vault_api: VaultApi, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    c = {
        name: canary(name)
        for name in (
            "token",
            "access",
            "refresh",
            "client",
            "env",
            "token2",
            "access2",
            "refresh2",
            "client2",
            "env2",
        )
    }
    client = vault_api.client
    creds = client.beta.vaults.credentials
    vault = await client.beta.vaults.create(display_name="Alice")

    # -- create, all three types --------------------------------------------------------------------
    sb = await creds.create(
        vault.id,
        auth={"type": "static_bearer", "mcp_server_url": MCP_URL, "token": c["token"]},
        display_name="GitHub",
        metadata={"team": "infra"},
    )
    assert isinstance(sb, BetaManagedAgentsCredential)
    assert_complete(sb)
    assert sb.id.startswith("vcrd_")
    assert (sb.vault_id, sb.display_name, sb.metadata) == (vault.id, "GitHub", {"team": "infra"})
    assert sb.auth.type == "static_bearer"
    assert sb.auth.mcp_server_url == MCP_URL

    expires = datetime.now(UTC) + timedelta(hours=1)
    oauth = await creds.create(
        vault.id,
        auth={
            "type": "mcp_oauth",
            "mcp_server_url": OAUTH_MCP_URL,
            "access_token": c["access"],
            "expires_at": expires,
            "refresh": {
                "client_id": "client-1",
                "refresh_token": c["refresh"],
                "token_endpoint": vault_api.endpoint.url,
                "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": c["client"]},
                "scope": "read",
            },
        },
    )
    assert_complete(oauth)
    assert oauth.auth.type == "mcp_oauth"
    assert oauth.auth.expires_at is not None and abs((oauth.auth.expires_at - expires).total_seconds()) < 1
    assert oauth.auth.refresh is not None
    assert oauth.auth.refresh.token_endpoint_auth.type == "client_secret_basic"
    assert (oauth.auth.refresh.client_id, oauth.auth.refresh.scope, oauth.auth.refresh.resource) == (
        "client-1",
        "read",
        None,
    )

    env = await creds.create(
        vault.id,
        auth={
            "type": "environment_variable",
            "secret_name": "API_KEY",
            "secret_value": c["env"],
            "networking": {"type": "limited", "allowed_hosts": ["api.example.com", "*.corp.example"]},
            "injection_location": {"header": True, "body": True},
        },
    )
    assert_complete(env)
    assert env.auth.type == "environment_variable"
    assert env.auth.secret_name == "API_KEY"
    assert env.auth.networking.type == "limited"
    assert env.auth.networking.allowed_hosts == ["api.example.com", "*.corp.example"]
    assert (env.auth.injection_location.header, env.auth.injection_location.body) == (True, True)

    # -- retrieve, list ----------------------------------------------------------------------------
    for cred in (sb, oauth, env):
        assert await creds.retrieve(cred.id, vault_id=vault.id) == cred
    assert [x.id async for x in creds.list(vault.id, limit=2)] == [env.id, oauth.id, sb.id]

    # -- update -------------------------------------------------------------------------------------
    sb2 = await creds.update(
        sb.id,
        vault_id=vault.id,
        auth={"type": "static_bearer", "token": c["token2"]},
        metadata={"team": None},
    )
    assert_complete(sb2)
    assert sb2.metadata == {}
    oauth2 = await creds.update(
        oauth.id,
        vault_id=vault.id,
        auth={
            "type": "mcp_oauth",
            "access_token": c["access2"],
            "refresh": {
                "refresh_token": c["refresh2"],
                "scope": "",
                "token_endpoint_auth": {"type": "client_secret_basic", "client_secret": c["client2"]},
            },
        },
    )
    assert oauth2.auth.type == "mcp_oauth" and oauth2.auth.refresh is not None
    assert oauth2.auth.refresh.scope is None
    assert oauth2.auth.expires_at == oauth.auth.expires_at  # a new token without expires_at keeps it
    env2 = await creds.update(
        env.id,
        vault_id=vault.id,
        auth={
            "type": "environment_variable",
            "secret_value": c["env2"],
            "networking": {"type": "unrestricted"},
        },
    )
    assert env2.auth.type == "environment_variable"
    assert env2.auth.networking.type == "unrestricted"

    with pytest.raises(anthropic.BadRequestError, match=r"auth\.type"):
        await creds.update(sb.id, vault_id=vault.id, auth={"type": "mcp_oauth"})
    with pytest.raises(anthropic.BadRequestError, match="secret_name"):
        await creds.update(
            env.id, vault_id=vault.id, auth={"type": "environment_variable", "secret_name": "OTHER"}
        )
    with pytest.raises(anthropic.ConflictError):
        await creds.create(vault.id, auth={"type": "static_bearer", "mcp_server_url": MCP_URL, "token": "x"})
    with pytest.raises(anthropic.NotFoundError):
        await creds.retrieve(sb.id, vault_id=(await client.beta.vaults.create(display_name="other")).id)

    # -- validate: a real refresh against the local token endpoint ------------------------------------
    validation = await creds.mcp_oauth_validate(oauth.id, vault_id=vault.id)
    assert isinstance(validation, BetaManagedAgentsCredentialValidation)
    assert_valid(validation)
    assert (validation.status, validation.has_refresh_token) == ("valid", True)
    assert validation.refresh is not None and validation.refresh.status == "succeeded"
    request = vault_api.endpoint.requests[-1]
    assert request.basic == ("client-1", c["client2"])
    assert request.form["refresh_token"] == c["refresh2"]
    with pytest.raises(anthropic.BadRequestError, match="mcp_oauth"):
        await creds.mcp_oauth_validate(sb.id, vault_id=vault.id)
    vault_api.endpoint.fail = True
    refused = await creds.mcp_oauth_validate(oauth.id, vault_id=vault.id)
    assert refused.status == "invalid"
    assert refused.refresh is not None and refused.refresh.http_response is not None
    assert refused.refresh.http_response.status_code == 400
    assert refused.refresh.http_response.body == ""  # a summary only: the body is never echoed

    # -- the broker hands the secret out for a live session only ------------------------------------
    environment = await client.beta.environments.create(name="pool", config={"type": "self_hosted"})
    agent = await client.beta.agents.create(name="coder", model="claude-opus-4-8")
    session = await client.beta.sessions.create(
        agent=agent.id, environment_id=environment.id, vault_ids=[vault.id]
    )
    lease = await vault_api.store.acquire_lease(session.id, "harness-1", 30, datetime.now(UTC))
    assert lease is not None
    broker = vault_api.vault.broker
    ref = await broker.find_for_mcp(session.id, "https://MCP.example.com:443/mcp")
    assert ref is not None and ref.credential_id == sb.id
    capability = await broker.issue(session.id, lease.epoch, ref)
    assert (await broker.redeem(capability, upstream=MCP_URL)).reveal() == c["token2"]
    oauth_ref = await broker.find_for_mcp(session.id, OAUTH_MCP_URL)
    assert oauth_ref is not None
    oauth_cap = await broker.issue(session.id, lease.epoch, oauth_ref)
    assert (await broker.redeem(oauth_cap, upstream=OAUTH_MCP_URL)).reveal().startswith("at-new-")

    # -- archive, delete ------------------------------------------------------------------------------
    archived = await creds.archive(sb.id, vault_id=vault.id)
    assert archived.archived_at is not None
    assert [x.id async for x in creds.list(vault.id)] == [env.id, oauth.id]
    assert len([x async for x in creds.list(vault.id, include_archived=True)]) == 3
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        await creds.update(sb.id, vault_id=vault.id, display_name="again")
    deleted = await creds.delete(env.id, vault_id=vault.id)
    assert (deleted.id, deleted.type) == (env.id, "vault_credential_deleted")
    with pytest.raises(anthropic.NotFoundError):
        await creds.retrieve(env.id, vault_id=vault.id)

    # -- no secret anywhere ---------------------------------------------------------------------------
    all_secrets = [*c.values(), "at-new-", "rt-new-"]
    assert len(vault_api.bodies) > 25
    for body in vault_api.bodies:
        for value in all_secrets:
            assert value.encode() not in body, f"a response body carries {value!r}"
        for internal in (b'"sealed"', b'"wrapped_dek"', b'"ciphertext"', b'"upstream"', b'"refresh_claim"'):
            assert internal not in body
    db = vault_api.db_bytes()
    assert oauth.id.encode() in db  # the files were read
    for value in all_secrets:
        assert value.encode() not in db, f"{value!r} is in the database in plaintext"
    # The SDK (client side, same process) logs its own request options at DEBUG: only the server's
    # loggers are ours to judge.
    formatter = logging.Formatter("%(name)s %(message)s")
    server_log = "\n".join(
        formatter.format(r) for r in caplog.records if not r.name.startswith(CLIENT_LOGGERS)
    )
    assert "credential" in server_log  # the server did log
    for value in all_secrets:
        assert value not in server_log, f"{value!r} was logged"


async def test_bad_requests(vault_api: VaultApi) -> None:
    creds = vault_api.client.beta.vaults.credentials
    vault = await vault_api.client.beta.vaults.create(display_name="v")
    secret = canary("bad")
    bad_auths = [
        {"type": "static_bearer", "mcp_server_url": "ftp://x.example/", "token": secret},
        {"type": "static_bearer", "mcp_server_url": MCP_URL},
        {"type": "static_bearer", "mcp_server_url": MCP_URL, "token": secret, "extra": 1},
        {
            "type": "mcp_oauth",
            "mcp_server_url": MCP_URL,
            "access_token": secret,
            "expires_at": "2001-01-01T00:00:00Z",
        },
        {
            "type": "environment_variable",
            "secret_name": "1BAD",
            "secret_value": secret,
            "networking": {"type": "unrestricted"},
        },
        {
            "type": "environment_variable",
            "secret_name": "OK",
            "secret_value": secret,
            "networking": {"type": "limited", "allowed_hosts": ["https://x.example/"]},
        },
        {"type": "nope", "token": secret},
    ]
    for auth in bad_auths:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await creds.create(vault.id, auth=auth)
        assert secret not in str(caught.value.body)
    with pytest.raises(anthropic.NotFoundError):
        await creds.create(
            "vlt_nope", auth={"type": "static_bearer", "mcp_server_url": MCP_URL, "token": secret}
        )
    with pytest.raises(anthropic.BadRequestError):
        [x async for x in vault_api.client.beta.vaults.list(limit=101)]
    for body in vault_api.bodies:
        assert secret.encode() not in body

"""``client.beta.environments`` end to end: only ``self_hosted`` is served; archived environments
refuse updates with the SDK's ``BetaEnvironmentArchivedError``."""

from __future__ import annotations

import anthropic
import pytest
from anthropic.types.beta.beta_environment import BetaEnvironment
from anthropic.types.beta.beta_environment_archived_error import BetaEnvironmentArchivedError
from anthropic.types.beta.beta_environment_not_found_error import BetaEnvironmentNotFoundError

from tests.support.api_app import Api, assert_complete


async def test_lifecycle(api: Api) -> None:
    envs = api.client.beta.environments
    env = await envs.create(name="pool", description="edges in us-east", metadata={"a": "1", "b": "2"})
    assert isinstance(env, BetaEnvironment)
    assert_complete(env)
    assert env.id.startswith("env_")
    assert env.config.type == "self_hosted"
    assert env.archived_at is None

    assert await envs.retrieve(env.id) == env
    updated = await envs.update(
        env.id, name="pool-2", description=None, metadata={"a": None, "b": "", "c": "3"}
    )
    assert_complete(updated)
    assert updated.name == "pool-2"
    assert updated.description is None
    assert updated.metadata == {"c": "3"}

    other = await envs.create(name="other", config={"type": "self_hosted"})
    assert [e.id async for e in envs.list(limit=1)] == [other.id, env.id]

    archived = await envs.archive(env.id)
    assert archived.archived_at is not None
    assert [e.id async for e in envs.list()] == [other.id]
    assert [e.id async for e in envs.list(include_archived=True)] == [other.id, env.id]
    with pytest.raises(BetaEnvironmentArchivedError) as caught:
        await envs.update(env.id, name="again")
    assert isinstance(caught.value, anthropic.BadRequestError)
    assert caught.value.error_code == "environment_archived"

    deleted = await envs.delete(env.id)
    assert deleted.id == env.id
    assert deleted.type == "environment_deleted"
    with pytest.raises(BetaEnvironmentNotFoundError):
        await envs.retrieve(env.id)
    with pytest.raises(anthropic.NotFoundError):
        await envs.delete(env.id)


async def test_cloud_config_is_refused(api: Api) -> None:
    with pytest.raises(anthropic.BadRequestError, match="self_hosted") as caught:
        await api.client.beta.environments.create(
            name="cloud", config={"type": "cloud", "networking": {"type": "unrestricted"}}
        )
    assert caught.value.type == "invalid_request_error"
    assert [e async for e in api.client.beta.environments.list(include_archived=True)] == []
    env = await api.client.beta.environments.create(name="pool")
    with pytest.raises(anthropic.BadRequestError, match="cloud"):
        await api.client.beta.environments.update(
            env.id, config={"type": "cloud", "networking": {"type": "unrestricted"}}
        )

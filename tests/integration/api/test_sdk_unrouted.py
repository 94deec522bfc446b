"""The parts of the SDK's API Outpost does not serve: a typed 404 that names the feature (not a
bare "Not Found"), a 405 in the same error shape, and the key checked first."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import anthropic
import httpx
import pytest

from tests.support.api_app import Api


async def test_an_unserved_sdk_method_is_a_404_naming_the_feature(api: Api) -> None:
    # Every Managed Agents method is served now (scripts/api_coverage.py); the SDK's other parts
    # that Outpost leaves to the model endpoint or does not have still get the typed 404.
    client = api.client
    calls: list[tuple[Callable[[], Awaitable[object]], str]] = [
        (lambda: client.models.list(), "(the models listing)"),
        (lambda: client.beta.models.retrieve("claude-x"), "(the models listing)"),
    ]
    for call, expected in calls:
        with pytest.raises(anthropic.NotFoundError) as caught:
            await call()
        assert caught.value.status_code == 404
        assert caught.value.type == "not_found_error"
        assert expected in str(caught.value.api_message)
        assert "is not supported by Outpost yet" in str(caught.value.api_message)
        assert caught.value.error_code == "unsupported_path"
        assert caught.value.request_id


async def test_any_unknown_path_is_the_same_typed_404(api: Api) -> None:
    for path in ("/v1/xyz", "/v1/agents/agent_x/nothing/here", "/nowhere"):
        response = await api.http.get(path)
        assert response.status_code == 404, response.text
        assert response.json() == {
            "type": "error",
            "error": {
                "type": "not_found_error",
                "message": f"{path} is not a path of the API Outpost serves",
                "details": {"error_code": "unsupported_path"},
            },
        }
        assert response.headers["request-id"]
    long_path = "/v1/" + "x" * 5000
    response = await api.http.post(long_path, json={})
    assert response.status_code == 404
    assert len(response.json()["error"]["message"]) < 300  # the path is clipped, not echoed whole


async def test_a_routed_path_with_another_method_is_a_typed_405(api: Api) -> None:
    response = await api.http.put("/v1/agents")
    assert response.status_code == 405, response.text
    assert response.json()["error"] == {
        "type": "invalid_request_error",
        "message": "PUT is not allowed on /v1/agents",
    }


async def test_an_unknown_path_without_a_key_is_still_401(api: Api) -> None:
    async with httpx.AsyncClient(base_url=api.url, timeout=20) as anonymous:
        for path in ("/v1/xyz", "/v1/skills", "/v1/memory_stores"):
            response = await anonymous.get(path)
            assert response.status_code == 401, response.text
            assert response.json()["error"]["type"] == "authentication_error"
    client = anthropic.AsyncAnthropic(base_url=api.url, api_key="sk-outpost-wrong", max_retries=0)
    async with client:
        with pytest.raises(anthropic.AuthenticationError):
            await client.beta.dreams.list()

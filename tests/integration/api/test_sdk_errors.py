"""Bad input through the SDK: every case maps to the documented error class, carries a
``request-id``, and leaves nothing half-written."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from urllib.parse import urlsplit

import anthropic
import httpx
import pytest

from tests.support.api_app import MAX_BODY_BYTES, Api

MESSAGE = {"type": "user.message", "content": [{"type": "text", "text": "hi"}]}


async def test_missing_and_wrong_keys(api: Api) -> None:
    for key in ("sk-outpost-wrong", ""):
        client = anthropic.AsyncAnthropic(base_url=api.url, api_key=key or "x", max_retries=0)
        async with client:
            if not key:  # no credential at all
                client = client.with_options(default_headers={"Authorization": anthropic.Omit()})
            with pytest.raises(anthropic.AuthenticationError) as caught:
                await client.beta.agents.list()
        assert caught.value.status_code == 401
        assert caught.value.type == "authentication_error"
        assert ("invalid API key" if key else "missing API key") in str(caught.value.api_message)
        assert caught.value.request_id


async def test_no_key_is_401_before_the_body_is_read(api: Api) -> None:
    """The key is checked from the headers alone: a keyless request that declares a body and sends
    only a few bytes of it is answered at once (a route reading the body would wait for the rest),
    and a keyless oversized or malformed body is a 401, not a 413 or 400."""
    address = urlsplit(api.url)
    reader, writer = await asyncio.open_connection(address.hostname, address.port)
    declared = MAX_BODY_BYTES - 1  # under the size limit: only the key check can answer early
    writer.write(
        b"POST /v1/environments HTTP/1.1\r\nhost: t\r\ncontent-type: application/json\r\n"
        + f"content-length: {declared}\r\n\r\n".encode()
        + b"[{},{},"
    )
    await writer.drain()
    status_line = await asyncio.wait_for(reader.readline(), timeout=10)
    writer.close()
    assert status_line.split()[1] == b"401"

    async with httpx.AsyncClient(base_url=api.url, timeout=20) as anonymous:
        malformed = await anonymous.post("/v1/environments", content=b"{bad")
        oversized = await anonymous.post("/v1/environments", content=b"[{}," * (MAX_BODY_BYTES // 2))
        wrong = await anonymous.post(
            "/v1/environments", content=b"{bad", headers={"x-api-key": "sk-outpost-wrong"}
        )
        openapi = await anonymous.get("/openapi.json")
        health = await anonymous.get("/healthz")
    for response in (malformed, oversized, wrong, openapi):
        assert response.status_code == 401, response.text
        assert response.json()["error"]["type"] == "authentication_error"
        assert response.headers["request-id"]
    assert health.status_code == 200
    environments = await api.client.beta.environments.list()
    assert [e async for e in environments] == []


async def test_unknown_ids_are_404(api: Api) -> None:
    beta = api.client.beta
    calls = [
        beta.agents.retrieve("agent_nope"),
        beta.agents.archive("agent_nope"),
        beta.agents.versions.list("agent_nope"),
        beta.environments.retrieve("env_nope"),
        beta.sessions.retrieve("sesn_nope"),
        beta.sessions.archive("sesn_nope"),
        beta.sessions.delete("sesn_nope"),
        beta.sessions.events.list("sesn_nope"),
        beta.sessions.events.send("sesn_nope", events=[MESSAGE]),
    ]
    for call in calls:
        with pytest.raises(anthropic.NotFoundError) as caught:
            await call
        assert caught.value.type == "not_found_error"
    assert api.runner.calls == []


async def test_malformed_json_is_400(api: Api) -> None:
    session = await api.session()
    for content in (b'{"events": [', b"not json at all", b'["a", "list"]'):
        with pytest.raises(anthropic.BadRequestError) as caught:
            await api.client.post(
                f"/v1/sessions/{session.id}/events",
                cast_to=object,
                content=content,
                options={"headers": {"content-type": "application/json"}},
            )
        assert caught.value.type == "invalid_request_error"
    assert await api.store.last_seq(session.id) == 0


async def test_oversized_bodies_are_413(api: Api) -> None:
    session = await api.session()
    big = {"type": "user.message", "content": [{"type": "text", "text": "x" * MAX_BODY_BYTES}]}
    with pytest.raises(anthropic.ContentTooLargeError) as caught:
        await api.client.beta.sessions.events.send(session.id, events=[big])
    assert caught.value.status_code == 413
    assert caught.value.type == "request_too_large"
    assert caught.value.request_id

    async def chunks() -> AsyncIterator[bytes]:  # no Content-Length: counted while streaming
        yield b'{"events": [{"type": "user.message", "content": [{"type": "text", "text": "'
        for _ in range(MAX_BODY_BYTES // 65536 + 2):
            yield b"y" * 65536
        yield b'"}]}]}'

    with pytest.raises(anthropic.ContentTooLargeError):
        await api.client.post(
            f"/v1/sessions/{session.id}/events",
            cast_to=object,
            content=chunks(),
            options={"headers": {"content-type": "application/json"}},
        )
    assert await api.store.last_seq(session.id) == 0
    assert api.runner.wakes(session.id) == 0
    # The connection and the server are fine afterwards.
    ok = await api.client.beta.sessions.events.send(session.id, events=[MESSAGE])
    assert ok.data is not None
    assert len(ok.data) == 1


async def test_beta_header_lists_and_request_ids(api: Api) -> None:
    agent = await api.client.beta.agents.with_raw_response.create(
        name="x", model="m", betas=["some-future-beta-2099-01-01", "files-api-2025-04-14"]
    )
    assert agent.headers["request-id"].startswith("req_")
    assert (await agent.parse()).version == 1
    response = await api.http.get("/v1/agents", headers={"anthropic-beta": "a, b ,managed-agents-2026-04-01"})
    assert response.status_code == 200
    assert response.json()["next_page"] is None


async def test_limits_and_types_in_queries(api: Api) -> None:
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        await api.client.beta.agents.list(limit=101)
    with pytest.raises(anthropic.BadRequestError, match="limit"):
        await api.client.beta.sessions.list(limit=0)
    # a bad page token is a 400 with every filter, memory_store_id too
    with pytest.raises(anthropic.BadRequestError, match="page"):
        await api.client.beta.sessions.list(extra_query={"memory_store_id": "memstore_x", "page": "garbage"})
    assert (await api.client.beta.sessions.list(extra_query={"memory_store_id": "memstore_x"})).data == []
    with pytest.raises(anthropic.BadRequestError):
        await api.client.beta.agents.retrieve("agent_x", version=0)


async def test_numbers_out_of_range_and_unprintable_names_are_400(api: Api) -> None:
    agent = await api.agent()
    huge = 10**30
    calls = [
        api.client.beta.agents.update(agent.id, version=huge, name="x"),
        api.client.beta.agents.retrieve(agent.id, extra_query={"version": huge}),
        api.client.beta.agents.list(extra_query={"limit": huge}),
        api.client.beta.sessions.create(
            agent={"type": "agent", "id": agent.id, "version": huge}, environment_id=await api.environment()
        ),
        api.client.beta.agents.create(name="evil\u202etxt.exe", model="claude-opus-4-8"),
        api.client.beta.agents.create(name="nul\x00byte", model="claude-opus-4-8"),
        api.client.beta.environments.create(name="esc\x1b[31mred", config={"type": "self_hosted"}),
    ]
    for call in calls:
        with pytest.raises(anthropic.BadRequestError) as caught:
            await call
        assert caught.value.type == "invalid_request_error"
    names = [a.name async for a in await api.client.beta.agents.list()]
    assert names == [agent.name]
    ok = await api.client.beta.agents.create(name="café 中文 — fine", model="claude-opus-4-8")
    assert ok.name == "café 中文 — fine"

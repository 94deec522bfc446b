"""``client.beta.dreams``: all 5 methods through the official SDK against the real API on SQLite,
every reply parsed strictly into ``BetaDream``; the lifecycle rules (cancel, archive), lists and
their filters, and hostile input: too many or repeated sessions, two memory stores, unknown ids,
another environment's sessions with a scoped key, oversized instructions, read-only keys.
No scheduler runs here: dreams stay ``pending`` (tests/integration/dreams runs them)."""

from __future__ import annotations

from typing import Any

import anthropic
import pytest
from anthropic.types.beta import BetaDream

from control_plane.dreams.service import DREAM_KIND
from tests.support.api_app import Api, assert_complete, utcnow

MODEL = "claude-opus-4-8"


async def _inputs(api: Api, sessions: int = 2, env: str | None = None) -> tuple[str, list[str]]:
    store = await api.client.beta.memory_stores.create(name="notes")
    env = env or await api.environment()
    ids = [(await api.session(environment_id=env)).id for _ in range(sessions)]
    return store.id, ids


def _request(store_id: str, session_ids: list[str], **extra: Any) -> dict[str, Any]:
    return {
        "model": MODEL,
        "inputs": [
            {"type": "sessions", "session_ids": session_ids},
            {"type": "memory_store", "memory_store_id": store_id},
        ],
        **extra,
    }


async def _collect(pager: Any) -> list[Any]:
    return [item async for item in pager]


async def _set_status(api: Api, dream_id: str, status: str) -> None:
    """What the scheduler would do: the dream reaches ``status``."""
    dream = await api.store.get_resource(DREAM_KIND, dream_id)
    body = {**dream.body, "status": status, "ended_at": utcnow().isoformat()}
    await api.store.update_resource(DREAM_KIND, dream_id, body, utcnow())


async def test_create_retrieve_list_cancel_archive(api: Api) -> None:
    dreams = api.client.beta.dreams
    store_id, session_ids = await _inputs(api, sessions=3)
    created = await dreams.create(
        **_request(store_id, list(reversed(session_ids)), instructions="Focus on style.")
    )
    assert isinstance(created, BetaDream)
    assert_complete(created)
    assert created.id.startswith("drm_") and created.type == "dream"
    assert (created.status, created.outputs, created.session_id, created.error) == ("pending", [], None, None)
    assert created.output_behavior.type == "create_new"
    assert (created.model.id, created.model.speed) == (MODEL, "standard")
    assert created.instructions == "Focus on style."
    assert created.usage.input_tokens == created.usage.output_tokens == 0
    sessions_input = next(i for i in created.inputs if i.type == "sessions")
    assert sessions_input.session_ids == sorted(session_ids)  # responses list them sorted
    assert created.ended_at is None and created.archived_at is None

    got = await dreams.retrieve(created.id)
    assert_complete(got)
    assert got == created

    other = await dreams.create(
        model={"id": MODEL, "speed": "standard"}, inputs=_request(store_id, session_ids[:1])["inputs"]
    )
    assert_complete(other)
    assert other.instructions is None
    listed = await _collect(dreams.list(limit=1))
    assert [d.id for d in listed] == [other.id, created.id]  # newest first, a page at a time
    for item in listed:
        assert_complete(item)
    assert [d.id for d in await _collect(dreams.list(statuses=["pending"]))] == [other.id, created.id]
    assert await _collect(dreams.list(statuses=["running", "completed"])) == []
    after = await _collect(dreams.list(created_at_gt=created.created_at))
    assert [d.id for d in after] == [other.id]
    before = await _collect(dreams.list(created_at_lt=other.created_at))
    assert [d.id for d in before] == [created.id]

    with pytest.raises(anthropic.BadRequestError, match="pending"):
        await dreams.archive(created.id)  # not while pending or running
    canceled = await dreams.cancel(created.id)
    assert_complete(canceled)
    assert canceled.status == "canceled" and canceled.ended_at is not None
    again = await dreams.cancel(created.id)  # idempotent
    assert again == canceled
    archived = await dreams.archive(created.id)
    assert_complete(archived)
    assert archived.archived_at is not None and archived.status == "canceled"
    assert [d.id for d in await _collect(dreams.list())] == [other.id]
    everything = await _collect(dreams.list(include_archived=True))
    assert [d.id for d in everything] == [other.id, created.id]
    assert (await dreams.retrieve(created.id)).archived_at is not None  # archived: still returned
    assert [d.id for d in await _collect(dreams.list(statuses=["canceled"], include_archived=True))] == [
        created.id
    ]


async def test_cancel_refuses_finished_dreams_and_archive_takes_them(api: Api) -> None:
    store_id, session_ids = await _inputs(api, sessions=1)
    for status in ("completed", "failed"):
        dream = await api.client.beta.dreams.create(**_request(store_id, session_ids))
        await _set_status(api, dream.id, status)
        with pytest.raises(anthropic.BadRequestError, match=status):
            await api.client.beta.dreams.cancel(dream.id)
        archived = await api.client.beta.dreams.archive(dream.id)
        assert archived.status == status and archived.archived_at is not None
    running = await api.client.beta.dreams.create(**_request(store_id, session_ids))
    await _set_status(api, running.id, "running")
    with pytest.raises(anthropic.BadRequestError, match="running"):
        await api.client.beta.dreams.archive(running.id)
    assert (await api.client.beta.dreams.cancel(running.id)).status == "canceled"


async def test_update_existing(api: Api) -> None:
    store_id, session_ids = await _inputs(api, sessions=1)
    behavior = {"type": "update_existing", "memory_store_id": store_id}
    dream = await api.client.beta.dreams.create(**_request(store_id, session_ids, output_behavior=behavior))
    assert_complete(dream)
    assert dream.output_behavior.type == "update_existing"
    assert dream.output_behavior.memory_store_id == store_id
    with pytest.raises(anthropic.ConflictError, match="has not stopped"):
        await api.client.beta.dreams.create(**_request(store_id, session_ids, output_behavior=behavior))
    await api.client.beta.dreams.cancel(dream.id)
    second = await api.client.beta.dreams.create(**_request(store_id, session_ids, output_behavior=behavior))
    assert second.status == "pending"  # the first stopped: its lock is taken over
    other = await api.client.beta.memory_stores.create(name="other")
    wrong = {"type": "update_existing", "memory_store_id": other.id}
    with pytest.raises(anthropic.BadRequestError, match="output_behavior"):
        await api.client.beta.dreams.create(**_request(store_id, session_ids, output_behavior=wrong))


async def test_hostile_input(api: Api) -> None:
    dreams = api.client.beta.dreams
    store_id, session_ids = await _inputs(api, sessions=1)
    too_many = [f"sesn_{i:024x}" for i in range(101)]
    bad: list[tuple[dict[str, Any], str]] = [
        (_request(store_id, too_many), "1 to 100"),
        (_request(store_id, []), "1 to 100"),
        (_request(store_id, session_ids * 2), "repeat"),
        (_request(store_id, session_ids, instructions="x" * 4097), "instructions"),
        (_request(store_id, session_ids, instructions=""), "instructions"),
        ({**_request(store_id, session_ids), "model": ""}, "model"),
        ({**_request(store_id, session_ids), "model": "m" * 257}, "model"),
        ({**_request(store_id, session_ids), "model": {"id": MODEL, "speed": "fast"}}, "standard"),
        (
            {
                "model": MODEL,
                "inputs": [
                    {"type": "memory_store", "memory_store_id": store_id},
                    {"type": "memory_store", "memory_store_id": store_id},
                    {"type": "sessions", "session_ids": session_ids},
                ],
            },
            "exactly one",
        ),
        ({"model": MODEL, "inputs": [{"type": "sessions", "session_ids": session_ids}]}, "exactly one"),
    ]
    for body, message in bad:
        with pytest.raises(anthropic.BadRequestError, match=message):
            await dreams.create(**body)
    raw = await api.http.post("/v1/dreams", json={**_request(store_id, session_ids), "surprise": 1})
    assert raw.status_code == 400, raw.text
    raw = await api.http.post(
        "/v1/dreams", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert raw.status_code == 400, raw.text
    with pytest.raises(anthropic.NotFoundError):
        await dreams.create(**_request(store_id, [*session_ids, "sesn_" + "0" * 24]))
    with pytest.raises(anthropic.NotFoundError):
        await dreams.create(**_request("memstore_" + "0" * 24, session_ids))
    archived_store = await api.client.beta.memory_stores.create(name="old")
    await api.client.beta.memory_stores.archive(archived_store.id)
    with pytest.raises(anthropic.BadRequestError, match="archived"):
        await dreams.create(**_request(archived_store.id, session_ids))
    for call in (dreams.retrieve, dreams.cancel, dreams.archive):
        with pytest.raises(anthropic.NotFoundError):
            await call("drm_" + "0" * 24)
    with pytest.raises(anthropic.BadRequestError):
        await _collect(dreams.list(limit=101))
    raw = await api.http.get("/v1/dreams", params={"statuses[]": "sleeping"})
    assert raw.status_code == 400, raw.text
    assert await _collect(dreams.list()) == []  # nothing was made by any of the above
    async with anthropic.AsyncAnthropic(
        base_url=api.url, api_key="sk-outpost-wrong", max_retries=0
    ) as anonymous:
        with pytest.raises(anthropic.AuthenticationError):
            await anonymous.beta.dreams.create(**_request(store_id, session_ids))


async def _key(api: Api, **body: Any) -> str:
    response = await api.http.post("/v1/api_keys", json={"name": "limited", **body})
    assert response.status_code == 200, response.text
    return str(response.json()["key"])


async def test_scoped_and_read_only_keys(api: Api) -> None:
    mine_env, their_env = await api.environment("mine"), await api.environment("theirs")
    store_id, mine = await _inputs(api, sessions=1, env=mine_env)
    _, theirs = await _inputs(api, sessions=1, env=their_env)
    theirs_dream = await api.client.beta.dreams.create(**_request(store_id, theirs))
    both = await api.client.beta.dreams.create(**_request(store_id, [*mine, *theirs]))
    key = await _key(api, scope="read_write", environment_ids=[mine_env])
    async with anthropic.AsyncAnthropic(base_url=api.url, api_key=key, max_retries=0, timeout=20) as scoped:
        with pytest.raises(anthropic.NotFoundError):  # another environment's session: as if unknown
            await scoped.beta.dreams.create(**_request(store_id, [*mine, *theirs]))
        behavior = {"type": "update_existing", "memory_store_id": store_id}
        with pytest.raises(anthropic.PermissionDeniedError):  # writes a memory store
            await scoped.beta.dreams.create(**_request(store_id, mine, output_behavior=behavior))
        own = await scoped.beta.dreams.create(**_request(store_id, mine))
        assert_complete(own)
        assert [d.id for d in await _collect(scoped.beta.dreams.list())] == [own.id]
        for dream_id in (theirs_dream.id, both.id):
            for call in (scoped.beta.dreams.retrieve, scoped.beta.dreams.cancel, scoped.beta.dreams.archive):
                with pytest.raises(anthropic.NotFoundError):
                    await call(dream_id)
        assert (await scoped.beta.dreams.cancel(own.id)).status == "canceled"
    reader = await _key(api, scope="read_only")
    async with anthropic.AsyncAnthropic(
        base_url=api.url, api_key=reader, max_retries=0, timeout=20
    ) as read_only:
        assert (await read_only.beta.dreams.retrieve(both.id)).id == both.id
        with pytest.raises(anthropic.PermissionDeniedError):
            await read_only.beta.dreams.create(**_request(store_id, mine))
        with pytest.raises(anthropic.PermissionDeniedError):
            await read_only.beta.dreams.cancel(both.id)
    assert (await api.client.beta.dreams.retrieve(both.id)).status == "pending"

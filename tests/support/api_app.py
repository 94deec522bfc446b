"""Helpers for the SDK-driven API tests: the :class:`Api` under test, the :class:`FakeRunner` that
stands in for the harness, and checks that the SDK parsed a response completely."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import anthropic
import httpx
from pydantic import BaseModel

from control_plane.bus import EventBus
from control_plane.errors import NotFound
from control_plane.store.base import Store

MAX_BODY_BYTES = 1024 * 1024
PING_INTERVAL_S = 0.2


def utcnow() -> datetime:
    return datetime.now(UTC)


@dataclass
class FakeRunner:
    """Records ``wake`` / ``session_ended`` calls, and whether the session still existed then."""

    store: Store
    calls: list[tuple[str, str]] = field(default_factory=list)
    existed_at_end: dict[str, bool] = field(default_factory=dict)

    async def wake(self, session_id: str) -> None:
        self.calls.append(("wake", session_id))

    async def session_ended(self, session_id: str) -> None:
        try:
            await self.store.get_resource("session", session_id)
            self.existed_at_end[session_id] = True
        except NotFound:
            self.existed_at_end[session_id] = False
        self.calls.append(("session_ended", session_id))

    def wakes(self, session_id: str) -> int:
        return self.calls.count(("wake", session_id))


@dataclass
class Api:
    url: str
    key: str
    store: Store
    bus: EventBus
    runner: FakeRunner
    client: anthropic.AsyncAnthropic
    http: httpx.AsyncClient  # raw requests, already authenticated

    async def environment(self, name: str = "edge-pool") -> str:
        env = await self.client.beta.environments.create(name=name, config={"type": "self_hosted"})
        return env.id

    async def agent(self, **overrides: Any) -> Any:
        params: dict[str, Any] = {"name": "coder", "model": "claude-opus-4-8"}
        params.update(overrides)
        return await self.client.beta.agents.create(**params)

    async def session(self, **overrides: Any) -> Any:
        params: dict[str, Any] = {}
        if "agent" not in overrides:
            params["agent"] = (await self.agent()).id
        if "environment_id" not in overrides:
            params["environment_id"] = await self.environment()
        params.update(overrides)
        return await self.client.beta.sessions.create(**params)


def assert_complete(obj: BaseModel) -> None:
    """The SDK parsed ``obj`` with every field of its type present (optional ones included), and
    the data validates strictly against the type (discriminated unions, literals, nested models)."""
    cls = type(obj)
    missing = set(cls.model_fields) - obj.model_fields_set
    assert not missing, f"{cls.__name__} lacks {sorted(missing)}"
    cls.model_validate(obj.model_dump(mode="json", exclude_unset=True))


def assert_valid(obj: BaseModel) -> None:
    """Required fields present and strict validation passes (optional fields may be absent)."""
    cls = type(obj)
    required = {name for name, info in cls.model_fields.items() if info.is_required()}
    missing = required - obj.model_fields_set
    assert not missing, f"{cls.__name__} lacks {sorted(missing)}"
    cls.model_validate(obj.model_dump(mode="json", exclude_unset=True))

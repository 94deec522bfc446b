"""``DreamJob``: the steps of one dream, each safe to run again after a crash.

1. **Its session.** A session resource whose id is derived from the dream's (so two attempts make
   one), in the environment of the dream's first input session, with an agent snapshot that
   describes the dream (model, system prompt, the ``record_memories`` tool). Its body's status
   is ``terminated`` from the start: the harness never runs it (no agent loop, no sandbox, no
   input); its *log* is what users read: ``session.status_running``, the model request's spans,
   the ``agent.custom_tool_use`` holding the plan, an ``agent.message`` with the summary, then
   ``session.status_terminated`` (``session.error`` before it on a failure).
2. **Its output store.** ``create_new``: a memory store whose id is derived from the dream's,
   filled with a copy of the input store's memories (a path already there is skipped: a resumed
   copy copies the rest); ``update_existing``: the input store. Recorded in ``outputs``.
3. **The plan.** If the log holds the plan event (its id derived from the dream's), it is used as
   is: a finished model request is never paid for twice. Otherwise the inputs are read (the
   most recent ``max_events_per_session`` transcript events of each session, the input store's
   memories), digested and trimmed to the model's context budget (:mod:`~control_plane.dreams.digest`),
   and the model is called with ``record_memories`` forced; retryable model errors are retried
   ``model_attempts`` times with backoff. The plan event is appended with its fixed id: of two
   processes that both got an answer, the first plan stored wins and both apply that one.
4. **The writes**, through :class:`~control_plane.memory.service.MemoryService` (paths, limits,
   versions; the author is the dream's session, ``session_actor``), each made idempotent: a write
   whose content is already there writes nothing, an update carries the content hash it read as
   its precondition, a delete of a path that is gone does nothing. Before each write the dream is
   read again: a canceled dream (or one claimed elsewhere) writes nothing more.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from control_plane.dreams.claim import DreamClaim
from control_plane.dreams.config import DreamsConfig
from control_plane.dreams.digest import (
    SYSTEM,
    TOOL,
    TOOL_NAME,
    TRANSCRIPT_TYPES,
    MemoryPlan,
    build_request,
    digest_events,
    parse_plan,
    plan_input,
)
from control_plane.dreams.service import dream_usage
from control_plane.errors import (
    Conflict,
    DreamFailed,
    InvalidRequest,
    MemoryPathConflict,
    MemoryPreconditionFailed,
    NotFound,
)
from control_plane.harness.model import ModelClient, ModelError
from control_plane.memory.commands import CreateMemory, CreateMemoryStore, UpdateMemory
from control_plane.memory.service import MemoryService
from control_plane.store.base import (
    MEMORY_STORE_KIND,
    Event,
    EventLog,
    Memories,
    MemoryActor,
    MemoryRecord,
    NewEvent,
    Order,
    Resource,
    Resources,
)

__all__ = ["DreamJob", "DreamStores", "Planned", "derived_id", "dream_session_id"]

log = logging.getLogger(__name__)

_WRITE_ATTEMPTS = 5
_MEMORY_BATCH = 200
_MAX_MEMORIES_READ = 2000


class DreamStores(Resources, EventLog, Memories, Protocol):
    """The store roles a dream uses (a protocol: ``Store`` fits)."""


def derived_id(prefix: str, dream_id: str, part: str, hex_chars: int = 24) -> str:
    """An id every attempt of the dream computes alike (``prefix`` + hex of a hash)."""
    return prefix + hashlib.sha256(f"{dream_id}/{part}".encode()).hexdigest()[:hex_chars]


def dream_session_id(dream_id: str) -> str:
    return derived_id("sesn_", dream_id, "session")


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _zero_model_usage() -> dict[str, int]:
    return {
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }


def _model_usage(message: Mapping[str, Any]) -> dict[str, int]:
    usage = message.get("usage") if isinstance(message.get("usage"), Mapping) else {}
    assert isinstance(usage, Mapping)
    return {k: int(usage.get(k) or 0) for k in _zero_model_usage()}


def _error_event(event_id: str, error_type: str, message: str) -> NewEvent:
    known = error_type.startswith("model_") or error_type in ("billing_error", "unknown_error")
    return NewEvent(
        event_id,
        "session.error",
        {
            "error": {
                "type": error_type if known else "unknown_error",
                "message": message,
                "retry_status": {"type": "terminal"},
            }
        },
    )


@dataclass(frozen=True, slots=True)
class Planned:
    """A plan and the store it is for."""

    plan: MemoryPlan
    output_store_id: str


class DreamJob:
    """Runs one claimed dream to its end (or raises :class:`DreamFailed` / ``DreamStopped``)."""

    def __init__(
        self,
        store: DreamStores,
        memory: MemoryService,
        model: ModelClient,
        config: DreamsConfig,
        claim: DreamClaim,
        *,
        budget_tokens: Callable[[str], int],
        clock: Callable[[], datetime],
    ) -> None:
        self._store = store
        self._memory = memory
        self._model = model
        self._config = config
        self._claim = claim
        self._budget = budget_tokens
        self._clock = clock
        self.dream_id = claim.dream_id
        self.session_id = dream_session_id(self.dream_id)
        self._actor = MemoryActor("session_actor", self.session_id)

    def _event_id(self, part: str) -> str:
        return derived_id("sevt_", self.dream_id, part)

    async def _append(self, events: Sequence[NewEvent]) -> list[Event]:
        return await self._store.append(self.session_id, events, self._clock())

    async def run(self) -> None:
        dream = await self._claim.check()
        await self._ensure_session(dream)
        planned = await self._stored_plan()
        if planned is None:
            output = await self._ensure_output(dream)
            planned = Planned(await self._call_model(await self._claim.check(), output), output)
        await self.apply(planned)
        summary = planned.plan.summary or "The dream reorganized the memory store."
        written = f"{summary}\n\n{len(planned.plan.writes)} written, {len(planned.plan.deletes)} deleted."
        await self._append(
            [
                NewEvent(
                    self._event_id("summary"),
                    "agent.message",
                    {"content": [{"type": "text", "text": written}]},
                ),
                NewEvent(self._event_id("end"), "session.status_terminated", {}),
            ]
        )
        await self._claim.finish("completed")

    # -- 1. the session ------------------------------------------------------------------------
    async def _ensure_session(self, dream: Resource) -> None:
        model = dream.body["model"]
        agent = {
            "type": "agent",
            "id": "dream",
            "version": 1,
            "name": "dream",
            "description": f"Outpost's dream runner for {self.dream_id}",
            "model": {"id": model["id"], "speed": "standard"},
            "system": SYSTEM,
            "tools": [{"type": "custom", **TOOL}],
            "mcp_servers": [],
            "skills": [],
            "execution_identity": {"type": "service_account"},
            "multiagent": None,
        }
        body = {
            "agent": agent,
            "agent_id": None,
            "agent_version": None,
            "environment_id": dream.body["environment_id"],
            "vault_ids": [],
            "resources": [],
            "metadata": {"dream_id": self.dream_id},
            "title": f"Dream {self.dream_id}",
            "budget": None,
            "deployment_id": None,
            "outcome_evaluations": [],
            "memory_stores": [],
            "skill_offers": [],
            "dream_id": self.dream_id,
            "status": "terminated",  # for the harness: nothing to run here (the log shows the dream)
        }
        with contextlib.suppress(Conflict):  # an earlier attempt made it
            await self._store.create_resource("session", self.session_id, body, self._clock())
        if dream.body.get("session_id") != self.session_id:
            await self._claim.update(lambda b: {**b, "session_id": self.session_id})
        await self._append([NewEvent(self._event_id("running"), "session.status_running", {})])

    # -- 2. the output store -------------------------------------------------------------------
    async def _ensure_output(self, dream: Resource) -> str:
        source = str(dream.body["inputs"][0]["memory_store_id"])
        if dream.body["output_behavior"]["type"] == "update_existing":
            output = source
        else:
            output = derived_id("memstore_", self.dream_id, "output")
            try:
                original = await self._store.get_resource(MEMORY_STORE_KIND, source)
            except NotFound:
                raise DreamFailed("input_not_found", f"memory store {source!r} no longer exists") from None
            name = f"{original.body.get('name', source)} (dream)"[:255]
            command = CreateMemoryStore(name, f"Written by dream {self.dream_id} from {source}")
            with contextlib.suppress(Conflict):
                await self._memory.create_store(command, store_id=output)
            await self._copy(source, output)
        if not dream.body.get("outputs"):
            outputs = [{"type": "memory_store", "memory_store_id": output}]
            await self._claim.update(lambda b: {**b, "outputs": outputs})
        return output

    async def _copy(self, source: str, output: str) -> None:
        for memory in await self._memories(source):
            await self._claim.check()
            with contextlib.suppress(MemoryPathConflict):  # copied by an earlier attempt
                await self._memory.create_memory(
                    output, CreateMemory(memory.path, memory.content or ""), self._actor
                )

    async def _memories(self, store_id: str) -> list[MemoryRecord]:
        found: list[MemoryRecord] = []
        start: str | None = None
        while len(found) < _MAX_MEMORIES_READ:
            try:
                batch = await self._store.list_memories(
                    store_id, path_from=start, limit=_MEMORY_BATCH, with_content=True
                )
            except NotFound:
                raise DreamFailed("input_not_found", f"memory store {store_id!r} no longer exists") from None
            found.extend(batch)
            if len(batch) < _MEMORY_BATCH:
                break
            start = batch[-1].path + "\x01"
        return found

    # -- 3. the plan ---------------------------------------------------------------------------
    async def _stored_plan(self) -> Planned | None:
        plan_id = self._event_id("plan")
        for event in await self._store.get_events(self.session_id, types=("agent.custom_tool_use",)):
            if event.id == plan_id:
                dream = await self._claim.check()
                output = str(dream.body["outputs"][0]["memory_store_id"])
                return Planned(parse_plan(event.payload.get("input") or {}), output)
        return None

    async def _transcripts(self, session_ids: Sequence[str]) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {}
        for session_id in session_ids:
            try:
                await self._store.get_resource("session", session_id)
            except NotFound:
                raise DreamFailed("input_not_found", f"session {session_id!r} no longer exists") from None
            events = await self._store.get_events(
                session_id,
                types=TRANSCRIPT_TYPES,
                order=Order.DESC,
                limit=self._config.max_events_per_session,
            )
            out[session_id] = digest_events(list(reversed(events)))
        return out

    async def _call_model(self, dream: Resource, output: str) -> MemoryPlan:
        inputs = dream.body["inputs"]
        model = dream.body["model"]["id"]
        request = build_request(
            model=model,
            max_tokens=self._config.max_tokens,
            budget_tokens=self._budget(model),
            transcripts=await self._transcripts(inputs[1]["session_ids"]),
            memories=await self._memories(inputs[0]["memory_store_id"]),
            instructions=dream.body.get("instructions"),
        )
        await self._close_open_spans()
        delay = self._config.model_backoff_s
        for attempt in range(1, self._config.model_attempts + 1):
            await self._claim.check()
            start = NewEvent(
                self._event_id(f"span{attempt}:{self._clock().isoformat()}"), "span.model_request_start", {}
            )
            await self._append([start])
            try:
                message = await self._model.stream(request, lambda _event: None)
            except ModelError as exc:
                end = _span_end(start.id, _zero_model_usage(), error=True)
                last = not exc.retryable or attempt == self._config.model_attempts
                await self._append([end])
                if last:
                    raise DreamFailed(exc.error_type, exc.message) from None
                log.info("dream %s: model request failed (%s); retrying in %g s", self.dream_id, exc, delay)
                await asyncio.sleep(delay)
                delay *= 2
                continue
            return await self._record(start.id, message)
        raise AssertionError("unreachable")

    async def _close_open_spans(self) -> None:
        """A request an earlier attempt started and never finished (its process died): its span
        is closed as failed, so the log shows every request the dream made."""
        spans = await self._store.get_events(
            self.session_id, types=("span.model_request_start", "span.model_request_end")
        )
        ended = {e.payload.get("model_request_start_id") for e in spans if e.type == "span.model_request_end"}
        open_ids = [e.id for e in spans if e.type == "span.model_request_start" and e.id not in ended]
        if open_ids:
            await self._append([_span_end(i, _zero_model_usage(), error=True) for i in open_ids])

    async def _record(self, start_id: str, message: Mapping[str, Any]) -> MemoryPlan:
        usage = _model_usage(message)

        def add(body: dict[str, Any]) -> dict[str, Any]:
            total = dream_usage(body)
            return {**body, "usage": {k: total[k] + usage[k] for k in total}}

        await self._claim.update(add)
        end = _span_end(start_id, usage, error=False, message=message)
        try:
            plan = parse_plan(plan_input(message))
        except DreamFailed:
            await self._append([end])
            raise
        plan_event = NewEvent(
            self._event_id("plan"), "agent.custom_tool_use", {"name": TOOL_NAME, "input": plan.to_json()}
        )
        stored = await self._append([plan_event, end])
        kept = next(e for e in stored if e.id == plan_event.id)  # another attempt's, if it was first
        return parse_plan(kept.payload.get("input") or {})

    # -- 4. the writes -------------------------------------------------------------------------
    async def apply(self, planned: Planned) -> None:
        """Every write, then every delete, of the plan (idempotent: see the module docstring)."""
        store_id = planned.output_store_id
        try:
            for path, content in planned.plan.writes:
                await self._claim.check()
                await self._write(store_id, path, content)
            for path in planned.plan.deletes:
                await self._claim.check()
                await self._delete(store_id, path)
        except InvalidRequest as exc:
            raise DreamFailed("memory_write_refused", f"a memory write was refused: {exc}") from None
        except NotFound:
            raise DreamFailed("output_not_found", f"memory store {store_id!r} no longer exists") from None

    async def _write(self, store_id: str, path: str, content: str) -> None:
        for _ in range(_WRITE_ATTEMPTS):
            current = await self._memory.memory_at(store_id, path, full=False)
            try:
                if current is None:
                    await self._memory.create_memory(store_id, CreateMemory(path, content), self._actor)
                elif current.content_sha256 != _sha(content):
                    change = UpdateMemory(content=content, expected_sha256=current.content_sha256)
                    await self._memory.update_memory(store_id, current.id, change, self._actor)
                return
            except (MemoryPathConflict, MemoryPreconditionFailed):
                continue  # someone wrote it meanwhile: look again
        raise DreamFailed("write_conflict", f"memory {path!r} kept changing while the dream wrote it")

    async def _delete(self, store_id: str, path: str) -> None:
        for _ in range(_WRITE_ATTEMPTS):
            current = await self._memory.memory_at(store_id, path, full=False)
            if current is None:
                return
            try:
                await self._memory.delete_memory(store_id, current.id, current.content_sha256, self._actor)
                return
            except (MemoryPreconditionFailed, NotFound):
                continue
        raise DreamFailed("write_conflict", f"memory {path!r} kept changing while the dream deleted it")

    async def record_failure(self, error_type: str, message: str) -> None:
        """The log's end of a failed dream (best effort: the dream's status is the truth)."""
        await self._append(
            [
                _error_event(self._event_id("error"), error_type, message),
                NewEvent(self._event_id("end"), "session.status_terminated", {}),
            ]
        )

    async def record_stop(self) -> None:
        """The log's end of a canceled dream."""
        await self._append([NewEvent(self._event_id("end"), "session.status_terminated", {})])


def _span_end(
    start_id: str, usage: Mapping[str, int], *, error: bool, message: Mapping[str, Any] | None = None
) -> NewEvent:
    payload: dict[str, Any] = {
        "model_request_start_id": start_id,
        "model_usage": dict(usage),
        "is_error": error,
    }
    if message is not None:
        payload["assistant_message"] = dict(message)
    return NewEvent(derived_id("sevt_", start_id, "end"), "span.model_request_end", payload)

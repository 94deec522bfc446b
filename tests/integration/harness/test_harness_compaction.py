"""Context beyond the window, end to end: the harness, a SQLite store and the local Messages-API
server over HTTP (its ``compaction`` parameter and ``count_tokens`` included).

The budget is deliberately small (4,000 tokens: a context window of 4,512 with ``max_tokens`` 512
and no margin) so that a session of a few dozen tool calls outgrows it many times over in well
under a second of model time; the mechanism does not depend on the size. Every request's size is
checked with the server's own deterministic count (the one its ``usage`` and ``count_tokens``
report)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from control_plane.bus import EventBus
from control_plane.harness import AnthropicModelClient, Harness, HarnessConfig
from control_plane.harness import event_drafts as ev
from control_plane.harness.compaction import COMPACTION_LIMIT_ERROR, SUMMARIZE_INSTRUCTIONS, TRUNCATED_NOTE
from control_plane.harness.tool_clearing import CLEARED_NOTE
from control_plane.store import SqliteStore
from outpost_wire.results import ToolResult
from scripted_model import LocalModelServer, RecordedRequest, Turn, wire
from scripted_model.context_edits import apply_context_management
from tests.support.harness import (
    FAST,
    FakeGateway,
    create_session,
    idle_count,
    send_message,
    settle,
    types,
    wait_for_events,
)

MODEL = "claude-local-test"
BUDGET = 4000
TOOL_CALLS = 27
RESULT_CHARS = 6000  # ~1,500 tokens each: 27 of them are ~10x the budget

# A small budget (see the module docstring); short leases for the crash tests' takeover.
CONFIG = FAST.model_copy(
    update={
        "context_windows": {MODEL: BUDGET + FAST.max_tokens},
        "context_margin_tokens": 0,
        "lease_ttl_s": 0.6,
        "lease_scan_interval_s": 0.1,
    }
)


class BigOutputGateway(FakeGateway):
    """Every call prints ``sizes[command]`` characters (``RESULT_CHARS`` by default)."""

    def __init__(self, sizes: Mapping[str, int] | None = None) -> None:
        super().__init__()
        self.sizes = dict(sizes or {})

    async def _run(
        self, key: str, tool: str, tool_input: dict[str, Any], future: asyncio.Future[ToolResult]
    ) -> None:
        self.in_flight.set()
        await self.gate.wait()
        self.runs[key] += 1
        command = str(tool_input.get("command"))
        size = self.sizes.get(command, RESULT_CHARS)
        line = f"{command}: the quick brown fox jumps over the lazy dog 0123456789 "
        future.set_result(ToolResult.text((line * (size // len(line) + 1))[:size]))


def is_summarization(body: Mapping[str, Any]) -> bool:
    last = body["messages"][-1]["content"]
    return isinstance(last, list) and any(b.get("text") == SUMMARIZE_INSTRUCTIONS for b in last)


class Agent:
    """The scripted model: ``calls`` bash calls, then a final answer; a summary when asked for one.
    ``hold``: a predicate on the request; a matching request waits for ``release``."""

    def __init__(self, calls: int = TOOL_CALLS) -> None:
        self.calls = calls
        self.done = 0
        self.release = asyncio.Event()
        self.release.set()
        self.held = asyncio.Event()
        self.hold: Any = None

    async def __call__(self, body: Mapping[str, Any]) -> Turn:
        if self.hold is not None and self.hold(body):
            self.held.set()
            await self.release.wait()
        if is_summarization(body):
            return Turn.text(f"Summary: {self.done} commands ran, each printing a long listing.")
        if self.done < self.calls:
            self.done += 1
            return Turn.tool_use("bash", {"command": f"cat part{self.done}"})
        return Turn.text("All parts read.")


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[SqliteStore]:
    store = SqliteStore(tmp_path / "outpost.db")
    yield store
    await store.close()


def request_tokens(request: RecordedRequest) -> int:
    return wire.count_input_tokens(request.body)


async def run_session(
    store: SqliteStore, server: LocalModelServer, gateway: FakeGateway, config: HarnessConfig, text: str
) -> tuple[str, list[Any]]:
    model = AnthropicModelClient(base_url=server.base_url, api_key="k")
    harness = Harness(store, gateway, EventBus(), model, config)
    await harness.start()
    session_id = await create_session(store)
    await send_message(store, session_id, text)
    await harness.wake(session_id)
    events = await wait_for_events(
        store, session_id, lambda es: ev.SESSION_STATUS_IDLE in types(es), timeout_s=60
    )
    await settle(harness, session_id)
    await harness.close()
    await model.close()
    return session_id, events


@pytest.mark.parametrize("api", [False, True], ids=["summarization-request", "compaction-parameter"])
async def test_tool_outputs_of_ten_budgets_complete_under_the_budget(store: SqliteStore, api: bool) -> None:
    # The harness path estimates alone; the API path also counts near the budget. Compaction alone:
    # clearing old tool results (the test below) would keep requests under the count's threshold.
    update = {"compaction_api_models": [MODEL] if api else [], "count_tokens": api, "clear_tool_uses": False}
    config = CONFIG.model_copy(update=update)
    agent = Agent()
    gateway = BigOutputGateway()
    async with LocalModelServer(agent) as server:
        session_id, events = await run_session(store, server, gateway, config, "Read every part.")
        requests = server.requests
        counted = server.count_requests

    assert idle_count(events) == 1, types(events)[-5:]
    sizes = [request_tokens(r) for r in requests]
    assert max(sizes) <= BUDGET, sizes
    results = [e for e in events if e.type == ev.AGENT_TOOL_RESULT]
    assert len(results) == TOOL_CALLS
    total_output = sum(len(json.dumps(r.payload["content"])) for r in results) // 4
    assert total_output >= 10 * BUDGET
    # The log keeps every tool result whole: events.list reads the same log.
    assert all(len(r.payload["content"][0]["text"]) == RESULT_CHARS for r in results)
    compactions = [e for e in events if e.type == ev.AGENT_THREAD_CONTEXT_COMPACTED]
    assert compactions and all(c.payload["summary"] for c in compactions)
    final = [e for e in events if e.type == ev.AGENT_MESSAGE][-1]
    assert final.payload["content"][0]["text"] == "All parts read."
    compacting = [r for r in requests if "compaction" in r.body]
    summarizing = [r for r in requests if is_summarization(r.body)]
    if api:
        assert len(compacting) == len(compactions) and not summarizing
        assert all(r.headers.get("anthropic-beta") == "compact-2026-09-04" for r in compacting)
        later = requests[requests.index(compacting[-1]) + 1]
        assert later.body["messages"][0]["content"][0]["type"] == "compaction"
        assert counted, "near the budget the request is counted"
    else:
        assert len(summarizing) == len(compactions) and not compacting
        assert all(r.body["tool_choice"] == {"type": "none"} for r in summarizing)
        later = requests[requests.index(summarizing[-1]) + 1]
        assert "Summary:" in later.body["messages"][0]["content"][0]["text"]
        assert not counted
    # The stable prefix: system and tools are the same in every request, cache breakpoints too.
    assert len({json.dumps([r.body.get("system"), r.body.get("tools")]) for r in requests}) == 1
    # Compactions are model requests: spans and usage account for them.
    assert types(events).count(ev.SPAN_MODEL_REQUEST_START) == len(requests)
    assert session_id


async def test_one_tool_result_over_the_budget_is_cut_in_the_request_only(store: SqliteStore) -> None:
    agent = Agent(calls=2)
    gateway = BigOutputGateway({"cat part1": 40_000})  # ~10,000 tokens: 2.5 budgets in one result
    async with LocalModelServer(agent) as server:
        _, events = await run_session(store, server, gateway, CONFIG, "Read the parts.")
        requests = server.requests

    assert idle_count(events) == 1
    assert max(request_tokens(r) for r in requests) <= BUDGET
    results = [e for e in events if e.type == ev.AGENT_TOOL_RESULT]
    assert len(results[0].payload["content"][0]["text"]) == 40_000  # whole in the log
    note = TRUNCATED_NOTE.split(":")[0]
    cut = [r for r in requests if note in json.dumps(r.body["messages"])]
    assert cut and cut[0] is requests[1]  # the request right after the tool ran


async def test_an_input_larger_than_the_budget_ends_with_compaction_limit_reached(store: SqliteStore) -> None:
    agent = Agent(calls=0)
    async with LocalModelServer(agent) as server:
        _, events = await run_session(store, server, FakeGateway(), CONFIG, "x " * 20_000)
        assert server.request_count == 0  # nothing was sent over the budget

    errors = [e for e in events if e.type == ev.SESSION_ERROR]
    assert [e.payload["error"]["type"] for e in errors] == [COMPACTION_LIMIT_ERROR]
    assert errors[0].payload["error"]["retry_status"] == {"type": "exhausted"}
    assert idle_count(events, "retries_exhausted") == 1


@pytest.mark.parametrize("when", ["during", "after"])
async def test_a_harness_killed_around_a_compaction(tmp_path: Path, when: str) -> None:
    """Killed during the compaction's model call: the next harness compacts again (the call was
    never recorded as finished). Killed after its event landed: the next harness never asks for
    that compaction again."""
    db = tmp_path / "outpost.db"
    agent = Agent(calls=6)
    if when == "during":
        agent.hold = is_summarization
    else:
        first_after: dict[str, bool] = {}

        def after_compaction(body: Mapping[str, Any]) -> bool:
            text = body["messages"][0]["content"][0].get("text", "")
            if "Summary:" in text and not is_summarization(body) and not first_after:
                first_after["seen"] = True
                return True
            return False

        agent.hold = after_compaction
    agent.release.clear()
    store_a, store_b = SqliteStore(db), SqliteStore(db)
    gateway = BigOutputGateway()
    async with LocalModelServer(agent) as server:
        model_a = AnthropicModelClient(base_url=server.base_url, api_key="k")
        harness_a = Harness(store_a, gateway, EventBus(), model_a, CONFIG, holder_id="harness_a")
        await harness_a.start()
        session_id = await create_session(store_a)
        await send_message(store_a, session_id, "Read every part.")
        await harness_a.wake(session_id)
        await asyncio.wait_for(agent.held.wait(), 60)
        await harness_a.abort()  # kill -9: the lease stays until it expires
        await model_a.close()
        agent.release.set()
        model_b = AnthropicModelClient(base_url=server.base_url, api_key="k")
        harness_b = Harness(store_b, gateway, EventBus(), model_b, CONFIG, holder_id="harness_b")
        await harness_b.start()
        events = await wait_for_events(store_b, session_id, lambda es: idle_count(es) == 1, timeout_s=60)
        await settle(harness_b, session_id)
        await harness_b.close()
        await model_b.close()
        requests = server.requests
    await store_a.close()
    await store_b.close()

    summarizing = [r for r in requests if is_summarization(r.body)]
    compactions = [e for e in events if e.type == ev.AGENT_THREAD_CONTEXT_COMPACTED]
    assert compactions
    if when == "during":
        # The first summarization was cut off before it was recorded: it is asked again once.
        assert len(summarizing) == len(compactions) + 1
        assert json.dumps(summarizing[0].body) == json.dumps(summarizing[1].body)
    else:
        assert len(summarizing) == len(compactions)
    assert max(request_tokens(r) for r in requests) <= BUDGET


async def test_the_model_client_counts_and_remembers_an_endpoint_that_does_not() -> None:
    body = {"model": MODEL, "max_tokens": 10, "messages": [{"role": "user", "content": "hi"}]}
    async with LocalModelServer(Agent(calls=0)) as server:
        client = AnthropicModelClient(base_url=server.base_url, api_key="k")
        assert await client.count_tokens(body) == wire.count_input_tokens(body)
        await client.close()
        elsewhere = AnthropicModelClient(base_url=server.base_url + "/elsewhere", api_key="k")
        assert await elsewhere.count_tokens(body) is None  # 404: not asked again
        assert await elsewhere.count_tokens(body) is None
        await elsewhere.close()
        assert len(server.count_requests) == 1


# -- clearing old tool results before compacting (harness/tool_clearing.py) ------------------------
SMALL_RESULT_CHARS = 2400  # ~600 tokens each: 70 of them are ~10x the budget, 3 kept fit in it
CLEAR_CALLS = 70


def sent_tokens(request: RecordedRequest) -> int:
    """The request's size as the model saw it: after the server's context edits, if it asked for any."""
    if request.body.get("context_management") is None:
        return request_tokens(request)
    edited = apply_context_management(request.body)
    assert not isinstance(edited, str), edited
    return wire.count_input_tokens(edited[0])


async def _clearing_run(store: SqliteStore, config: HarnessConfig) -> tuple[list[Any], list[RecordedRequest]]:
    gateway = BigOutputGateway({f"cat part{i}": SMALL_RESULT_CHARS for i in range(1, CLEAR_CALLS + 1)})
    async with LocalModelServer(Agent(calls=CLEAR_CALLS)) as server:
        _, events = await run_session(store, server, gateway, config, "Read every part.")
        return events, server.requests


@pytest.mark.parametrize("server_side", [False, True], ids=["harness-clears", "context-management"])
async def test_clearing_old_tool_results_postpones_compaction(store: SqliteStore, server_side: bool) -> None:
    baseline, _ = await _clearing_run(store, CONFIG.model_copy(update={"clear_tool_uses": False}))
    # The shipped batch (5 % of the budget) is smaller than one result here (15 %): 20 % clears
    # two at a time, so the server's clear_at_least can be met with the 3 latest results kept.
    edits: dict[str, Any] = {"clear_tool_uses_at_least_share": 0.2}
    if server_side:
        edits["context_edit_models"] = [MODEL]
    events, requests = await _clearing_run(store, CONFIG.model_copy(update=edits))

    compactions = [e for e in events if e.type == ev.AGENT_THREAD_CONTEXT_COMPACTED]
    before = [e for e in baseline if e.type == ev.AGENT_THREAD_CONTEXT_COMPACTED]
    path = "server" if server_side else "harness"
    print(f"compactions: {len(before)} without clearing, {len(compactions)} with clearing ({path})")
    assert idle_count(events) == 1
    final = [e for e in events if e.type == ev.AGENT_MESSAGE][-1]
    assert final.payload["content"][0]["text"] == "All parts read."
    assert max(sent_tokens(r) for r in requests) <= BUDGET
    results = [e for e in events if e.type == ev.AGENT_TOOL_RESULT]
    assert len(results) == CLEAR_CALLS
    assert sum(len(r.payload["content"][0]["text"]) for r in results) // 4 >= 10 * BUDGET
    # The log keeps every tool result whole: events.list reads the same log.
    assert all(len(r.payload["content"][0]["text"]) == SMALL_RESULT_CHARS for r in results)
    # Without clearing a call adds ~675 tokens for good, a compaction makes room for ~4 calls (22
    # of them for 70 calls); cleared, a call adds ~100 (its tool_use block and the placeholder),
    # room for ~15 calls: at most a third as many compactions (measured: 22 against 4 or 5).
    assert len(before) >= 15
    assert len(compactions) * 3 <= len(before)
    note = CLEARED_NOTE.split(";")[0]
    model_requests = [r for r in requests if not is_summarization(r.body)]
    starts = [e for e in events if e.type == ev.SPAN_MODEL_REQUEST_START]
    harness_cleared = [r for r in model_requests if note in json.dumps(r.body)]
    recorded = [s for s in starts if s.payload.get("cleared_tool_results")]
    assert len(recorded) == len(harness_cleared)  # the span start records what the harness cleared
    if server_side:
        managed = [r for r in model_requests if "context_management" in r.body]
        assert len(managed) > len(model_requests) / 2, (len(managed), len(model_requests))
        assert all("context-management-2025-06-27" in r.headers.get("anthropic-beta", "") for r in managed)
        # Where the server's edit would not be enough the harness clears, without context_management.
        assert not any(note in json.dumps(r.body) for r in managed)
        ends = [
            e for e in events if e.type == ev.SPAN_MODEL_REQUEST_END and "context_management" in e.payload
        ]
        applied = [a for e in ends for a in e.payload["context_management"]["applied_edits"]]
        assert applied and all(a["type"] == "clear_tool_uses_20250919" for a in applied)
    else:
        assert not any("context_management" in r.body for r in requests)
        assert harness_cleared
    # A compaction request never carries context_management (the API forbids it).
    assert not any("context_management" in r.body for r in requests if is_summarization(r.body))

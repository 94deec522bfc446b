"""``kill -9`` of a real control-plane process in the middle of a coordinator/subagent exchange:
after the restart the exchange finishes with no thread spawned twice and no finished model turn
asked for again (the scripted model's request counts are the bill).

The control plane runs as ``outpost-control serve`` on a SQLite file; the scripted model server
lives in the test process and outlives the crash. Text-only turns: no edge, no Docker.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import pytest

from scripted_model import LocalModelServer, Text, ToolUse, Turn
from scripted_model.responders import tool_result_text, tool_results_since_prompt
from tests.support import eventually
from tests.support.control_plane_process import ControlPlaneProcess, session_events

MODEL = "claude-threads-crash"


class Exchange:
    """The coordinator delegates once, then reports; ``hold`` names the role whose first request
    waits for ``release`` (the crash lands meanwhile, so its answer goes nowhere)."""

    def __init__(self, hold: str) -> None:
        self.hold = hold
        self.requests = {"coordinator": 0, "researcher": 0}
        self.held = asyncio.Event()
        self.release = asyncio.Event()

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        system = " ".join(b.get("text", "") for b in request.get("system") or [])
        role = "researcher" if "researcher" in system else "coordinator"
        self.requests[role] += 1
        results = tool_results_since_prompt(request) if role == "coordinator" else []
        if role == self.hold and (role == "researcher" or results) and not self.held.is_set():
            self.held.set()
            await self.release.wait()
        if role == "researcher":
            return Turn.text("FACT: the answer is 42.")
        if not results:
            return Turn((Text("Asking."), ToolUse("call_agent_researcher", {"message": "Find it."})))
        return Turn.text("REPORT: " + tool_result_text(results[0]))


async def run_with_crash(tmp_path: Path, script: Exchange) -> list[Any]:
    async with LocalModelServer(script) as model:
        cp = ControlPlaneProcess(tmp_path, model.base_url)
        cp.start()
        try:
            await cp.wait_up()
            key = (cp.data_dir / "admin-api-key").read_text().strip()
            client = anthropic.AsyncAnthropic(base_url=cp.url, api_key=key, max_retries=3)
            researcher = await client.beta.agents.create(
                name="researcher", model=MODEL, system="You are the researcher."
            )
            lead = await client.beta.agents.create(
                name="lead",
                model=MODEL,
                system="You coordinate.",
                multiagent={"type": "coordinator", "agents": [researcher.id]},
            )
            env = await client.beta.environments.create(name="crash", config={"type": "self_hosted"})
            session = await client.beta.sessions.create(agent=lead.id, environment_id=env.id)
            await client.beta.sessions.events.send(
                session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
            )
            await asyncio.wait_for(script.held.wait(), 30)
            cp.kill9()
            script.release.set()
            cp.start()
            await cp.wait_up()

            async def idle() -> bool:
                return any(e.type == "session.status_idle" for e in await session_events(client, session.id))

            await eventually(idle, 60, "the turn to end after the restart")
            events = await session_events(client, session.id)
            await client.close()
            return events
        finally:
            cp.stop()


@pytest.mark.parametrize("hold", ["researcher", "coordinator"])
async def test_kill9_mid_exchange_runs_nothing_twice(tmp_path: Path, hold: str) -> None:
    script = Exchange(hold)
    events = await run_with_crash(tmp_path, script)
    kinds = [e.type for e in events]
    assert kinds.count("session.thread_created") == 1, kinds
    assert kinds.count("agent.tool_result") == 1, kinds  # the delegation answered once
    assert kinds.count("agent.thread_message_received") == 2, kinds  # the brief and the reply
    final = [e for e in events if e.type == "agent.message" and not getattr(e, "session_thread_id", None)]
    assert "REPORT: FACT: the answer is 42." in final[-1].content[0].text
    if hold == "researcher":  # cut mid-request: asked again once; the coordinator's turns never
        assert script.requests == {"coordinator": 2, "researcher": 2}
    else:  # the researcher's finished turn is not asked for again; the cut coordinator turn is
        assert script.requests == {"coordinator": 3, "researcher": 1}

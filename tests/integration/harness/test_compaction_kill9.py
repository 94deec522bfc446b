"""``kill -9`` of the control plane around a compaction (issue 14): a compaction whose summary is
in the log is never asked for again, and one cut before its summary was recorded is redone once.

The control plane runs as a real process (``outpost-control serve``) on a SQLite file; the scripted
model server lives in the test process and outlives the crash. Text-only turns: no edge, no Docker.
The context window is configured tiny (5,000 tokens; budget = window - ``max_tokens`` - margin =
3,800) so that the second large user message makes the harness compact — the shipped windows are
covered by tests/unit/harness/test_harness_context_window.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic
import yaml

from scripted_model import LocalModelServer, Turn
from scripted_model.responders import last_prompt_text
from tests.support import eventually
from tests.support.control_plane_process import ControlPlaneProcess, session_events

MODEL = "claude-crash-test"
SUMMARY_ASK = "about to leave your context window"  # in the harness's summarization request
BIG = "x" * 8_000  # ~2,000 tokens at the estimate's 4 characters per token


class CompactionScript:
    """Answers turns with short text; can hold the first summarization request, or the first
    ordinary request that comes after a summary, until released (the crash lands meanwhile)."""

    def __init__(self, *, hold_summary: bool) -> None:
        self.hold_summary = hold_summary
        self.summaries = 0
        self.held = asyncio.Event()  # the request to cut is in flight
        self.release = asyncio.Event()
        self.summaries_before_hold = -1
        self.held_request_has_summary = False

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        text = last_prompt_text(request) or ""
        if SUMMARY_ASK in text:
            self.summaries += 1
            if self.hold_summary and self.summaries == 1:
                self.held.set()
                await self.release.wait()  # cut by the crash: its answer goes nowhere
            return Turn.text("SUMMARY: the user sent two long messages of x.")
        if "second" in text and not self.hold_summary and not self.held.is_set():
            self.summaries_before_hold = self.summaries
            self.held_request_has_summary = "SUMMARY:" in repr(request.get("messages"))
            self.held.set()
            await self.release.wait()
        return Turn.text("noted")


def configure(cp: ControlPlaneProcess) -> None:
    config = yaml.safe_load(cp.config.read_text())
    config["harness"].update(
        {"max_tokens": 1_000, "context_margin_tokens": 200, "context_windows": {MODEL: 5_000}}
    )
    cp.config.write_text(yaml.safe_dump(config))


async def idle_count(client: anthropic.AsyncAnthropic, session_id: str) -> int:
    return sum(e.type == "session.status_idle" for e in await session_events(client, session_id))


async def run_with_crash(tmp_path: Path, script: CompactionScript) -> list[Any]:
    async with LocalModelServer(script) as model:
        cp = ControlPlaneProcess(tmp_path, model.base_url)
        configure(cp)
        cp.start()
        try:
            await cp.wait_up()
            key = (cp.data_dir / "admin-api-key").read_text().strip()
            client = anthropic.AsyncAnthropic(base_url=cp.url, api_key=key, max_retries=3)
            agent = await client.beta.agents.create(name="compaction crash", model=MODEL)
            env = await client.beta.environments.create(name="crash", config={"type": "self_hosted"})
            session = await client.beta.sessions.create(agent=agent.id, environment_id=env.id)
            for n, word in ((1, "first"), (2, "second")):
                message = {"type": "text", "text": f"{word}: {BIG}"}
                await client.beta.sessions.events.send(
                    session.id, events=[{"type": "user.message", "content": [message]}]
                )
                if n == 1:
                    await eventually(lambda: _idle(client, session.id, 1), 30, "the first turn to end")
            await asyncio.wait_for(script.held.wait(), 30)
            cp.kill9()
            script.release.set()
            cp.start()
            await cp.wait_up()
            await eventually(lambda: _idle(client, session.id, 2), 60, "the second turn to end")
            events = await session_events(client, session.id)
            await client.close()
            return events
        finally:
            cp.stop()


async def _idle(client: anthropic.AsyncAnthropic, session_id: str, n: int) -> bool:
    return await idle_count(client, session_id) >= n


async def test_a_recorded_compaction_is_not_asked_for_again_after_kill9(tmp_path: Path) -> None:
    script = CompactionScript(hold_summary=False)  # the crash cuts the request after the summary
    events = await run_with_crash(tmp_path, script)
    compacted = [e for e in events if e.type == "agent.thread_context_compacted"]
    assert len(compacted) == 1, [e.type for e in events]
    # the request cut by the crash came after the compaction and started from its summary ...
    assert script.summaries_before_hold == 1 and script.held_request_has_summary
    assert script.summaries == 1  # ... and the finished summarization was not asked for again
    assert [e.type for e in events].count("user.message") == 2


async def test_a_compaction_cut_by_kill9_is_redone_once(tmp_path: Path) -> None:
    script = CompactionScript(hold_summary=True)  # the crash cuts the summarization request
    events = await run_with_crash(tmp_path, script)
    compacted = [e for e in events if e.type == "agent.thread_context_compacted"]
    assert len(compacted) == 1, [e.type for e in events]
    assert script.summaries == 2  # asked again after the restart, recorded once

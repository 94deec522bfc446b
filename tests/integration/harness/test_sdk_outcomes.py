"""Outcomes through the official SDK: a real control plane (SQLite, the real harness), the local
scripted Messages server playing both the agent and the grader, and ``anthropic`` with strict
response validation.

The grader is recognised by its forced ``record_verdict`` tool: it answers ``needs_revision`` then
``satisfied`` (the loop), or ``needs_revision`` on the only evaluation (``max_iterations_reached``,
then one acknowledging turn). A control plane stopped while the grader works grades again when it
restarts, under the same start event; the verdict is recorded once.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anthropic
import pytest
from anthropic.types.beta.sessions.beta_managed_agents_span_outcome_evaluation_end_event import (
    BetaManagedAgentsSpanOutcomeEvaluationEndEvent,
)
from anthropic.types.beta.sessions.beta_managed_agents_span_outcome_evaluation_start_event import (
    BetaManagedAgentsSpanOutcomeEvaluationStartEvent,
)
from anthropic.types.beta.sessions.beta_managed_agents_user_define_outcome_event import (
    BetaManagedAgentsUserDefineOutcomeEvent,
)

from control_plane.server import ControlPlane
from scripted_model import LocalModelServer, Text, ToolUse, Turn
from tests.support import eventually
from tests.support.api_app import assert_complete, assert_valid
from tests.support.edge_link import control_plane_config
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

MODEL = "claude-outcome-test"
RUBRIC = "1. Names the capital of France.\n2. Cites a source."


def is_grader(request: Mapping[str, Any]) -> bool:
    return (request.get("tool_choice") or {}).get("name") == "record_verdict"


def verdict(result: str, explanation: str) -> Turn:
    return Turn((ToolUse("record_verdict", {"result": result, "explanation": explanation}),))


class Roles:
    """The agent answers; the grader gives the scripted verdicts in order."""

    def __init__(self, verdicts: list[Turn]) -> None:
        self.verdicts = verdicts
        self.graded = 0
        self.answers = 0
        self.hold: asyncio.Event | None = None  # set: the next grading waits for it
        self.stall_first = False  # the first grading never answers (its caller goes away)
        self.grading = asyncio.Event()  # a grader request arrived
        self._calls = 0

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        if is_grader(request):
            self._calls += 1
            self.grading.set()
            if self.stall_first and self._calls == 1:
                await asyncio.Event().wait()  # until the server cancels it
            if self.hold is not None:
                await self.hold.wait()
            self.graded += 1
            return self.verdicts.pop(0)
        self.answers += 1
        return Turn((Text(f"Paris (answer {self.answers})."),))


@asynccontextmanager
async def model_server(roles: Callable[[Mapping[str, Any]], Any]) -> AsyncIterator[Any]:
    async with LocalModelServer(roles) as model:
        yield model


def sdk(cp: ControlPlane) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(
        base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0, _strict_response_validation=True
    )


async def idles(client: anthropic.AsyncAnthropic, session_id: str, count: int) -> list[Any]:
    """The session's events, once it has gone idle ``count`` times."""
    events: list[Any] = []

    async def done() -> bool:
        events[:] = [e async for e in client.beta.sessions.events.list(session_id)]
        return sum(e.type == "session.status_idle" for e in events) >= count

    await eventually(done, 30.0, f"{count} idle(s) of {session_id}")
    return events


async def new_session(client: anthropic.AsyncAnthropic) -> str:
    environment = await client.beta.environments.create(name="pool")
    agent = await client.beta.agents.create(name="geographer", model=MODEL)
    session = await client.beta.sessions.create(agent=agent.id, environment_id=environment.id)
    assert session.outcome_evaluations == []
    return session.id


async def define(client: anthropic.AsyncAnthropic, session_id: str, **extra: Any) -> None:
    await client.beta.sessions.events.send(
        session_id,
        events=[
            {
                "type": "user.define_outcome",
                "description": "What is the capital of France?",
                "rubric": {"type": "text", "content": RUBRIC},
                **extra,
            }
        ],
    )


async def test_needs_revision_then_satisfied(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    roles = Roles([verdict("needs_revision", "No source is cited."), verdict("satisfied", "Both met.")])
    async with model_server(roles) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await new_session(client)
            await define(client, session_id)
            events = await idles(client, session_id, 1)

            kinds = [e.type for e in events]
            assert kinds.count("span.outcome_evaluation_start") == 2
            assert kinds.count("span.outcome_evaluation_end") == 2
            [defined] = [e for e in events if isinstance(e, BetaManagedAgentsUserDefineOutcomeEvent)]
            assert_complete(defined)
            assert defined.outcome_id.startswith("outc_") and defined.max_iterations == 3
            starts = [e for e in events if isinstance(e, BetaManagedAgentsSpanOutcomeEvaluationStartEvent)]
            ends = [e for e in events if isinstance(e, BetaManagedAgentsSpanOutcomeEvaluationEndEvent)]
            for event in (*starts, *ends):
                assert_complete(event)
            assert [(s.outcome_id, s.iteration) for s in starts] == [
                (defined.outcome_id, 0),
                (defined.outcome_id, 1),
            ]
            assert [(e.result, e.iteration, e.explanation) for e in ends] == [
                ("needs_revision", 0, "No source is cited."),
                ("satisfied", 1, "Both met."),
            ]
            assert [e.outcome_evaluation_start_id for e in ends] == [s.id for s in starts]
            assert all(e.usage.input_tokens > 0 for e in ends)
            # The explanation went back to the agent, which revised once: two answers, two verdicts.
            assert (roles.answers, roles.graded) == (2, 2)
            revision = model.requests[2].body
            assert "No source is cited." in str(revision["messages"][-1])
            assert RUBRIC in str(model.requests[1].body["system"])
            idle = [e for e in events if e.type == "session.status_idle"]
            assert idle[-1].stop_reason.type == "end_turn"

            session = await client.beta.sessions.retrieve(session_id)
            assert_complete(session)
            [evaluation] = session.outcome_evaluations
            assert_complete(evaluation)
            assert evaluation.outcome_id == defined.outcome_id
            assert (evaluation.result, evaluation.iteration) == ("satisfied", 1)
            assert evaluation.explanation == "Both met." and evaluation.completed_at is not None
            # The grader's tokens count toward the session's usage.
            agent_tokens = sum(
                e.model_usage.input_tokens for e in events if e.type == "span.model_request_end"
            )
            grader_tokens = sum(e.usage.input_tokens for e in ends)
            assert session.usage.input_tokens == agent_tokens + grader_tokens

            # The outcome is over: a new one may be defined.
            listed = [s async for s in client.beta.sessions.list()]
            assert listed[0].outcome_evaluations[0].result == "satisfied"


async def test_max_iterations_reached_then_one_acknowledging_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    roles = Roles([verdict("needs_revision", "No source is cited.")])
    async with model_server(roles) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await new_session(client)
            with pytest.raises(anthropic.BadRequestError, match="max_iterations"):
                await define(client, session_id, max_iterations=21)
            await define(client, session_id, max_iterations=1)
            events = await idles(client, session_id, 1)
            ends = [e for e in events if isinstance(e, BetaManagedAgentsSpanOutcomeEvaluationEndEvent)]
            assert [(e.result, e.iteration) for e in ends] == [("max_iterations_reached", 0)]
            assert (roles.answers, roles.graded) == (2, 1)  # the answer, the acknowledgment; one grading
            assert "no evaluations are left" in str(model.requests[-1].body["messages"][-1])
            session = await client.beta.sessions.retrieve(session_id)
            assert_complete(session)
            assert [(o.result, o.iteration) for o in session.outcome_evaluations] == [
                ("max_iterations_reached", 0)
            ]


async def test_one_open_outcome_at_a_time_and_file_rubrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    roles = Roles([verdict("satisfied", "Met.")])
    async with model_server(roles) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await new_session(client)
            roles.hold = asyncio.Event()
            uploaded = await client.beta.files.upload(file=("rubric.md", RUBRIC.encode(), "text/markdown"))
            file_rubric = {"type": "file", "file_id": uploaded.id}
            await client.beta.sessions.events.send(
                session_id,
                events=[{"type": "user.define_outcome", "description": "Capital?", "rubric": file_rubric}],
            )
            await asyncio.wait_for(roles.grading.wait(), 30)
            with pytest.raises(anthropic.BadRequestError, match="still evaluating"):
                await define(client, session_id)
            session = await client.beta.sessions.retrieve(session_id)
            assert [o.result for o in session.outcome_evaluations] == ["evaluating"]
            roles.hold.set()
            events = await idles(client, session_id, 1)
            [defined] = [e for e in events if isinstance(e, BetaManagedAgentsUserDefineOutcomeEvent)]
            assert_valid(defined)
            assert defined.rubric.type == "text" and defined.rubric.content == RUBRIC  # resolved
            assert RUBRIC in str(model.requests[-1].body["system"])
            with pytest.raises(anthropic.BadRequestError, match="no file"):
                await client.beta.sessions.events.send(
                    session_id,
                    events=[
                        {
                            "type": "user.define_outcome",
                            "description": "Again.",
                            "rubric": {"type": "file", "file_id": "file_missing"},
                        }
                    ],
                )


async def test_a_restart_while_grading_grades_again_and_records_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    roles = Roles([verdict("satisfied", "Met.")])
    roles.stall_first = True
    async with model_server(roles) as model:
        settings = control_plane_config(tmp_path, model_base_url=model.base_url)
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            session_id = await new_session(client)
            await define(client, session_id)
            await asyncio.wait_for(roles.grading.wait(), 30)
        # The control plane stopped while the grader worked: its verdict was never recorded.
        async with ControlPlane(settings) as cp, sdk(cp) as client:
            events = await idles(client, session_id, 1)
            starts = [e for e in events if e.type == "span.outcome_evaluation_start"]
            ends = [e for e in events if isinstance(e, BetaManagedAgentsSpanOutcomeEvaluationEndEvent)]
            assert len(starts) == 1 and [(e.result, e.explanation) for e in ends] == [("satisfied", "Met.")]
            assert ends[0].outcome_evaluation_start_id == starts[0].id
            assert roles.answers == 1  # the agent's work was not redone
            graders = [r.body for r in model.requests if is_grader(r.body)]
            assert len(graders) == 2 and graders[0] == graders[1]  # the same request, sent again
            session = await client.beta.sessions.retrieve(session_id)
            assert [o.result for o in session.outcome_evaluations] == ["satisfied"]

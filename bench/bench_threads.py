"""What running a session's threads one effect at a time costs: a coordinator fans out to two
subagents whose model replies each take ``--reply-s``.

    python bench/bench_threads.py [--runs 5] [--reply-s 1.0]

A real control plane (SQLite, the real harness) and the local scripted Messages server (the
coordinator's replies are instant; each subagent's reply is held ``--reply-s``), driven through
the official SDK. Per run: a new session, one ``user.message``, the wall time until the session is
idle again. Printed: p50 / max of that time, the ratio to the subagents' model time run one after
the other (``2 * reply_s``: 1.0 = sequential, 0.5 = the two replies fully overlapped), and the most
subagent model requests seen in flight at once.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anthropic

from control_plane.config import ControlPlaneConfig
from control_plane.server import ControlPlane
from scripted_model import LocalModelServer, Text, ToolUse, Turn
from scripted_model.responders import tool_results_since_prompt

MODEL = "claude-bench-threads"


class FanOut:
    def __init__(self, reply_s: float) -> None:
        self.reply_s = reply_s
        self.in_flight = 0
        self.most_in_flight = 0

    async def __call__(self, request: Mapping[str, Any]) -> Turn:
        system = " ".join(b.get("text", "") for b in request.get("system") or [])
        if "subagent" in system:
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            try:
                await asyncio.sleep(self.reply_s)
            finally:
                self.in_flight -= 1
            return Turn.text("done")
        if tool_results_since_prompt(request):
            return Turn.text("all done")
        calls = [ToolUse(f"call_agent_sub{n}", {"message": f"Task {n}."}) for n in (1, 2)]
        return Turn((Text("Delegating."), *calls))


async def one_run(client: anthropic.AsyncAnthropic, agent_id: str, environment_id: str) -> float:
    session = await client.beta.sessions.create(agent=agent_id, environment_id=environment_id)
    stream = await client.beta.sessions.events.stream(session.id)
    async with stream:
        started = time.perf_counter()
        await client.beta.sessions.events.send(
            session.id, events=[{"type": "user.message", "content": [{"type": "text", "text": "Go."}]}]
        )
        async for event in stream:
            if event.type == "session.status_idle":
                return time.perf_counter() - started
    raise RuntimeError("the stream ended before the session was idle")


async def main(runs: int, reply_s: float) -> None:
    logging.basicConfig(level=logging.WARNING)
    fan = FanOut(reply_s)
    work = Path(tempfile.mkdtemp(prefix="outpost-bench-threads-"))
    async with LocalModelServer(fan) as model:
        config = ControlPlaneConfig(
            data_dir=work / "cp", http_port=0, tunnel_port=0, model_base_url=model.base_url
        )
        async with ControlPlane(config) as cp:
            client = anthropic.AsyncAnthropic(base_url=cp.http_url, api_key=cp.admin_key(), max_retries=0)
            subs = [
                await client.beta.agents.create(name=f"sub{n}", model=MODEL, system="You are a subagent.")
                for n in (1, 2)
            ]
            lead = await client.beta.agents.create(
                name="lead",
                model=MODEL,
                system="You coordinate.",
                multiagent={"type": "coordinator", "agents": [s.id for s in subs]},
            )
            environment = await client.beta.environments.create(name="bench")
            walls = [await one_run(client, lead.id, environment.id) for _ in range(runs)]
            await client.close()
    p50 = statistics.median(walls)
    sequential = 2 * reply_s
    print(f"coordinator → 2 subagents, model replies {reply_s:.2f} s each, {runs} runs")
    print(f"turn wall time: p50 {p50:.3f} s  max {max(walls):.3f} s")
    ratio = p50 / sequential
    print(f"ratio to sequential ({sequential:.2f} s): {ratio:.2f}  (1.0 sequential, 0.5 overlapped)")
    print(f"subagent model requests in flight at once: at most {fan.most_in_flight}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--reply-s", type=float, default=1.0)
    args = parser.parse_args()
    asyncio.run(main(args.runs, args.reply_s))

"""``outpost-control`` sees and steers the fleet, against real control planes (SQLite, HTTP, gRPC):

* ``tokens list`` shows every token's status (never the token); ``tokens revoke`` withdraws an
  unused one, and the real enrollment path (``outpost-edge``'s ``register`` over HTTP) is then
  refused with ``revoked``; a used token cannot be revoked (409, exit 1).
* ``edges list`` joins the registry and the live tunnels: a real edge link (the edge's ``Dialer``
  + ``Link`` over gRPC/mTLS, fake handler) shows as connected with its version, sandboxes, since
  and last seen (RFC 3339), on this process and, through presence, on a second process on the
  same store (which names the first as the holder); once the link is gone it shows as not
  connected with its last-seen time kept; ``/v1/connected_edges`` still lists it, in RFC 3339.
* ``sessions list`` and ``sessions events --follow`` (the real CLI in a subprocess): the timeline
  of a session run by the harness against the local Messages-API server, and ``--follow`` ends
  when the session goes idle again.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from control_plane.cli import main
from control_plane.server import ControlPlane
from edge_agent.enroll import EnrollmentError, register
from edge_agent.identity import generate_key_and_csr
from scripted_model import LocalModelServer, Script
from tests.support import eventually
from tests.support.edge_link import (
    api_client,
    control_plane_config,
    make_dialer,
    running_link,
)
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")

RFC3339 = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z$")
REPO = Path(__file__).resolve().parents[2]


@asynccontextmanager
async def control_planes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, count: int = 1, **config: Any
) -> AsyncIterator[list[ControlPlane]]:
    """``count`` control-plane processes on one store."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    monkeypatch.delenv("OUTPOST_API_KEY", raising=False)
    async with AsyncExitStack() as stack:
        settings = control_plane_config(tmp_path, **config)
        yield [await stack.enter_async_context(ControlPlane(settings)) for _ in range(count)]


async def cli(cp: ControlPlane, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """``outpost-control ARGV --url CP --data-dir DATA`` in a thread (the control plane serves on
    this loop); exit code, stdout, stderr."""
    capsys.readouterr()
    code = await asyncio.to_thread(main, [*argv, "--url", cp.http_url, "--data-dir", str(cp.config.data_dir)])
    out, err = capsys.readouterr()
    return code, out, err


async def create_environment(cp: ControlPlane, capsys: pytest.CaptureFixture[str], name: str) -> str:
    code, out, _ = await cli(cp, capsys, "environments", "create", "--name", name)
    assert code == 0
    return str(json.loads(out)["id"])


async def create_token(cp: ControlPlane, capsys: pytest.CaptureFixture[str], env: str) -> dict[str, Any]:
    code, out, _ = await cli(cp, capsys, "tokens", "create", "--environment", env)
    assert code == 0
    token: dict[str, Any] = json.loads(out)
    return token


# -- tokens ----------------------------------------------------------------------------------------
async def test_tokens_list_and_a_revoked_token_enrolls_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with control_planes(tmp_path, monkeypatch) as (cp,):
        env = await create_environment(cp, capsys, "tokens")
        other = await create_environment(cp, capsys, "other")
        kept, withdrawn, used = [await create_token(cp, capsys, env) for _ in range(3)]
        await create_token(cp, capsys, other)
        await register(
            cp.http_url, used["token"], tmp_path / "e1", name="e1", ca_fingerprint=used["ca_fingerprint"]
        )

        code, out, err = await cli(cp, capsys, "tokens", "revoke", withdrawn["id"], "-o", "json")
        assert code == 0, err
        assert json.loads(out)["status"] == "revoked" and RFC3339.match(json.loads(out)["revoked_at"])

        # The real enrollment path: the edge's register over HTTP is refused, and says why.
        with pytest.raises(EnrollmentError, match="revoked"):
            await register(
                cp.http_url,
                withdrawn["token"],
                tmp_path / "e2",
                name="e2",
                ca_fingerprint=withdrawn["ca_fingerprint"],
            )

        code, out, err = await cli(cp, capsys, "tokens", "list", "--environment", env, "-o", "json")
        assert code == 0, err
        listed = {t["id"]: t for t in json.loads(out)}
        assert set(listed) == {kept["id"], withdrawn["id"], used["id"]}
        assert [listed[t["id"]]["status"] for t in (kept, withdrawn, used)] == ["unused", "revoked", "used"]
        assert listed[used["id"]]["used_by_edge_id"].startswith("edge_")
        for token in (kept, withdrawn, used):
            assert token["token"] not in out  # never the secret
        assert all(RFC3339.match(t["created_at"]) and RFC3339.match(t["expires_at"]) for t in listed.values())

        code, out, _ = await cli(cp, capsys, "tokens", "list", "-o", "table")
        lines = out.splitlines()
        assert lines[0].split() == ["ID", "ENVIRONMENT", "CREATED", "EXPIRES", "STATUS", "USED", "BY"]
        assert len(lines) == 5 and any(withdrawn["id"] in line and "revoked" in line for line in lines)

        code, _, err = await cli(cp, capsys, "tokens", "revoke", used["id"])
        assert code == 1 and "409 conflict_error" in err and "used already" in err
        code, _, err = await cli(cp, capsys, "tokens", "revoke", "etok_nope")
        assert code == 1 and "404 not_found_error" in err


async def test_a_revoked_token_is_refused_by_the_enrollment_route(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The HTTP answer itself: 401 ``authentication_error`` naming the reason, with a valid CSR."""
    async with control_planes(tmp_path, monkeypatch) as (cp,):
        env = await create_environment(cp, capsys, "csr")
        token = await create_token(cp, capsys, env)
        assert (await cli(cp, capsys, "tokens", "revoke", token["id"]))[0] == 0
        _, csr_pem = generate_key_and_csr()
        async with httpx.AsyncClient(base_url=cp.http_url) as http:
            r = await http.post(
                "/v1/edges/enroll", json={"token": token["token"], "csr_pem": csr_pem.decode(), "name": "box"}
            )
        assert r.status_code == 401, r.text
        assert r.json()["error"] == {
            "type": "authentication_error",
            "message": "enrollment token rejected: revoked",
        }


# -- edges -----------------------------------------------------------------------------------------
async def test_edges_list_joins_the_registry_and_the_live_tunnels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with control_planes(tmp_path, monkeypatch, count=2) as (a, b):
        env = await create_environment(a, capsys, "edges")
        token = await create_token(a, capsys, env)
        identity = await register(
            a.http_url,
            token["token"],
            tmp_path / "edge",
            name="box-1",
            ca_fingerprint=token["ca_fingerprint"],
        )
        idle = await register(
            a.http_url,
            (await create_token(a, capsys, env))["token"],
            tmp_path / "idle",
            name="never-connected",
        )

        async def listed(cp: ControlPlane) -> dict[str, dict[str, Any]]:
            code, out, err = await cli(cp, capsys, "edges", "list", "--environment", env, "-o", "json")
            assert code == 0, err
            return {e["id"]: e for e in json.loads(out)}

        # The link dials its identity's own tunnel address: process A's.
        async with running_link(identity, make_dialer(identity, tmp_path / "edge")) as link:
            await asyncio.wait_for(link.connected.wait(), 15)
            edge = (await listed(a))[identity.edge_id]
            assert edge["connected"] is True and edge["control_plane_id"] == a.id
            assert edge["software_version"] == "test"
            assert (edge["sandboxes_in_use"], edge["sandbox_capacity"]) == (0, 2)
            for key in ("connected_at", "last_seen_at", "cert_not_after", "created_at"):
                assert RFC3339.match(edge[key]), (key, edge[key])
            assert edge["name"] == "box-1" and edge["revoked_at"] is None

            # Process B holds no tunnel of it, but knows from the store that A does.
            async def b_sees_it() -> bool:
                return bool((await listed(b))[identity.edge_id]["connected"])

            await eventually(b_sees_it, 15, "process B seeing the edge connected to A")
            seen_from_b = (await listed(b))[identity.edge_id]
            assert seen_from_b["control_plane_id"] == a.id
            assert seen_from_b["software_version"] is None and RFC3339.match(seen_from_b["last_seen_at"])

            code, out, _ = await cli(a, capsys, "edges", "list", "-o", "table")
            header, *rows = out.splitlines()
            assert header.split()[:4] == ["ID", "NAME", "ENVIRONMENT", "CONNECTED"]
            row = next(r for r in rows if identity.edge_id in r)
            assert " yes " in row and "0/2" in row and a.id in row

            # The per-process listing still works, with RFC 3339 times.
            async with api_client(a) as http:
                [status] = (await http.get("/v1/connected_edges")).json()["data"]
            assert status["edge_id"] == identity.edge_id and RFC3339.match(status["connected_at"])
            connected_at = datetime.fromisoformat(edge["connected_at"])

        async def gone() -> bool:
            return not (await listed(a))[identity.edge_id]["connected"]

        await eventually(gone, 15, "the edge listed as disconnected")
        edges = await listed(a)
        assert edges[identity.edge_id]["control_plane_id"] is None
        assert datetime.fromisoformat(edges[identity.edge_id]["last_seen_at"]) >= connected_at
        assert edges[idle.edge_id]["connected"] is False and edges[idle.edge_id]["last_seen_at"] is None

        code, out, _ = await cli(a, capsys, "edges", "revoke", identity.edge_id, "-o", "json")
        assert code == 0 and json.loads(out)["revoked_at"] is not None
        code, out, _ = await cli(a, capsys, "edges", "list", "-o", "table")
        assert "revoked" in next(r for r in out.splitlines() if identity.edge_id in r)


# -- sessions --------------------------------------------------------------------------------------
async def test_sessions_list_and_events_follow(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    monkeypatch.delenv("OUTPOST_API_KEY", raising=False)
    script = Script(["First answer.", "Second answer, after a follow-up."])
    async with (
        LocalModelServer(script) as model,
        ControlPlane(control_plane_config(tmp_path, model_base_url=model.base_url)) as cp,
        api_client(cp) as http,
    ):
        env = await create_environment(cp, capsys, "sessions")
        agent = (await http.post("/v1/agents", json={"name": "talker", "model": "claude-test"})).json()
        r = await http.post("/v1/sessions", json={"agent": agent["id"], "environment_id": env, "title": "t1"})
        assert r.status_code == 200, r.text
        session = r.json()["id"]

        async def say(text: str) -> None:
            body = {"events": [{"type": "user.message", "content": [{"type": "text", "text": text}]}]}
            assert (await http.post(f"/v1/sessions/{session}/events", json=body)).status_code == 200

        async def idle_turns() -> int:
            data = (await http.get(f"/v1/sessions/{session}/events", params={"limit": 1000})).json()["data"]
            return sum(1 for e in data if e["type"] == "session.status_idle")

        await say("Hello there")
        await eventually(lambda: _at_least(idle_turns, 1), 30, "the first turn")

        code, out, err = await cli(cp, capsys, "sessions", "list", "-o", "json")
        assert code == 0, err
        [listed] = json.loads(out)
        assert listed["id"] == session and listed["status"] == "idle" and listed["environment_id"] == env
        code, out, _ = await cli(cp, capsys, "sessions", "list", "-o", "table")
        header, row = out.splitlines()
        assert header.split() == ["ID", "STATUS", "AGENT", "ENVIRONMENT", "CREATED", "TITLE"]
        assert row.split()[:4] == [session, "idle", "talker", env]

        code, out, _ = await cli(cp, capsys, "sessions", "events", session, "-o", "table")
        lines = out.splitlines()
        assert any("user.message" in line and "Hello there" in line for line in lines)
        assert any("agent.message" in line and "First answer." in line for line in lines)
        assert lines[-1].split()[1:] == ["session.status_idle", "stop:", "end_turn"]
        assert all(RFC3339.match(line.split()[0]) for line in lines)

        # --follow, the real CLI: the log so far, then the next turn, and it ends when idle again.
        env_vars = {**os.environ, "OUTPOST_DATA_DIR": str(cp.config.data_dir), "OUTPOST_URL": cp.http_url}
        argv = ["sessions", "events", session, "--follow", "-o", "table"]
        follow = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "control_plane.cli",
            *argv,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=env_vars,
            cwd=REPO,
        )
        assert follow.stdout is not None
        printed: list[str] = []
        while not printed or "session.status_idle" not in printed[-1]:  # the history is out
            printed.append((await asyncio.wait_for(follow.stdout.readline(), 60)).decode())
        await say("And now?")
        rest, err_bytes = await asyncio.wait_for(follow.communicate(), 60)
        assert follow.returncode == 0, err_bytes.decode()
        new = rest.decode().splitlines()
        assert any("user.message" in line and "And now?" in line for line in new)
        assert any("agent.message" in line and "Second answer" in line for line in new)
        assert "session.status_idle" in new[-1]
        assert not any("First answer." in line for line in new)  # nothing printed twice

        # -o json: one raw event per line.
        code, out, _ = await cli(cp, capsys, "sessions", "events", session, "-o", "json")
        events = [json.loads(line) for line in out.splitlines()]
        assert [e["type"] for e in events].count("session.status_idle") == 2
        assert all(e["id"].startswith("sevt_") for e in events)


async def _at_least(count: Any, n: int) -> bool:
    return bool(await count() >= n)

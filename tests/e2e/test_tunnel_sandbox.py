"""Issue 2 end to end: control plane + enrolled edge over mTLS gRPC on loopback + Docker sandboxes."""

from __future__ import annotations

import asyncio
import json

import docker
import pytest

from control_plane.server import ControlPlane
from outpost_wire.errors import ErrorCode, RemoteError
from outpost_wire.frames import Provision
from tests.support import eventually
from tests.support.docker_engine import exists_in_session_sandbox
from tests.support.e2e import Api, text_of

pytestmark = pytest.mark.docker


async def test_bash_state_persists_between_calls(api: Api, environment: str, enroll, run_edge) -> None:
    await run_edge(await enroll(environment))
    first = await api.exec(environment, "s-bash", "bash", {"command": "cd /tmp && export X=1"})
    assert not first["is_error"], first
    second = await api.exec(environment, "s-bash", "bash", {"command": "echo $X; pwd"})
    assert text_of(second).split() == ["1", "/tmp"]
    failing = await api.exec(environment, "s-bash", "bash", {"command": "echo oops >&2; exit 3"})
    assert failing["is_error"] and "oops" in text_of(failing)
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-bash"})


async def test_file_tools_round_trip(api: Api, environment: str, enroll, run_edge) -> None:
    await run_edge(await enroll(environment))
    s = "s-files"
    w = await api.exec(
        environment, s, "write", {"file_path": "src/app.py", "content": "print('hello')\nX = 1\n"}
    )
    assert not w["is_error"], w
    r = await api.exec(environment, s, "read", {"file_path": "/workspace/src/app.py"})
    assert "print('hello')" in text_of(r)
    e = await api.exec(
        environment, s, "edit", {"file_path": "src/app.py", "old_string": "X = 1", "new_string": "X = 2"}
    )
    assert not e["is_error"], e
    g = await api.exec(environment, s, "glob", {"pattern": "**/*.py"})
    assert "/workspace/src/app.py" in text_of(g)
    gr = await api.exec(environment, s, "grep", {"pattern": "X = \\d"})
    assert "/workspace/src/app.py:2:X = 2" in text_of(gr)
    run = await api.exec(environment, s, "bash", {"command": "python3 src/app.py"})
    assert text_of(run).strip() == "hello"
    for bad in ("../etc/passwd", "/etc/passwd"):
        out = await api.exec(environment, s, "read", {"file_path": bad})
        assert out["is_error"] and "outside" in text_of(out), out
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": s})


async def test_killed_container_is_a_tool_error_and_the_next_call_recovers(
    api: Api, environment: str, enroll, run_edge, docker_client: docker.DockerClient
) -> None:
    edge = await run_edge(await enroll(environment))
    s = "s-kill"
    await api.exec(environment, s, "write", {"file_path": "keep.txt", "content": "still here"})
    slow = asyncio.create_task(
        api.exec(environment, s, "bash", {"command": "touch /workspace/started; sleep 30"})
    )
    containers = docker_client.containers.list(
        filters={"label": [f"outpost.edge_id={edge.edge_id}", f"outpost.session_id={s}"]}
    )
    assert len(containers) == 1
    await eventually(
        lambda: exists_in_session_sandbox(docker_client, s, "/workspace/started"),
        what="the sleep running in the sandbox",
    )
    containers[0].kill()
    result = await asyncio.wait_for(slow, 30)
    assert result["is_error"], result
    after = await api.exec(environment, s, "bash", {"command": "cat keep.txt"})
    assert not after["is_error"] and text_of(after).strip() == "still here"
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": s})


async def test_image_outside_policy_is_refused_naming_the_rule(
    control_plane: ControlPlane, api: Api, environment: str, enroll, run_edge
) -> None:
    await run_edge(await enroll(environment))
    with pytest.raises(RemoteError) as info:
        await control_plane.gateway.provision("s-policy", environment, Provision(image="evil/miner:latest"))
    assert info.value.code is ErrorCode.POLICY_DENIED
    assert "images.allowed" in info.value.message
    with pytest.raises(RemoteError) as info:
        await control_plane.gateway.provision("s-policy", environment, Provision(memory_bytes=64 * 1024**3))
    assert "limits.max_memory_mb" in info.value.message
    # The edge goes on serving.
    ok = await api.exec(environment, "s-policy", "bash", {"command": "echo fine"})
    assert text_of(ok).strip() == "fine"
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-policy"})


async def test_destroy_removes_container_and_volume(
    api: Api, environment: str, enroll, run_edge, docker_client: docker.DockerClient
) -> None:
    edge = await run_edge(await enroll(environment))
    await api.exec(environment, "s-destroy", "bash", {"command": "true"})
    labels = [f"outpost.edge_id={edge.edge_id}", "outpost.session_id=s-destroy"]
    assert docker_client.containers.list(all=True, filters={"label": labels})
    out = await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-destroy"})
    assert out["existed"] is True
    assert not docker_client.containers.list(all=True, filters={"label": labels})
    assert not docker_client.volumes.list(filters={"label": labels})


async def test_large_result_is_chunked_through_the_tunnel(
    api: Api, environment: str, enroll, run_edge
) -> None:
    await run_edge(await enroll(environment))
    s = "s-big"
    # A 6 MB PDF read back as a document block crosses the 4 MiB frame limit.
    await api.exec(environment, s, "bash", {"command": "head -c 6000000 /dev/urandom > big.pdf"})
    out = await api.exec(environment, s, "read", {"file_path": "big.pdf"})
    assert not out["is_error"], text_of(out)[:200]
    block = out["content"][0]
    assert block["type"] == "document" and len(block["source"]["data"]) == 8_000_000
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": s})


async def test_connected_edges_are_listed(api: Api, environment: str, enroll, run_edge) -> None:
    edge = await run_edge(await enroll(environment))
    listed = await api.get(f"/v1/connected_edges?environment_id={environment}")
    [status] = listed["data"]
    assert status["edge_id"] == edge.edge_id
    assert status["policy_digest"].startswith("sha256:")
    enrolled = await api.get("/v1/edges")
    assert edge.edge_id in json.dumps(enrolled)
    assert "PRIVATE KEY" not in json.dumps(enrolled)


async def test_unknown_environment_and_no_edge(api: Api, environment: str) -> None:
    await api.exec("env_missing", "s", "bash", {"command": "true"}, expect=404)
    # An environment with no connected edge answers 503 at once, saying so.
    refused = await api.exec(environment, "s-none", "bash", {"command": "true"}, expect=503)
    assert refused["error"]["details"] == {"error_code": "edge_unavailable", "environment_id": environment}

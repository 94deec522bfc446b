"""The edge agent as a container (packaging/edge/Dockerfile via packaging/edge/build.sh): registered
into a state volume, run with the host's Docker socket, answers on its published health endpoint
(`observability.listen: 0.0.0.0:9464`, `-p 127.0.0.1::9464`) from the host, serves a tool call in a
sibling sandbox, and exits 0 after draining on SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from pathlib import Path

import httpx
import pytest
import yaml

from tests.e2e.bridge import EDGE_CONFIG, bridge_control_plane, connected_edge_ids, enrollment_token, run
from tests.support import REPO
from tests.support.e2e import text_of

pytestmark = pytest.mark.docker

IMAGE = "outpost-edge:e2e"


# Builds the edge's image from the checkout before it runs it.
@pytest.mark.timeout(900)
async def test_edge_container_registers_serves_and_drains(docker_client: object, tmp_path: Path) -> None:
    build = await run(
        "env", f"PIP={sys.executable} -m pip", "bash", str(REPO / "packaging/edge/build.sh"), IMAGE
    )
    assert "built" in build, build
    name = f"outpost-e2e-edge-{uuid.uuid4().hex[:8]}"
    volume = f"{name}-state"
    conf = tmp_path / "config.yaml"
    # The endpoint on all the container's interfaces, published to the host's loopback only.
    observability = {"listen": "0.0.0.0:9464", "allow_remote": True}
    conf.write_text(yaml.safe_dump({**EDGE_CONFIG, "observability": observability}))
    conf.chmod(0o644)
    common = (
        f"--group-add={os.stat('/var/run/docker.sock').st_gid}",
        "--volume=/var/run/docker.sock:/var/run/docker.sock",
        f"--volume={volume}:/var/lib/outpost-edge",
        f"--volume={conf}:/etc/outpost-edge/config.yaml:ro",
    )
    try:
        async with bridge_control_plane(tmp_path / "cp") as (cp, api, environment):
            token = await enrollment_token(api, environment)
            out = await run(
                "docker", "run", "--rm", "-i", *common, "-e", "OUTPOST_ENROLL_TOKEN", IMAGE,
                "register", "--config", "/etc/outpost-edge/config.yaml",
                "--control-plane", cp.http_url, "--ca-fingerprint", token["ca_fingerprint"],
                env_extra={"OUTPOST_ENROLL_TOKEN": token["token"]},
            )  # fmt: skip
            assert "registered edge" in out, out
            await run(
                "docker", "run", "--detach", f"--name={name}", "--publish=127.0.0.1::9464", *common, IMAGE
            )  # fmt: skip
            for _ in range(300):
                if await connected_edge_ids(api):
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError(await run("docker", "logs", name, check=False))
            user = await run("docker", "exec", name, "id", "-u")
            assert user.strip() == "10001"
            # The health endpoint, reached from the host through the published port.
            published = (await run("docker", "port", name, "9464/tcp")).split()[0]
            async with httpx.AsyncClient(base_url=f"http://{published}", timeout=10, trust_env=False) as http:
                for _ in range(300):
                    with contextlib.suppress(httpx.TransportError):
                        if (await http.get("/readyz")).status_code == 200:
                            break
                    await asyncio.sleep(0.1)
                else:
                    raise AssertionError(await run("docker", "logs", name, check=False))
                status = (await http.get("/status")).json()
                assert status["state"] == "connected" and status["transport"] == "grpc", status
                assert "outpost_edge_tunnel_up 1.0" in (await http.get("/metrics")).text

            result = await api.exec(environment, "s-container", "bash", {"command": "echo hi"})
            assert not result["is_error"] and text_of(result).strip() == "hi", result
            destroy = {"environment_id": environment, "session_id": "s-container"}
            await api.post("/v1/sandboxes/destroy", destroy)

            await run("docker", "kill", "--signal=SIGTERM", name)
            status = await run("docker", "wait", name, timeout_s=60)
            logs = await run("docker", "logs", name, check=False)
            assert status.strip() == "0", logs
            assert "draining" in logs, logs
    finally:
        await run("docker", "rm", "--force", name, check=False)
        await run("docker", "volume", "rm", "--force", volume, check=False)

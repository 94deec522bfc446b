"""Revocation is final, end to end: the real ``outpost-edge run`` (a subprocess, with Docker for its
sandbox manager) against a real control plane, over gRPC and over WebSocket. Revoking a connected
edge makes the process exit with code 3 within seconds, without a reconnect; an edge the control
plane's store does not know (same CA, another store) exits 3 at its first attempt. The config is
the one ``outpost-edge register --config PATH`` wrote, as the README's flow uses it."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import time
from pathlib import Path

import httpx
import pytest

from control_plane.server import ControlPlane
from outpost_wire.cli_support import EXIT_REFUSED
from tests.integration.edge_cli import edge_cli, new_token
from tests.support import REPO, eventually
from tests.support.edge_link import PROXY_VARS, api_client, running_control_plane
from tests.support.edge_link import api_fixture as api_fixture
from tests.support.edge_link import cp_fixture as cp_fixture
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = [pytest.mark.docker, pytest.mark.usefixtures("no_ambient_proxy")]

EXIT_WITHIN_S = 30.0  # generous on a busy 2-core machine; the figure is printed


def settings(transport: str) -> str:
    """Added to the written config: the transport under test, no sandboxes of other tests' names,
    no fixed observability port."""
    return (
        f"connection:\n  transport: {transport}\n"
        "sandbox:\n  name_prefix: outpost-revoke\n"
        "observability:\n  listen: 127.0.0.1:0\n"
    )


async def register_edge(
    cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path, transport: str
) -> tuple[str, Path]:
    """`outpost-edge register ... --config PATH` on a missing file: (edge id, the written config)."""
    token = await new_token(api)
    (tmp_path / "tok").write_text(token["token"])
    config = tmp_path / "config.yaml"
    code, out, err = await edge_cli(
        "register", "--control-plane", cp.http_url, "--token-file", "tok",
        "--ca-fingerprint", token["ca_fingerprint"], "--state-dir", "state", "--config", str(config),
        cwd=tmp_path,
    )  # fmt: skip
    assert code == 0, err
    edge_id = out.split()[2]
    assert edge_id.startswith("edge_"), out
    with config.open("a") as f:
        f.write(settings(transport))
    return edge_id, config


async def start_edge(config: Path, log: Path) -> asyncio.subprocess.Process:
    env = {k: v for k, v in os.environ.items() if k not in PROXY_VARS and not k.startswith("OUTPOST_")}
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "edge_agent.cli", "run", "--config", str(config),
        cwd=config.parent, env={**env, "PYTHONPATH": str(REPO)},
        stdout=log.open("wb"), stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip


async def exit_code(proc: asyncio.subprocess.Process, log: Path) -> int:
    try:
        return await asyncio.wait_for(proc.wait(), EXIT_WITHIN_S)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        raise AssertionError(
            f"the edge did not exit within {EXIT_WITHIN_S:g} s:\n{log.read_text()}"
        ) from None


@pytest.mark.parametrize("transport", ["grpc", "websocket"])
async def test_a_connected_edge_that_is_revoked_exits_3_and_stays_down(
    cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path, transport: str
) -> None:
    edge_id, config = await register_edge(cp, api, tmp_path, transport)
    log = tmp_path / "edge.log"
    proc = await start_edge(config, log)
    try:

        async def connected() -> bool:
            assert proc.returncode is None, log.read_text()
            return cp.registry.get(edge_id) is not None

        await eventually(connected, 60, "the edge's tunnel")
        conn = cp.registry.get(edge_id)
        assert conn is not None and conn.peer.startswith("ws:" if transport == "websocket" else "ipv4:")

        started = time.monotonic()
        r = await api.post(f"/v1/edges/{edge_id}/revoke")
        assert r.status_code == 200, r.text
        code = await exit_code(proc, log)
        print(f"{transport}: exited {time.monotonic() - started:.1f} s after the revocation")
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    text = log.read_text()
    assert code == EXIT_REFUSED, text
    assert "refuses this edge for good (revoked): not reconnecting" in text, text
    assert text.count("tunnel up to control plane") == 1 and "reconnecting in" not in text, text
    last = [line for line in text.splitlines() if line.strip()][-1]
    assert last.startswith(
        "outpost-edge: the control plane refuses this edge: revoked; enroll this edge again"
    ), text
    assert "Traceback" not in text, text


@pytest.mark.parametrize("transport", ["grpc", "websocket"])
async def test_an_edge_unknown_to_the_store_exits_3_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, transport: str
) -> None:
    async with running_control_plane(tmp_path, monkeypatch) as first, api_client(first) as api:
        _, config = await register_edge(first, api, tmp_path, transport)
    # Another control plane with the same CA and an empty store (a store restored from before
    # the edge enrolled, say): TLS accepts the edge's certificate, the store does not know it.
    shutil.copytree(tmp_path / "cp" / "ca", tmp_path / "cp2" / "ca")
    async with running_control_plane(tmp_path, monkeypatch, data_dir=tmp_path / "cp2") as other:
        text = config.read_text()
        text = text.replace(first.http_url, other.http_url).replace(
            first.tunnel_address, other.tunnel_address
        )
        config.write_text(text)
        log = tmp_path / "edge.log"
        proc = await start_edge(config, log)
        try:
            code = await exit_code(proc, log)
        finally:
            if proc.returncode is None:
                proc.kill()
                await proc.wait()
    text = log.read_text()
    assert code == EXIT_REFUSED, text
    assert "refuses this edge for good (unknown edge)" in text and "reconnecting in" not in text, text
    assert "Traceback" not in text, text

"""``outpost-edge doctor`` against a real control plane (SQLite, gRPC mTLS and uvicorn on loopback,
port 0): its tunnel check is a real authenticated hello dialled by the edge's own ``Dialer``, so it
goes through the very proxy the link would use (``connection.proxy_url`` first, then
``https_proxy`` / ``HTTPS_PROXY``), says OK for a live edge without disturbing its tunnel, and
names a revocation. The doctor runs as the real CLI, in a subprocess; no Docker needed (its docker
check is not asserted here)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from control_plane.server import ControlPlane
from edge_agent.enroll import register, render_config
from edge_agent.identity import Identity
from tests.integration.edge_cli import edge_cli, new_token
from tests.support.connect_proxy import ConnectProxy
from tests.support.edge_link import api_fixture as api_fixture
from tests.support.edge_link import cp_fixture as cp_fixture
from tests.support.edge_link import make_dialer, running_link
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


async def enrolled(
    cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path, extra: str = ""
) -> tuple[Identity, Path]:
    """A registered edge and its config file (as `outpost-edge register` writes it, plus ``extra``)."""
    token = await new_token(api)
    state_dir = tmp_path / "edge"
    identity = await register(
        cp.http_url, token["token"], state_dir, name="doc", ca_fingerprint=token["ca_fingerprint"]
    )
    config = tmp_path / "config.yaml"
    config.write_text(render_config(identity, state_dir=state_dir) + extra)
    return identity, config


async def doctor(
    config: Path, tmp_path: Path, env: dict[str, str] | None = None
) -> tuple[int, dict[str, str], str]:
    """Run the doctor: (exit code, {check: its line}, the whole report)."""
    code, out, err = await edge_cli("doctor", "--config", str(config), cwd=tmp_path, env=env)
    assert "Traceback" not in out + err, out + err
    lines = {}
    for line in out.splitlines():
        parts = line.split(maxsplit=2)
        if len(parts) == 3 and parts[0] in ("OK", "WARN", "FAIL", "SKIP"):
            lines[parts[1].rstrip(":")] = line
    return code, lines, out


async def test_ok_for_a_live_edge_without_disturbing_its_tunnel_then_revocation_is_named(
    cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    identity, config = await enrolled(cp, api, tmp_path)
    async with running_link(identity, make_dialer(identity, tmp_path / "edge")) as link:
        await asyncio.wait_for(link.connected.wait(), 15)
        live = cp.registry.get(identity.edge_id)
        assert live is not None

        _, checks, out = await doctor(config, tmp_path)
        assert checks["tunnel"].startswith("OK   tunnel: authenticated hello answered over grpc"), out
        for name in ("config", "identity", "certificate", "proxy", "dns", "tcp", "tls"):
            assert checks[name].startswith("OK"), out
        # The probe hello was answered, not registered: the edge's own tunnel is the one still up.
        assert cp.registry.get(identity.edge_id) is live and link.connections == 1
        assert link.connected.is_set()

    r = await api.post(f"/v1/edges/{identity.edge_id}/revoke")
    assert r.status_code == 200, r.text
    code, checks, out = await doctor(config, tmp_path)
    assert code == 1, out
    assert (
        checks["tunnel"] == f"FAIL tunnel: the control plane refuses this edge ({identity.edge_id}): revoked"
    ), out
    assert "     fix: re-enroll: " in out and "outpost-edge register --force" in out, out


async def test_the_hello_goes_through_connection_proxy_url_even_with_https_proxy_set(
    cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    tunnel_port = int(cp.tunnel_address.rsplit(":", 1)[1])
    async with ConnectProxy("edge", "s3cret", {tunnel_port}) as proxy:
        _, config = await enrolled(cp, api, tmp_path, f"connection:\n  proxy_url: {proxy.url()}\n")
        # An environment proxy that would fail: the config's proxy_url wins, for the link and the doctor.
        _, checks, out = await doctor(config, tmp_path, env={"https_proxy": "http://127.0.0.1:9"})
        assert checks["tunnel"].startswith("OK   tunnel: authenticated hello answered over grpc"), out
        assert (
            "through proxy http://edge:***@127.0.0.1:" in checks["proxy"] and "(connection.proxy_url)" in out
        )
        assert "s3cret" not in out
        tunnelled = [
            target for target, status in proxy.log if status == 200 and target.endswith(f":{tunnel_port}")
        ]
        assert len(tunnelled) >= 3, proxy.log  # the tcp and tls checks, and the hello itself


async def test_websocket_hello_goes_through_the_environments_https_proxy(
    cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    http_port = int(cp.http_url.rsplit(":", 1)[1])
    async with ConnectProxy("edge", "pw", {http_port}) as proxy:
        _, config = await enrolled(cp, api, tmp_path, "connection:\n  transport: websocket\n")
        _, checks, out = await doctor(config, tmp_path, env={"HTTPS_PROXY": proxy.url()})
        assert checks["tunnel"].startswith("OK   tunnel: authenticated hello answered over websocket"), out
        assert "(HTTPS_PROXY)" in checks["proxy"], out
        assert checks["tls"].startswith("SKIP"), out
        tunnelled = [
            target for target, status in proxy.log if status == 200 and target.endswith(f":{http_port}")
        ]
        assert len(tunnelled) >= 2, proxy.log  # the tcp check and the hello


async def test_an_unreachable_control_plane_is_named_with_the_fix(
    cp: ControlPlane, api: httpx.AsyncClient, tmp_path: Path
) -> None:
    _, config = await enrolled(cp, api, tmp_path)
    await cp.close()
    code, checks, out = await doctor(config, tmp_path)
    assert code == 1, out
    assert checks["tcp"].startswith("FAIL tcp: cannot connect to 127.0.0.1:"), out
    assert "fix: nothing listens on" in out and checks["tunnel"].startswith("SKIP"), out

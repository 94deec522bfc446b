"""``outpost-control tokens create`` against a real control plane: one token to the terminal, or a
fleet's worth written to 0600 files (the tokens never printed), each of which enrolls one edge."""

from __future__ import annotations

import asyncio
import json
import re
import stat
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from control_plane.cli import main
from control_plane.config import ControlPlaneConfig
from control_plane.server import ControlPlane
from edge_agent.enroll import EnrollmentError, register


@pytest.fixture
async def cp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ControlPlane]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    config = ControlPlaneConfig(data_dir=tmp_path / "cp", http_port=0, tunnel_port=0)
    async with ControlPlane(config) as plane:
        yield plane


async def cli(cp: ControlPlane, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = await asyncio.to_thread(main, [*argv, "--url", cp.http_url, "--data-dir", str(cp.config.data_dir)])
    out, err = capsys.readouterr()
    return code, out, err


async def test_fleet_tokens_go_to_private_files_and_each_enrolls_once(
    cp: ControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = await cli(cp, capsys, "environments", "create", "--name", "fleet")
    env = json.loads(out)["id"]
    out_dir = tmp_path / "tokens"
    code, out, err = await cli(
        cp, capsys, "tokens", "create", "--environment", env, "--count", "3", "--out-dir", str(out_dir)
    )
    assert code == 0
    listing = json.loads(out)
    assert cp.ca is not None and listing["ca_fingerprint"] == cp.ca.fingerprint_sha256
    files = [Path(t["file"]) for t in listing["tokens"]]
    assert len(files) == 3 and len({f.name for f in files}) == 3
    assert stat.S_IMODE(out_dir.stat().st_mode) == 0o700
    tokens = [f.read_text().strip() for f in files]
    for f, token in zip(files, tokens, strict=True):
        assert stat.S_IMODE(f.stat().st_mode) == 0o600
        assert token not in out and token not in err  # never printed
    assert "--token-file FILE" in err

    edges = []
    for i, token in enumerate(tokens):
        identity = await register(
            cp.http_url,
            token,
            tmp_path / f"edge{i}",
            name=f"host-{i}",
            ca_fingerprint=listing["ca_fingerprint"],
        )
        assert identity.environment_id == env
        edges.append(identity.edge_id)
    assert len(set(edges)) == 3
    with pytest.raises(EnrollmentError):  # single use
        await register(cp.http_url, tokens[0], tmp_path / "again", name="again")


async def test_count_without_out_dir_is_refused(cp: ControlPlane, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = await cli(cp, capsys, "tokens", "create", "--environment", "env_x", "--count", "2")
    assert code == 2 and "--count above 1 needs --out-dir" in err
    code, _, err = await cli(cp, capsys, "tokens", "create", "--environment", "env_x", "--count", "0")
    assert code == 2 and "--count must be 1..1000" in err


async def test_one_token_to_the_terminal(
    cp: ControlPlane, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _, out, _ = await cli(cp, capsys, "environments", "create", "--name", "one")
    env = json.loads(out)["id"]
    code, out, err = await cli(cp, capsys, "tokens", "create", "--environment", env)
    data = json.loads(out)
    assert code == 0 and data["token"] and data["environment_id"] == env
    assert "outpost-edge register" in err


async def test_the_cli_trusts_the_control_planes_own_ca_over_https(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    config = ControlPlaneConfig(data_dir=tmp_path / "cp", http_port=0, tunnel_port=0, http_tls=True)
    async with ControlPlane(config) as plane:
        assert plane.http_url.startswith("https://")
        code, out, _ = await cli(plane, capsys, "environments", "create", "--name", "tls")
        assert code == 0 and json.loads(out)["id"].startswith("env")
        # Without the control plane's CA (no data dir, no --ca-file) the certificate is not trusted.
        monkeypatch.setenv("OUTPOST_API_KEY", plane.admin_key())
        capsys.readouterr()
        assert await asyncio.to_thread(main, ["environments", "list", "--url", plane.http_url]) == 2
        assert re.search(r"CERTIFICATE_VERIFY_FAILED.*pass --ca-file or --data-dir", capsys.readouterr().err)
        ca = str(plane.config.data_dir / "ca" / "ca.crt")
        code = await asyncio.to_thread(
            main, ["environments", "list", "--url", plane.http_url, "--ca-file", ca]
        )
        assert code == 0

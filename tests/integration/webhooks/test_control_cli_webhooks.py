"""``outpost-control webhooks`` against a real control plane: create (secret once, or into a 0600
file), list, get, update, rotate-secret, delete; a bad URL is one clear line and exit code 2."""

from __future__ import annotations

import asyncio
import json
import stat
from pathlib import Path

import pytest

from control_plane.cli import main
from control_plane.server import ControlPlane
from tests.support.edge_link import control_plane_config
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


async def cli(cp: ControlPlane, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    args = [*argv, "--url", cp.http_url, "--data-dir", str(cp.config.data_dir)]
    code = await asyncio.to_thread(main, args)
    out, err = capsys.readouterr()
    return code, out, err


async def test_the_webhooks_commands(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    monkeypatch.delenv("OUTPOST_API_KEY", raising=False)
    async with ControlPlane(control_plane_config(tmp_path)) as cp:
        url = "https://hooks.example.com/in"
        code, out, _ = await cli(
            cp, capsys, "webhooks", "create", "--endpoint-url", url, "--event-type", "session.idled"
        )
        created = json.loads(out)
        assert code == 0 and created["secret"].startswith("whsec_")
        assert created["event_types"] == ["session.idled"]
        code, out, _ = await cli(cp, capsys, "webhooks", "list", "-o", "json")
        assert [e["id"] for e in json.loads(out)] == [created["id"]] and "secret" not in out
        code, out, _ = await cli(
            cp, capsys, "webhooks", "update", created["id"], "--disable", "--all-events", "-o", "json"
        )
        assert json.loads(out)["enabled"] is False and json.loads(out)["event_types"] == []
        secret_file = tmp_path / "secret"
        code, out, _ = await cli(
            cp, capsys, "webhooks", "rotate-secret", created["id"], "--out", str(secret_file)
        )
        assert code == 0 and "whsec_" not in out
        assert (
            secret_file.read_text().startswith("whsec_") and stat.S_IMODE(secret_file.stat().st_mode) == 0o600
        )
        code, out, _ = await cli(cp, capsys, "webhooks", "get", created["id"], "-o", "json")
        assert json.loads(out)["id"] == created["id"]
        code, out, err = await cli(
            cp, capsys, "webhooks", "create", "--endpoint-url", "http://hooks.example.com/"
        )
        assert code == 2 and "https" in err and out == ""  # a refused request: usage (docs/operations.md)
        code, out, _ = await cli(cp, capsys, "webhooks", "delete", created["id"])
        assert code == 0 and json.loads(out)["type"] == "webhook_endpoint_deleted"

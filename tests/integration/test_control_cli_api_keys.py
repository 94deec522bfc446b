"""``outpost-control api-keys`` against a real control plane (SQLite, HTTP): create (printed once or
into a 0600 file), list (never the secret), revoke (through the API: refused at once), and
``rotate-admin`` (a new admin key in the data dir, the old one refused by the running control plane
within its key cache's TTL, as it changes the store from another process); ``serve`` never makes a
second admin key beside a usable one when the key file is gone."""

from __future__ import annotations

import asyncio
import json
import stat
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx
import pytest

from control_plane.admin_key import ADMIN_KEY_FILE
from control_plane.api.auth import KEY_CACHE_TTL_S
from control_plane.cli import main
from control_plane.server import ControlPlane
from tests.support import eventually
from tests.support.edge_link import control_plane_config
from tests.support.edge_link import no_ambient_proxy as no_ambient_proxy

pytestmark = pytest.mark.usefixtures("no_ambient_proxy")


@asynccontextmanager
async def control_plane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[ControlPlane]:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "unused")
    monkeypatch.delenv("OUTPOST_API_KEY", raising=False)
    async with ControlPlane(control_plane_config(tmp_path)) as cp:
        yield cp


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def cli(cp: ControlPlane, capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    return await run(capsys, *argv, "--url", cp.http_url, "--data-dir", str(cp.config.data_dir))


async def status(cp: ControlPlane, key: str, path: str = "/v1/agents") -> int:
    async with httpx.AsyncClient(base_url=cp.http_url, timeout=20) as http:
        return (await http.get(path, headers={"authorization": f"Bearer {key}"})).status_code


async def refused_within_cache_ttl(cp: ControlPlane, key: str) -> None:
    """A key revoked in the store by another process: the running control plane refuses it once
    its cached record (read at most KEY_CACHE_TTL_S ago) expires."""

    async def refused() -> bool:
        return await status(cp, key) == 401

    await eventually(refused, KEY_CACHE_TTL_S + 10, "the old admin key to be refused", interval_s=0.2)


async def test_create_list_revoke(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with control_plane(tmp_path, monkeypatch) as cp:
        code, out, _ = await cli(cp, capsys, "environments", "create", "--name", "pool")
        env = json.loads(out)["id"]
        code, out, err = await cli(
            cp, capsys, "api-keys", "create", "--name", "ci", "--scope", "read_write",
            "--environment", env, "--ttl-s", "3600",
        )  # fmt: skip
        assert code == 0, err
        created = json.loads(out)
        assert created["key"].startswith("sk-outpost-")
        assert created["environment_ids"] == [env] and created["expires_at"]
        assert await status(cp, created["key"]) == 200
        assert await status(cp, created["key"], "/v1/api_keys") == 403  # admin only

        key_file = tmp_path / "ro.key"
        code, out, err = await cli(cp, capsys, "api-keys", "create", "--name", "dash", "--out", str(key_file))
        assert code == 0, err
        ro = json.loads(out)
        assert "key" not in ro and ro["scope"] == "read_only"
        assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
        ro_key = key_file.read_text().strip()
        assert ro_key not in out and await status(cp, ro_key) == 200

        code, out, _ = await cli(cp, capsys, "api-keys", "list", "-o", "json")
        assert code == 0
        listed = {k["id"]: k for k in json.loads(out)}
        assert listed[created["id"]]["scope"] == "read_write"
        assert created["key"] not in out and ro_key not in out
        code, table, _ = await cli(cp, capsys, "api-keys", "list", "-o", "table")
        assert "SCOPE" in table and "LAST USED" in table and env in table

        code, out, err = await cli(cp, capsys, "api-keys", "revoke", created["id"], "-o", "json")
        assert code == 0, err
        assert json.loads(out)["status"] == "revoked"
        assert await status(cp, created["key"]) == 401  # at once

        code, out, err = await cli(cp, capsys, "api-keys", "revoke", "apikey_nope")
        assert code == 1 and out == ""
        assert err.count("\n") == 1 and "404" in err
        # a non-admin key cannot manage keys: refused, exit 3
        code, _, err = await run(
            capsys, "api-keys", "list", "--url", cp.http_url, "--api-key-file", str(key_file)
        )
        assert code == 3 and "permission_error" in err


async def test_rotate_admin_revokes_the_old_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with control_plane(tmp_path, monkeypatch) as cp:
        old = cp.admin_key()
        assert await status(cp, old) == 200
        data_dir = str(cp.config.data_dir)
        code, out, err = await run(capsys, "api-keys", "rotate-admin", "--data-dir", data_dir)
        assert code == 0, err
        result = json.loads(out)
        new = cp.admin_key()
        assert new != old and new not in out and old not in out
        assert stat.S_IMODE((cp.config.data_dir / ADMIN_KEY_FILE).stat().st_mode) == 0o600
        assert len(result["revoked"]) == 1
        await refused_within_cache_ttl(cp, old)
        assert await status(cp, new) == 200
        code, out, _ = await cli(cp, capsys, "api-keys", "list", "-o", "json")  # the CLI reads the new file
        assert code == 0
        states = {k["id"]: k["status"] for k in json.loads(out)}
        assert states == {result["id"]: "active", result["revoked"][0]: "revoked"}


async def test_serve_does_not_add_a_second_admin_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async with control_plane(tmp_path, monkeypatch) as cp:
        old = cp.admin_key()
        data_dir = cp.config.data_dir
    (data_dir / ADMIN_KEY_FILE).unlink()
    async with control_plane(tmp_path, monkeypatch) as cp:
        assert not (data_dir / ADMIN_KEY_FILE).exists()  # no second key made
        assert cp.store is not None
        assert len(await cp.store.list_api_keys()) == 1
        assert await status(cp, old) == 200
        code, _, err = await run(capsys, "api-keys", "rotate-admin", "--data-dir", str(data_dir))
        assert code == 0, err
        await refused_within_cache_ttl(cp, old)
        assert await status(cp, cp.admin_key()) == 200


async def test_rotate_admin_needs_an_existing_data_dir(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = await run(capsys, "api-keys", "rotate-admin", "--data-dir", str(tmp_path / "nope"))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and "does not exist" in err

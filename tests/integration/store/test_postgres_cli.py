"""``outpost-control migrate`` and ``outpost-control store copy`` on the test PostgreSQL server,
configured as an operator would: a config file with ``store_url``, ``store_password_file`` and
``store_schema`` (the password never on the command line or in the output)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from control_plane.cli import main
from control_plane.config import ControlPlaneConfig
from control_plane.store import ApiKeyRecord, EdgeRecord, EnrollmentTokenRecord, SqliteStore
from control_plane.store.postgres import SCHEMA_VERSION, PostgresStore
from tests.support.pg import PG_URL, drop_schema, new_schema, pg_config
from tests.support.store_contract import at, new_events


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = new_schema()
    yield name
    await drop_schema(name)


def _config_file(tmp_path: Path, schema: str) -> Path:
    config = pg_config(schema)
    path = tmp_path / "control.yaml"
    data = {"data_dir": str(tmp_path / "data"), "store_url": PG_URL, "store_schema": schema}
    if config.password_file is not None:
        data["store_password_file"] = str(config.password_file)
    path.write_text(yaml.safe_dump(data))
    return path


async def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = await asyncio.to_thread(main, list(argv))
    out, err = capsys.readouterr()
    return code, out, err


async def test_migrate_brings_the_configured_store_to_this_build(
    tmp_path: Path, schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    config = _config_file(tmp_path, schema)
    code, out, err = await run(capsys, "migrate", "--config", str(config))
    assert code == 0, err
    assert json.loads(out) | {"store": ""} == {
        "store": "",
        "schema": schema,
        "from_version": 0,
        "schema_version": SCHEMA_VERSION,
    }
    code, out, _ = await run(capsys, "migrate", "--config", str(config))
    assert code == 0 and json.loads(out)["from_version"] == SCHEMA_VERSION

    sqlite_data = tmp_path / "sqlite-data"
    code, out, err = await run(capsys, "migrate", "--data-dir", str(sqlite_data))
    assert code == 0, err
    assert (sqlite_data / "outpost.db").exists()


async def test_migrate_says_when_the_server_cannot_be_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "control.yaml"
    config.write_text(yaml.safe_dump({"store_url": "postgresql://outpost:pw-in-url@127.0.0.1:1/x"}))
    code, out, err = await run(capsys, "migrate", "--config", str(config))
    assert code == 4, err  # unreachable
    assert "pw-in-url" not in out + err and "***" in err


def test_the_config_accepts_postgres_and_checks_the_pool() -> None:
    config = ControlPlaneConfig.model_validate(
        {
            "store_url": "postgresql://u@db/x",
            "store_pool_min": 1,
            "store_pool_max": 3,
            "store_ssl_mode": "require",
        }
    )
    assert config.store_options.pool_max == 3 and config.store_options.ssl_mode == "require"
    with pytest.raises(ValueError, match="store_pool_min"):
        ControlPlaneConfig.model_validate({"store_pool_min": 5, "store_pool_max": 2})
    with pytest.raises(ValueError, match="expected sqlite"):
        ControlPlaneConfig.model_validate({"store_url": "mysql://u@db/x"})


async def test_store_copy_moves_everything_from_sqlite(
    tmp_path: Path, schema: str, capsys: pytest.CaptureFixture[str]
) -> None:
    db = tmp_path / "outpost.db"
    token = EnrollmentTokenRecord("enr_1", "env_1", "a" * 64, at(0), at(600))
    async with SqliteStore(db) as source:
        await source.create_resource("agent", "ag_1", {"v": 1}, at(0))
        await source.update_resource("agent", "ag_1", {"v": 2}, at(1), keep_history=True)
        await source.create_resource("session", "s1", {"status": "idle", "agent": "ag_1"}, at(2))
        await source.archive_resource("agent", "ag_1", at(3))
        lease = await source.acquire_lease("s1", "h1", 30, at(0))
        assert lease is not None
        written = await source.append("s1", new_events("a", 12_000), at(4), epoch=lease.epoch)
        await source.append("s2", new_events("b", 3), at(5))
        await source.create_enrollment_token(token)
        await source.create_enrollment_token(replace(token, id="enr_2", token_hash="c" * 64))
        await source.consume_enrollment_token("c" * 64, "edge_1", at(5))
        await source.create_edge(EdgeRecord("edge_1", "env_1", "e", "01", "f" * 64, at(0), at(999)))
        await source.revoke_edge("edge_1", at(6))
        await source.create_api_key(ApiKeyRecord("key_1", "ci", "b" * 64, at(0), environment_ids=("env_1",)))
        await source.set_sandbox_edge("s1", "edge_1")
        await source.request_wake("s1", at(7))

    config = _config_file(tmp_path, schema)
    code, out, err = await run(
        capsys, "store", "copy", "--from", f"sqlite:///{db}", "--to", PG_URL, "--config", str(config)
    )
    assert code == 0, err
    copied = json.loads(out)["copied"]
    assert copied["events"] == 12_003 and copied["resources"] == 2 and copied["resource_versions"] == 1

    async with SqliteStore(db) as source, PostgresStore(pg_config(schema)) as target:
        for kind, id in (("agent", "ag_1"), ("session", "s1")):
            assert await target.get_resource(kind, id) == await source.get_resource(kind, id)
        assert await target.get_resource("agent", "ag_1", version=1) == await source.get_resource(
            "agent", "ag_1", version=1
        )
        assert await target.get_events("s1") == written
        assert await target.last_seqs(["s1", "s2"]) == {"s1": 12_000, "s2": 3}
        assert await target.list_enrollment_tokens() == await source.list_enrollment_tokens()
        assert await target.list_edges() == await source.list_edges()
        assert await target.list_api_keys() == await source.list_api_keys()
        assert await target.get_sandbox_edge("s1") == "edge_1"
        assert await target.wake_requests() == ["s1"]
        assert await target.get_lease("s1") is None  # runtime state: not copied
        filtered = await target.list_resources("session", filters={"status": "idle"})
        assert [r.id for r in filtered.items] == ["s1"]
        # The copied log goes on where it stopped.
        more = await target.append("s1", new_events("c", 1), at(8))
        assert more[0].seq == 12_001

    # A second copy into the same (now non-empty) store is refused, and writes nothing.
    code, out, err = await run(
        capsys, "store", "copy", "--from", f"sqlite:///{db}", "--to", PG_URL, "--config", str(config)
    )
    assert code == 1 and "not empty" in err

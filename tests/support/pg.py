"""PostgreSQL for tests: the throwaway cluster ``scripts/setup.sh`` starts on 127.0.0.1:55432.

``$OUTPOST_TEST_PG_URL`` names another server if set. When the URL carries no password, the one
setup.sh wrote to ``/var/tmp/outpost-pg/password`` is used (as a password file). Each test gets a
schema of its own, dropped afterwards; a server that does not answer fails the tests (CI runs
setup.sh first), it never skips them.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import asyncpg
import pytest

from control_plane.store.postgres import PostgresConfig

__all__ = [
    "PG_DIR",
    "PG_URL",
    "PrivateCluster",
    "drop_schema",
    "new_schema",
    "pg_config",
    "private_cluster",
]

PG_DIR = Path("/var/tmp/outpost-pg")
PG_URL = os.environ.get("OUTPOST_TEST_PG_URL") or "postgresql://outpost@127.0.0.1:55432/outpost_test"
_PASSWORD_FILE = PG_DIR / "password"


def new_schema() -> str:
    return f"t_{secrets.token_hex(8)}"


def pg_config(schema: str, **overrides: object) -> PostgresConfig:
    """The test server, in ``schema`` (created by the store at its first call)."""
    password_file = None if urlsplit(PG_URL).password else _PASSWORD_FILE
    options: dict[str, object] = {"pool_min": 1, "pool_max": 4, "password_file": password_file}
    options.update(overrides)
    return PostgresConfig(PG_URL, schema=schema, **options)  # type: ignore[arg-type]


async def drop_schema(schema: str) -> None:
    config = pg_config(schema)
    conn = await asyncpg.connect(**config.connect_kwargs())
    try:
        await conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')
    finally:
        await conn.close()


@dataclass
class PrivateCluster:
    """A PostgreSQL server of one test's own (to restart without disturbing anyone else's)."""

    directory: Path
    port: int
    bin_dir: Path

    @property
    def url(self) -> str:
        return f"postgresql://outpost@127.0.0.1:{self.port}/postgres"

    @property
    def password_file(self) -> Path:
        return self.directory / "password"

    def config(self, **overrides: object) -> PostgresConfig:
        options: dict[str, object] = {"pool_min": 1, "pool_max": 4, "password_file": self.password_file}
        options.update(overrides)
        return PostgresConfig(self.url, **options)  # type: ignore[arg-type]

    def pg_ctl(self, *args: str) -> None:
        """``pg_ctl ARGS``; a server it starts logs to ``server.log`` (not to our pipes, which
        would stay open as long as it runs)."""
        log = ("-l", str(self.directory / "server.log"))
        _as_postgres(str(self.bin_dir / "pg_ctl"), "-D", str(self.directory / "data"), *log, *args)


def _as_postgres(*argv: str) -> None:
    """initdb and the server refuse to run as root: as root, run them as the postgres user."""
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    subprocess.run([*prefix, *argv], check=True, capture_output=True, timeout=120)


def private_cluster() -> Iterator[PrivateCluster]:
    """Use as the body of a fixture: ``yield from private_cluster()``. A fresh cluster in a
    temporary directory on a free loopback port, password-protected, removed afterwards."""
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not bins:
        pytest.fail("PostgreSQL is not installed (scripts/setup.sh installs it)")
    bin_dir = bins[-1].parent
    directory = Path(tempfile.mkdtemp(prefix="outpost-pg-test-", dir="/var/tmp"))
    try:
        if os.geteuid() == 0:
            shutil.chown(directory, "postgres", "postgres")
        password = secrets.token_urlsafe(16)
        pwfile = directory / "password"
        pwfile.write_text(password + "\n")
        if os.geteuid() == 0:
            shutil.chown(pwfile, "postgres", "postgres")
        pwfile.chmod(0o600)
        _as_postgres(
            str(bin_dir / "initdb"), "-D", str(directory / "data"), "-U", "outpost", f"--pwfile={pwfile}",
            "--auth=scram-sha-256", "--no-sync", "--encoding=UTF8", "--locale=C.UTF-8",
        )  # fmt: skip
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        cluster = PrivateCluster(directory, port, bin_dir)
        options = f"-c listen_addresses=127.0.0.1 -p {port} -k {directory} -c fsync=off"
        cluster.pg_ctl("-o", options, "-w", "start")
        try:
            yield cluster
        finally:
            cluster.pg_ctl("-m", "immediate", "-w", "stop")
    finally:
        shutil.rmtree(directory, ignore_errors=True)

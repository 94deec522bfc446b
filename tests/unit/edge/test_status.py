"""``outpost-edge status``: the /status document as rows, the URL it reads, and the CLI against a
real local endpoint (and against none: one line, exit 4)."""

from __future__ import annotations

import asyncio
import json
import socket
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

import edge_agent.status as status
from edge_agent.cli import main
from edge_agent.config import EdgeConfig
from edge_agent.observe import EdgeMetrics, ObserveServer
from edge_agent.status import REVOKED, status_rows
from outpost_wire.cli_support import EXIT_UNREACHABLE, EXIT_USAGE, UsageError

NOW = datetime(2026, 5, 4, 12, 0, tzinfo=UTC)
DOC: dict[str, Any] = {
    "edge_id": "edge_1",
    "name": "build-host-17",
    "environment_id": "env_1",
    "version": "0.1.0",
    "state": "connected",
    "connected": True,
    "since": "2026-05-04T10:00:00Z",
    "transport": "grpc",
    "control_plane": "cp.example.com:7443",
    "control_plane_id": "cp_1",
    "last_error": None,
    "handshakes": 1,
    "revoked": False,
    "certificate_not_after": "2026-08-02T12:00:00Z",
    "certificate_expires_in_days": 90.0,
    "sandboxes_live": 1,
    "sandbox_capacity": 8,
    "requests_in_flight": 0,
}


def test_exports() -> None:
    assert set(status.__all__) == {"REVOKED", "fetch_status", "show_status", "status_document", "status_rows"}


def test_rows_for_people() -> None:
    rows = {r["field"]: r["value"] for r in status_rows(DOC, NOW)}
    assert rows["edge"] == "edge_1 (build-host-17)"
    assert rows["tunnel"] == "connected since 2026-05-04T10:00:00Z (2h ago)"
    assert rows["control plane"] == "cp.example.com:7443 over grpc (cp_1)"
    assert rows["last error"] == "-"
    assert rows["certificate"] == "expires 2026-08-02T12:00:00Z (in 90 days)"
    assert rows["revoked"] == "no"
    assert rows["sandboxes"] == "1 of 8 (0 requests in flight)"


def test_rows_of_a_revoked_edge() -> None:
    doc = {
        **DOC,
        "state": REVOKED,
        "connected": False,
        "revoked": True,
        "last_error": "control plane refused this edge: edge revoked",
    }
    rows = {r["field"]: r["value"] for r in status_rows(doc, NOW)}
    assert rows["tunnel"].startswith("revoked since")
    assert rows["control plane"] == "last: cp.example.com:7443 over grpc (cp_1)"
    assert rows["revoked"] == "YES (revoked): enroll it again (outpost-edge register --force)"
    assert rows["last error"] == "control plane refused this edge: edge revoked"


@pytest.mark.parametrize(
    ("listen", "url"),
    [
        ("127.0.0.1:9464", "http://127.0.0.1:9464/status"),
        ("0.0.0.0:9000", "http://127.0.0.1:9000/status"),
        ("[::]:9000", "http://[::1]:9000/status"),
    ],
)
def test_the_url_follows_observability_listen(listen: str, url: str) -> None:
    config = EdgeConfig.model_validate({"observability": {"listen": listen, "allow_remote": True}})
    assert status._status_url(config) == url


def test_an_endpoint_that_is_off_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match=r"observability\.listen is null"):
        status._status_url(EdgeConfig.model_validate({"observability": {"listen": None}}))


def _config(tmp_path: Path, listen: str | None) -> Path:
    path = tmp_path / "config.yaml"
    path.write_text(json.dumps({"state_dir": str(tmp_path / "state"), "observability": {"listen": listen}}))
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_no_daemon_is_one_line_and_exit_4(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    port = _free_port()  # nothing listens there
    code = main(["status", "--config", str(_config(tmp_path, f"127.0.0.1:{port}"))])
    out, err = capsys.readouterr()
    assert code == EXIT_UNREACHABLE
    assert out == ""
    assert err == (
        f"outpost-edge: the edge daemon is not running: nothing answers on http://127.0.0.1:{port}/status; "
        "start it (systemctl start outpost-edge, or outpost-edge run --config FILE)\n"
    )


def test_endpoint_off_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["status", "--config", str(_config(tmp_path, None))]) == EXIT_USAGE
    assert capsys.readouterr().err.count("\n") == 1


async def test_table_and_json_from_a_running_endpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    metrics = EdgeMetrics(edge_id="edge_1", tools=())
    async with ObserveServer(
        "127.0.0.1", 0, registry=metrics.registry, readiness=metrics.readiness, status=lambda: DOC
    ) as server:
        config = str(_config(tmp_path, f"127.0.0.1:{server.port}"))
        assert await asyncio.to_thread(main, ["status", "--config", config, "-o", "json"]) == 0
        assert json.loads(capsys.readouterr().out) == DOC
        assert await asyncio.to_thread(main, ["status", "--config", config, "-o", "table"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["FIELD", "VALUE"]
    assert any(line.startswith("control plane") and "cp.example.com:7443 over grpc" in line for line in lines)

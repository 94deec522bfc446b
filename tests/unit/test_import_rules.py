"""The import rules of docs/architecture.md ("Layers and import rules"), as import-linter contracts
in pyproject.toml ([tool.importlinter]): the tree keeps them, and each contract fails on the kind of
import it forbids (checked on a copy of the packages with one such import added)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("control_plane", "edge_agent", "outpost_wire", "scripted_model")
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def lint_imports(cwd: Path, *contracts: str) -> subprocess.CompletedProcess[str]:
    args = [str(LINT_IMPORTS), "--no-cache", "--no-logo"]
    for contract in contracts:
        args += ["--contract", contract]
    # The packages are found from the working directory first (a copy's, in the tests below).
    return subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)


def test_the_tree_keeps_the_import_rules() -> None:
    result = lint_imports(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("edge_agent/dispatch.py", "import control_plane.errors", "daemons-apart"),
        ("control_plane/bus.py", "import edge_agent.errors", "daemons-apart"),
        ("outpost_wire/frames.py", "import control_plane.errors", "wire-below-daemons"),
        ("scripted_model/script.py", "import control_plane.errors", "scripted-model-apart"),
        ("scripted_model/server.py", "import edge_agent.errors", "scripted-model-apart"),
        ("control_plane/harness/model.py", "import scripted_model.wire", "scripted-model-apart"),
        ("edge_agent/daemon.py", "import scripted_model", "scripted-model-apart"),
        ("control_plane/vault/service.py", "import control_plane.api.models", "http-on-top"),
        ("control_plane/cli_sessions.py", "import control_plane.api.query", "http-on-top"),
        ("control_plane/sessions/log.py", "import fastapi", "http-frameworks-in-api"),
        ("control_plane/harness/runner.py", "import control_plane.store.sqlite", "backends-composed"),
        ("control_plane/vault/service.py", "import control_plane.store.memory", "backends-composed"),
        (
            "control_plane/retention.py",
            "from control_plane.store import open_store",
            "store-factory-composed",
        ),
        ("control_plane/store/base.py", "import control_plane.sessions.log", "control-plane-layers"),
        ("control_plane/tunnel/gateway.py", "import control_plane.harness.driver", "control-plane-layers"),
        ("control_plane/vault/keys.py", "import control_plane.vault.service", "control-plane-acyclic"),
        ("edge_agent/sandbox/manager.py", "import edge_agent.dispatch", "edge-layers"),
        ("edge_agent/sandbox/sandboxd/files.py", "from ..protocol import encode_frame", "sandboxd-alone"),
        ("edge_agent/sandbox/sandboxd/daemon.py", "import edge_agent.errors", "sandboxd-alone"),
    ],
)
def test_a_forbidden_import_breaks_its_contract(
    tmp_path: Path, module: str, line: str, contract: str
) -> None:
    for package in PACKAGES:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    with (tmp_path / module).open("a", encoding="utf-8") as f:
        f.write(f"\n{line}\n")
    result = lint_imports(tmp_path, contract)
    assert result.returncode != 0, result.stdout + result.stderr
    assert "1 broken" in result.stdout, result.stdout + result.stderr

"""What the packaging promises, checked without installing anything: the distribution's name and
license, the sample configs (comments only, valid, and true to the models' defaults), the install
scripts' shape, and no document telling anyone to install a same-named package from an index."""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from control_plane.config import ControlPlaneConfig
from edge_agent.config import EdgeConfig, load_config
from outpost_wire.cli_support import load_yaml_mapping
from outpost_wire.version import DISTRIBUTION

REPO = Path(__file__).resolve().parents[3]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
EDGE_SAMPLE = REPO / "packaging/config/edge.yaml"
CONTROL_SAMPLE = REPO / "packaging/config/control.yaml"
# "#key: value" and "#  nested: value" are settings shown with their default; "# text" is prose.
_SETTING = re.compile(r"^#(?=\S|  +\S)")


def uncommented(path: Path) -> dict[str, Any]:
    """The sample with every setting line uncommented, parsed."""
    lines = [_SETTING.sub("", line) for line in path.read_text().splitlines()]
    data = yaml.safe_load("\n".join(lines))
    assert isinstance(data, dict), f"{path}: no settings found"
    return data


def test_the_distribution_is_outpost_runtime_with_both_commands() -> None:
    project = PYPROJECT["project"]
    assert project["name"] == DISTRIBUTION == "outpost-runtime"
    assert project["scripts"] == {
        "outpost-control": "control_plane.cli:main",
        "outpost-edge": "edge_agent.cli:main",
    }
    assert set(PYPROJECT["tool"]["setuptools"]["packages"]["find"]["include"]) == {
        "control_plane*",
        "edge_agent*",
        "outpost_wire*",
        "scripted_model*",  # the offline demo's model server: python -m scripted_model.local_server
    }


def test_license_is_apache_2_0_text_and_metadata() -> None:
    assert PYPROJECT["project"]["license"] == "Apache-2.0"
    assert PYPROJECT["project"]["license-files"] == ["LICENSE"]
    text = (REPO / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and "APPENDIX" in text


@pytest.mark.parametrize("sample", [EDGE_SAMPLE, CONTROL_SAMPLE], ids=["edge", "control"])
def test_sample_is_comments_only(sample: Path) -> None:
    assert yaml.safe_load(sample.read_text()) is None
    assert load_yaml_mapping(sample) == {}


def test_edge_sample_as_shipped_is_the_defaults() -> None:
    assert load_config(EDGE_SAMPLE) == EdgeConfig()


def test_edge_sample_settings_are_real_keys_with_their_defaults() -> None:
    settings = uncommented(EDGE_SAMPLE)
    assert {"state_dir", "control_plane", "sandbox", "connection", "observability", "logging"} <= set(
        settings
    )
    # Unknown keys are refused, so every key shown exists; and each shows its default.
    assert EdgeConfig.model_validate(settings) == EdgeConfig()


def test_control_sample_settings_are_real_keys_with_their_defaults() -> None:
    settings = uncommented(CONTROL_SAMPLE)
    assert {"http_host", "http_port", "tunnel_host", "tunnel_port", "tls_hostnames", "data_dir"} <= set(
        settings
    )
    assert ControlPlaneConfig.model_validate(settings) == ControlPlaneConfig()


def test_sample_keys_are_documented() -> None:
    reference = (REPO / "docs/configuration.md").read_text()
    for sample in (EDGE_SAMPLE, CONTROL_SAMPLE):
        for key, value in uncommented(sample).items():
            names = [f"{key}.{sub}" for sub in value] if isinstance(value, dict) else [key]
            for name in names:
                assert f"`{name}`" in reference or f"/ `{name.rpartition('.')[2]}`" in reference, (
                    f"{sample.name}: {name} is not in docs/configuration.md"
                )


@pytest.mark.parametrize("script", ["install-lib.sh", "install-edge.sh", "install-control.sh"])
def test_install_scripts_parse(script: str) -> None:
    subprocess.run(["bash", "-n", str(REPO / "packaging" / script)], check=True)


@pytest.mark.parametrize("script", ["install-edge.sh", "install-control.sh"])
def test_install_scripts_share_their_code_and_help(script: str) -> None:
    path = REPO / "packaging" / script
    assert 'source "$(dirname "${BASH_SOURCE[0]}")/install-lib.sh"' in path.read_text()
    assert path.stat().st_mode & 0o111, f"{script} is not executable"
    # --help needs no root (run it as nobody when we are root); it documents both package sources.
    as_nobody = ["runuser", "-u", "nobody", "--"] if os.geteuid() == 0 else []
    out = subprocess.run(
        [*as_nobody, "bash", str(path), "--help"], capture_output=True, text=True, check=False
    )
    assert out.returncode == 0 and "--wheel PATH" in out.stdout and "--wheels DIR" in out.stdout, out
    # Anything else needs root, and says so.
    out = subprocess.run([*as_nobody, "bash", str(path)], capture_output=True, text=True, check=False)
    if as_nobody:
        assert out.returncode == 1 and out.stderr.strip() == f"{script}: run as root", out


def test_nothing_installs_a_same_named_package_from_an_index() -> None:
    """``outpost`` on PyPI is somebody else's project: no document or script may name it to pip."""
    pattern = re.compile(
        r"""pip3?\s+(?:install|wheel|download)\b[^\n#]*?(?<![\w./-])['"]?outpost(?:\[[^\]]*\])?['"]?(?=\s|$)"""
    )
    files = [REPO / "README.md", *(REPO / "docs").glob("*.md"), *(REPO / "packaging").rglob("*")]
    files += [REPO / "scripts/setup.sh"]
    for path in files:
        if path.is_file() and path.suffix in (".md", ".sh", "") and path.name != "LICENSE":
            text = path.read_text(errors="replace").replace("\\\n", " ")
            found = pattern.search(text)
            assert not found, f"{path.relative_to(REPO)}: {found[0] if found else ''}"
    assert pattern.search("RUN pip install --no-index --find-links /wheels 'outpost[edge]'")
    assert pattern.search("pip install outpost")
    assert not pattern.search("pip install 'outpost-runtime[edge]'")
    assert not pattern.search("pip wheel '.[edge]' -w DIR")

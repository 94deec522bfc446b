"""The ``git:`` section of the edge config."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from pydantic import ValidationError

import edge_agent.git
from edge_agent.config import EdgeConfig, load_config
from edge_agent.errors import ConfigError
from edge_agent.git import GitConfig


def docstring_example() -> dict[str, object]:
    doc = edge_agent.git.config.__doc__ or ""
    block = re.search(r"::\n\n(.*?)\n\n[A-Z]", doc, re.S)
    assert block is not None
    data = yaml.safe_load(block.group(1))
    assert isinstance(data, dict)
    return data


def test_the_documented_example_is_valid() -> None:
    config = EdgeConfig.model_validate(docstring_example())
    hosts = [c.host for c in config.git.credentials]
    assert hosts == ["git.internal:8443", "github.com", "gitlab.internal"]
    assert [c.scheme for c in config.git.credentials] == ["basic", "basic", "bearer"]
    assert config.git.credentials[0].username == "outpost-bot"
    assert config.git.credentials[1].username == "x-access-token"
    assert config.git.clone_timeout_s == 600


def test_defaults() -> None:
    assert EdgeConfig().git == GitConfig()
    assert GitConfig().credentials == ()


@pytest.mark.parametrize(
    "host",
    [
        "https://git.internal",
        "git.internal/org",
        "user@git.internal",
        "git.internal:0",
        "git.internal:99999",
        "",
    ],
)
def test_hosts_must_be_host_or_host_port(host: str) -> None:
    with pytest.raises(ValidationError, match="host"):
        GitConfig.model_validate({"credentials": [{"host": host, "token": {"from_env": "T"}}]})


def test_one_credential_per_host_and_unknown_keys_refused(tmp_path: Path) -> None:
    twice = {
        "credentials": [
            {"host": "a.b", "token": {"from_env": "T"}},
            {"host": "A.b", "token": {"from_env": "U"}},
        ]
    }
    with pytest.raises(ValidationError, match=r"more than one credential for a\.b"):
        GitConfig.model_validate(twice)
    path = tmp_path / "edge.yaml"
    path.write_text(
        yaml.safe_dump({"git": {"credentials": [{"host": "a.b", "token": {"from_env": "T"}, "pw": 1}]}})
    )
    with pytest.raises(ConfigError, match=r"git\.credentials\.0\.pw: unknown key"):
        load_config(path)

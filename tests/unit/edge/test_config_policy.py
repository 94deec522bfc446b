from __future__ import annotations

import random
from pathlib import Path

import pytest

from edge_agent.config import load_config
from edge_agent.connection.backoff import Backoff
from edge_agent.errors import ConfigError, PolicyDenied
from edge_agent.policy import Policy


def test_defaults_load_without_a_file() -> None:
    config = load_config(None)
    assert config.connection.backoff_initial_s == 1.0
    assert config.connection.backoff_max_s == 8.0
    assert config.load_policy() == Policy()


def test_unknown_keys_are_rejected_with_their_path(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("connection:\n  heartbeat_intervl_s: 3\nsandbox:\n  idle_pause_s: -1\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "connection.heartbeat_intervl_s: unknown key" in message
    assert "sandbox.idle_pause_s" in message


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- a list\n", "mapping at the top level"),
        ("key: [unclosed\n", "not valid YAML"),
        ("connection:\n  heartbeat_interval_s: 40\n", "heartbeat_timeout_s must be greater"),
        ("policy:\n  images:\n    default: x:1\n    allowed: [y:1]\n", "must be listed in images.allowed"),
    ],
)
def test_bad_config_messages(tmp_path: Path, text: str, needle: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=needle.replace("[", r"\[")):
        load_config(path)


def test_missing_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        load_config(tmp_path / "nope.yaml")


def test_policy_file_is_validated_at_load(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text("max_sandboxes: 0\n")
    config = tmp_path / "c.yaml"
    config.write_text(f"policy_file: {policy}\n")
    with pytest.raises(ConfigError, match="max_sandboxes"):
        load_config(config)


def test_policy_resolves_defaults_and_refuses_naming_the_rule() -> None:
    policy = Policy.model_validate(
        {
            "images": {"default": "a:1", "allowed": ["a:1", "b:2"]},
            "limits": {"max_cpus": 2, "max_pids": 100, "default_pids": 50},
        }
    )
    limits = policy.resolve()
    assert limits.image == "a:1" and limits.pids == 50
    assert policy.resolve(image="b:2", cpus=2).cpus == 2
    with pytest.raises(PolicyDenied) as info:
        policy.resolve(image="evil:latest")
    assert info.value.rule == "images.allowed"
    with pytest.raises(PolicyDenied, match=r"limits\.max_cpus"):
        policy.resolve(cpus=4)
    with pytest.raises(PolicyDenied, match=r"limits\.max_pids"):
        policy.resolve(pids=1000)


def test_policy_digest_is_stable_and_sensitive() -> None:
    assert Policy().digest() == Policy().digest()
    assert Policy().digest() != Policy(max_sandboxes=3).digest()
    assert Policy().digest().startswith("sha256:")


def test_full_jitter_backoff_grows_to_the_cap_and_resets() -> None:
    backoff = Backoff(1.0, 60.0, random.Random(7))
    ceilings = [min(60.0, 2**n) for n in range(10)]
    delays = [backoff.next_delay() for _ in range(10)]
    assert all(0 <= d <= c for d, c in zip(delays, ceilings, strict=True))
    assert max(Backoff(1.0, 60.0, random.Random(s)).next_delay() for s in range(50)) <= 1.0
    backoff.reset()
    assert backoff.attempt == 0 and backoff.next_delay() <= 1.0


def test_workspace_quota_policy() -> None:
    assert Policy().limits.max_workspace_mb == 10240  # documented default: 10 GiB
    assert Policy.model_validate({"limits": {"max_workspace_mb": 0}}).limits.max_workspace_mb == 0  # none
    with pytest.raises(ValueError, match="max_workspace_mb"):
        Policy.model_validate({"limits": {"max_workspace_mb": -1}})

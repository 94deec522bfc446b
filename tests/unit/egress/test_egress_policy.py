"""The policy's egress section, EgressSpec, and the dispatcher passing egress through."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from edge_agent.config import load_config
from edge_agent.dispatch import Dispatcher
from edge_agent.egress import EgressMode, EgressSpec
from edge_agent.errors import ConfigError, PolicyDenied
from edge_agent.journal import ResultJournal
from edge_agent.policy import Policy
from edge_agent.sandbox import SandboxLimits, ToolCall
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Egress, Execute, Failure, Provision, Provisioned, Request
from outpost_wire.results import ToolResult

POLICY = Policy.model_validate(
    {
        "egress": {
            "max_mode": "allowlist",
            "allowed_hosts": ["*.pythonhosted.org", "pypi.org", "10.0.0.5:8080"],
        }
    }
)


def test_default_is_none_and_the_default_cap_is_allowlist_with_no_hosts() -> None:
    assert Policy().resolve().egress == EgressSpec()
    assert Policy().egress.max_mode is EgressMode.ALLOWLIST
    assert Policy().resolve(egress_mode="allowlist").egress == EgressSpec(EgressMode.ALLOWLIST)
    with pytest.raises(PolicyDenied) as info:
        Policy().resolve(egress_mode="allowlist", allowed_hosts=["pypi.org"])
    assert info.value.rule == "egress.allowed_hosts" and "'pypi.org'" in info.value.message


def test_mode_above_max_mode_is_refused_naming_the_rule() -> None:
    with pytest.raises(PolicyDenied) as info:
        POLICY.resolve(egress_mode="unrestricted")
    assert info.value.rule == "egress.max_mode"
    assert "(policy rule: egress.max_mode)" in str(info.value)
    none_only = Policy.model_validate({"egress": {"max_mode": "none"}})
    with pytest.raises(PolicyDenied, match=r"egress\.max_mode"):
        none_only.resolve(egress_mode="allowlist")
    open_policy = Policy.model_validate({"egress": {"max_mode": "unrestricted"}})
    assert open_policy.resolve(egress_mode="unrestricted").egress.mode is EgressMode.UNRESTRICTED
    with pytest.raises(PolicyDenied, match=r"egress\.mode"):
        POLICY.resolve(egress_mode="wide-open")


def test_requested_hosts_must_be_covered() -> None:
    limits = POLICY.resolve(
        egress_mode="allowlist",
        allowed_hosts=["files.pythonhosted.org:443", "PyPI.org", "10.0.0.5:8080"],
    )
    assert limits.egress == EgressSpec(
        EgressMode.ALLOWLIST, ("10.0.0.5:8080", "files.pythonhosted.org:443", "pypi.org")
    )
    for host in ("evil.test", "pythonhosted.org", "10.0.0.5", "10.0.0.5:9090", "127.0.0.1"):
        with pytest.raises(PolicyDenied) as info:
            POLICY.resolve(egress_mode="allowlist", allowed_hosts=["pypi.org", host])
        assert info.value.rule == "egress.allowed_hosts"
        assert host.split(":")[0].lower() in info.value.message
    with pytest.raises(PolicyDenied, match="invalid allowlist entry"):
        POLICY.resolve(egress_mode="allowlist", allowed_hosts=["0x7f000001"])


def test_hosts_with_another_mode_are_ignored() -> None:
    assert POLICY.resolve(egress_mode="none", allowed_hosts=["evil.test"]).egress == EgressSpec()


def test_digest_is_canonical_and_sensitive() -> None:
    a = Policy.model_validate({"egress": {"allowed_hosts": ["b.test", "A.test", "a.test."]}})
    b = Policy.model_validate({"egress": {"allowed_hosts": ["a.test", "b.test"]}})
    assert a.egress.allowed_hosts == ("a.test", "b.test")
    assert a.digest() == b.digest() != Policy().digest()
    assert Policy().digest() != Policy.model_validate({"egress": {"max_mode": "none"}}).digest()
    assert Policy().model_dump(mode="json")["egress"] == {"max_mode": "allowlist", "allowed_hosts": []}


def test_policy_file_egress_section(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text('policy:\n  egress:\n    max_mode: none\n    allowed_hosts: ["*.example.com"]\n')
    assert load_config(path).load_policy().egress.max_mode is EgressMode.NONE
    path.write_text('policy:\n  egress:\n    allowed_hosts: ["exa mple.com"]\n')
    with pytest.raises(ConfigError, match=r"policy\.egress\.allowed_hosts"):
        load_config(path)
    path.write_text("policy:\n  egress:\n    max_mode: everything\n")
    with pytest.raises(ConfigError, match=r"policy\.egress\.max_mode"):
        load_config(path)
    path.write_text("policy:\n  egress:\n    allowed: []\n")
    with pytest.raises(ConfigError, match="unknown key"):
        load_config(path)


def test_egress_spec_validation_and_label_round_trip() -> None:
    spec = EgressSpec(EgressMode.ALLOWLIST, ("b.test", "a.test:80", "b.test"))
    assert spec.allowed_hosts == ("a.test:80", "b.test")
    assert EgressSpec.from_label(spec.to_label()) == spec
    assert EgressSpec.from_label(None) == EgressSpec() == EgressSpec.from_label("")
    assert EgressSpec("unrestricted").mode is EgressMode.UNRESTRICTED  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        EgressSpec(EgressMode.NONE, ("a.test",))
    with pytest.raises(ValueError):
        EgressSpec(EgressMode.ALLOWLIST, ("*",))
    for bad in ("{", "[]", '{"mode":"x","hosts":[]}', '{"mode":"allowlist"}', '{"mode":1,"hosts":[]}'):
        with pytest.raises(ValueError):
            EgressSpec.from_label(bad)
    assert EgressMode.UNRESTRICTED.exceeds(EgressMode.ALLOWLIST)
    assert not EgressMode.NONE.exceeds(EgressMode.NONE)


# --- the dispatcher -----------------------------------------------------------------------------


class FakeManager:
    def __init__(self) -> None:
        self.limits: list[SandboxLimits] = []

    async def provision(self, session_id: str, limits: SandboxLimits) -> Any:
        self.limits.append(limits)
        return type("Info", (), {"sandbox_id": "c1", "image": limits.image, "reused": False})()

    async def execute(self, call: ToolCall, limits: SandboxLimits) -> ToolResult:
        self.limits.append(limits)
        return ToolResult.text("ok")


def request(op: Any, n: int) -> Request:
    return Request(f"req_{n}", "sesn_1", f"key_{n}", 0, op)


async def test_dispatcher_resolves_provision_and_execute_egress(tmp_path: Path) -> None:
    manager = FakeManager()
    async with ResultJournal(tmp_path / "j.db", 3600) as journal:
        dispatcher = Dispatcher(manager, POLICY, journal)  # type: ignore[arg-type]
        wanted = Egress(mode="allowlist", allowed_hosts=("pypi.org",))
        outcome = await dispatcher.handle(request(Provision(egress=wanted), 1))
        assert isinstance(outcome, Provisioned)
        allowlist = EgressSpec(EgressMode.ALLOWLIST, ("pypi.org",))
        assert manager.limits[-1].egress == allowlist
        # An execute without a spec uses what the session was provisioned with ...
        await dispatcher.handle(request(Execute("bash", '{"command": "true"}'), 2))
        assert manager.limits[-1].egress == allowlist
        # ... one with a spec resolves (and remembers) that one.
        await dispatcher.handle(request(Execute("bash", '{"command": "true"}', sandbox=Provision()), 3))
        assert manager.limits[-1].egress == EgressSpec()
        await dispatcher.handle(request(Execute("bash", '{"command": "true"}'), 4))
        assert manager.limits[-1].egress == EgressSpec()
        # Refusals are failures naming the rule, for both operations.
        denied = await dispatcher.handle(request(Provision(egress=Egress(mode="unrestricted")), 5))
        assert isinstance(denied, Failure) and denied.code is ErrorCode.POLICY_DENIED
        assert "egress.max_mode" in denied.message
        bad = Provision(egress=Egress(mode="allowlist", allowed_hosts=("evil.test",)))
        denied = await dispatcher.handle(request(Execute("bash", "{}", sandbox=bad), 6))
        assert isinstance(denied, Failure) and "egress.allowed_hosts" in denied.message
        assert len(manager.limits) == 4

"""Config and policy models: validation messages, secret masking, policy refusals naming the rule."""

from __future__ import annotations

from typing import Any

import pytest
import yaml
from pydantic import TypeAdapter, ValidationError

from edge_agent.mcp import (
    McpPolicy,
    McpServerConfig,
    McpServerNotAllowed,
    McpServers,
    McpToolNotAllowed,
)

EXAMPLE = """
mcp_servers:
  - name: tickets
    stdio:
      command: /opt/tickets-mcp/bin/server
      args: [--read-only]
      env:
        TICKETS_API_KEY: {from_file: /etc/outpost-edge/secrets/tickets.key}   # mode 0600
        TICKETS_REGION: {value: eu-west-1}
    call_timeout_s: 30
  - name: wiki
    http:
      url: http://10.0.4.12:8080/mcp
      bearer_token: {from_file: /etc/outpost-edge/secrets/wiki.token}     # mode 0600
      headers:
        X-Tenant: {value: acme}
      timeout_s: 10

# policy
mcp:
  servers:
    tickets: {tools: [search_tickets, get_ticket]}
    wiki: {}                                # every tool ("*")
"""


def test_the_documented_example_validates() -> None:
    import edge_agent.mcp.config as module

    assert module.__doc__ is not None and EXAMPLE.strip() in "\n".join(
        line.removeprefix("    ") for line in module.__doc__.splitlines()
    )
    data = yaml.safe_load(EXAMPLE)
    servers = TypeAdapter(McpServers).validate_python(data["mcp_servers"])
    policy = McpPolicy.model_validate(data["mcp"])
    assert [s.name for s in servers] == ["tickets", "wiki"]
    assert policy.servers["wiki"].tools == "*"
    assert policy.servers["tickets"].allows("get_ticket") and not policy.servers["tickets"].allows("x")


def _stdio(**extra: Any) -> dict[str, Any]:
    return {"name": "tickets", "stdio": {"command": "/bin/true"}, **extra}


def _http(url: str, **http: Any) -> dict[str, Any]:
    return {"name": "wiki", "http": {"url": url, **http}}


def test_a_full_example_validates() -> None:
    config = McpServerConfig.model_validate(
        {
            "name": "tickets-2",
            "stdio": {
                "command": "/opt/server",
                "args": ["--read-only"],
                "env": {"API_KEY": {"from_file": "/etc/k"}, "REGION": {"value": "eu"}},
                "cwd": "/tmp",
            },
            "call_timeout_s": 30,
        }
    )
    assert config.transport == "stdio"
    assert config.startup_timeout_s == 20.0
    http = McpServerConfig.model_validate(
        _http("http://10.0.4.12:8080/mcp", bearer_token={"from_env": "WIKI_TOKEN"}, timeout_s=5)
    )
    assert http.transport == "http"
    assert http.call_timeout_s == 60.0


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"name": "Bad_Name", "stdio": {"command": "x"}}, "name"),
        ({"name": "x" * 49, "stdio": {"command": "x"}}, "name"),
        ({"name": "a"}, "exactly one of `stdio` or `http`"),
        (
            {"name": "a", "stdio": {"command": "x"}, "http": {"url": "http://10.0.0.1/"}},
            "exactly one of `stdio` or `http`",
        ),
        (_stdio(extra_key=1), "extra"),
        ({"name": "a", "stdio": {"command": "x", "env": {"K": {}}}}, "exactly one of value"),
        (
            {"name": "a", "stdio": {"command": "x", "env": {"K": {"value": "v", "from_env": "E"}}}},
            "exactly one of value",
        ),
        ({"name": "a", "stdio": {"command": "x", "env": {"1BAD": {"value": "v"}}}}, "environment variable"),
        (_http("ftp://10.0.0.1/"), "http:// or https://"),
        (_http("http://8.8.8.8/mcp"), "not a private-network address"),
        (_http("http://user:pw@10.0.0.1/mcp"), "must not carry credentials"),
        (_http("http://10.0.0.1/", headers={"Bad Header": {"value": "x"}}), "invalid header name"),
        (
            _http(
                "http://10.0.0.1/",
                bearer_token={"value": "t"},
                headers={"authorization": {"value": "Bearer t"}},
            ),
            "either bearer_token or an Authorization header",
        ),
        (_stdio(call_timeout_s=0), "call_timeout_s"),
    ],
)
def test_invalid_configs_are_refused(data: dict[str, Any], needle: str) -> None:
    with pytest.raises(ValidationError) as info:
        McpServerConfig.model_validate(data)
    assert needle in str(info.value)


@pytest.mark.parametrize(
    "url",
    ["http://127.0.0.1:9/mcp", "http://192.168.1.5/", "https://[fd00::1]:8443/mcp", "http://internal.corp/"],
)
def test_private_urls_and_host_names_are_accepted(url: str) -> None:
    McpServerConfig.model_validate(_http(url))


def test_public_address_needs_an_explicit_override() -> None:
    McpServerConfig.model_validate(_http("https://8.8.8.8/mcp", allow_public_address=True))


def test_inline_values_are_masked_in_repr_and_dumps() -> None:
    config = McpServerConfig.model_validate(
        {"name": "a", "stdio": {"command": "x", "env": {"K": {"value": "inline-secret-value"}}}}
    )
    assert "inline-secret-value" not in repr(config)
    assert "inline-secret-value" not in config.model_dump_json()


def test_server_names_must_be_unique() -> None:
    adapter = TypeAdapter(McpServers)
    assert len(adapter.validate_python([_stdio(), _http("http://10.0.0.1/")])) == 2
    with pytest.raises(ValidationError, match="used more than once"):
        adapter.validate_python([_stdio(), _stdio()])


def test_policy_defaults_to_nothing_allowed() -> None:
    with pytest.raises(McpServerNotAllowed) as info:
        McpPolicy().check_tool("tickets", "search")
    assert info.value.rule == "mcp.servers"
    assert "policy rule: mcp.servers" in str(info.value)


def test_policy_tools() -> None:
    policy = McpPolicy.model_validate({"servers": {"tickets": {"tools": ["search"]}, "wiki": {}}})
    policy.check_tool("tickets", "search")
    policy.check_tool("wiki", "anything")
    with pytest.raises(McpToolNotAllowed) as info:
        policy.check_tool("tickets", "delete")
    assert info.value.rule == "mcp.servers.tickets.tools"
    assert "'delete'" in str(info.value)
    with pytest.raises(ValidationError):
        McpPolicy.model_validate({"servers": {"x": {"tools": "all"}}})

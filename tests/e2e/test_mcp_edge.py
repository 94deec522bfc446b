"""Issue 4: private MCP servers fronted by the edge, reached from the control plane through the
tunnel; their credentials stay at the edge."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from control_plane.server import ControlPlane
from outpost_wire.errors import ErrorCode, RemoteError
from tests.support import eventually
from tests.support.e2e import Api, text_of

pytestmark = pytest.mark.docker

SERVER = Path(__file__).resolve().parents[1] / "support" / "mcp_servers" / "stdio_server.py"
CANARY = "canary-7f3a1c9e-do-not-leak"


def _mcp_extra(secret_file: Path) -> dict:
    return {
        "mcp_servers": [
            {
                "name": "tickets",
                "stdio": {
                    "command": sys.executable,
                    "args": [str(SERVER)],
                    "env": {
                        "WHOAMI_VAR": {"value": "TICKETS_TOKEN"},
                        "TICKETS_TOKEN": {"from_file": str(secret_file)},
                    },
                },
                "call_timeout_s": 3,
            }
        ]
    }


POLICY = {"mcp": {"servers": {"tickets": {"tools": ["add", "echo", "whoami", "crash", "hang", "fail"]}}}}


@pytest.fixture
def secret_file(tmp_path: Path) -> Path:
    path = tmp_path / "tickets.token"
    path.write_text(CANARY)
    path.chmod(0o600)
    return path


async def test_mcp_catalog_and_calls_through_the_tunnel(
    control_plane: ControlPlane, api: Api, environment: str, enroll, run_edge, secret_file: Path
) -> None:
    await run_edge(await enroll(environment, policy=POLICY, extra=_mcp_extra(secret_file)))
    gw = control_plane.gateway

    async def catalog_up() -> bool:
        return gw.mcp_catalog(environment).get("tickets", {}).get("status") == "up"

    await eventually(catalog_up, 20, "MCP catalog advertised")
    tools = {t["name"] for t in gw.mcp_catalog(environment)["tickets"]["tools"]}
    assert {"add", "echo", "whoami"} <= tools and "pid" not in tools  # pid is not in the policy

    result = await gw.mcp_call(
        "s-mcp", environment, "tickets", "add", {"a": 2, "b": 40}, idempotency_key="k-add"
    )
    assert not result.is_error and "42" in result.plain_text
    # The server got its credential from the edge's file; it reaches the model only if a tool
    # returns it (whoami is a test tool that does exactly that, to prove the file was read).
    who = await gw.mcp_call("s-mcp", environment, "tickets", "whoami", {}, idempotency_key="k-who")
    assert who.plain_text.strip() == CANARY

    failed = await gw.mcp_call("s-mcp", environment, "tickets", "fail", {}, idempotency_key="k-fail")
    assert failed.is_error

    with pytest.raises(RemoteError) as info:
        await gw.mcp_call("s-mcp", environment, "tickets", "pid", {}, idempotency_key="k-pid")
    assert info.value.code is ErrorCode.POLICY_DENIED and "mcp.servers.tickets.tools" in info.value.message

    with pytest.raises(RemoteError) as info:
        await gw.mcp_call("s-mcp", environment, "tickets", "crash", {}, idempotency_key="k-crash")
    assert info.value.code is ErrorCode.MCP_CONNECTION_FAILED

    attempts = iter(range(1000))

    async def recovered() -> bool:
        try:
            r = await gw.mcp_call(
                "s-mcp",
                environment,
                "tickets",
                "echo",
                {"text": "back"},
                idempotency_key=f"k-echo-{next(attempts)}",
            )
        except RemoteError:
            return False
        return r.plain_text.strip() == "back"

    await eventually(recovered, 30, "MCP server restarted")

    # A repeated idempotency key answers from the edge's journal.
    again = await gw.mcp_call(
        "s-mcp", environment, "tickets", "add", {"a": 0, "b": 0}, idempotency_key="k-add"
    )
    assert "42" in again.plain_text


async def test_unknown_mcp_server_is_refused_by_the_edge(
    control_plane: ControlPlane, environment: str, enroll, run_edge, secret_file: Path
) -> None:
    policy = {"mcp": {"servers": {}}}  # the edge fronts the server but its policy allows none
    await run_edge(await enroll(environment, policy=policy, extra=_mcp_extra(secret_file)))
    assert "tickets" not in control_plane.gateway.mcp_catalog(environment)


async def test_canary_credential_never_reaches_the_sandbox(
    control_plane: ControlPlane, api: Api, environment: str, enroll, run_edge, secret_file: Path
) -> None:
    edge = await run_edge(await enroll(environment, policy=POLICY, extra=_mcp_extra(secret_file)))
    await eventually(
        lambda: _async(
            control_plane.gateway.mcp_catalog(environment).get("tickets", {}).get("status") == "up"
        ),
        20,
        "MCP up",
    )
    await control_plane.gateway.mcp_call(
        "s-canary", environment, "tickets", "echo", {"text": "x"}, idempotency_key="k1"
    )
    # Code in the sandbox goes looking: environment, every process's environ and cmdline, files.
    # The pattern goes in a file (split in two here) so that no process's command line carries it.
    half = len(CANARY) // 2
    hunt = (
        f"printf %s {CANARY[:half]} > /tmp/.pat && printf %s {CANARY[half:]} >> /tmp/.pat ; "
        "env | grep -c -f /tmp/.pat ; "
        "cat /proc/*/environ /proc/*/cmdline 2>/dev/null | tr '\\0' '\\n' | grep -c -f /tmp/.pat ; "
        "grep -rIl -f /tmp/.pat / --exclude-dir=proc --exclude-dir=sys --exclude=.pat 2>/dev/null | wc -l ; "
        "find / \\( -name 'edge.key' -o -name 'identity.json' -o -name 'journal.db' -o -name '*.token' "
        "-o -name 'config.yaml' \\) -not -path '/proc/*' 2>/dev/null | wc -l ; "
        "ls /proc | grep -c '^[0-9]' ; rm -f /tmp/.pat"
    )
    out = await api.exec(environment, "s-canary", "bash", {"command": hunt})
    counts = text_of(out).split()
    assert counts[:4] == ["0", "0", "0", "0"], text_of(out)
    assert int(counts[4]) < 10  # only the sandbox's own few processes are visible
    # The edge's identity and secrets are not in the sandbox either.
    out = await api.exec(environment, "s-canary", "read", {"file_path": str(edge.identity and secret_file)})
    assert out["is_error"]
    # Nor in anything the API returns about the session or the edges.
    for path in ("/v1/edges", f"/v1/connected_edges?environment_id={environment}"):
        assert CANARY not in str(await api.get(path))
    await api.post("/v1/sandboxes/destroy", {"environment_id": environment, "session_id": "s-canary"})


async def _async(value: bool) -> bool:
    return value

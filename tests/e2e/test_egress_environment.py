"""Issue 4 end to end: an environment's networking reaches the sandbox through the edge's policy
and proxy — the control plane asks, the edge decides."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tests.support.e2e import Api, text_of

pytestmark = pytest.mark.docker

FETCH = (
    'python3 -c "import urllib.request,urllib.error,sys\n'
    "try:\n"
    "  r=urllib.request.urlopen(sys.argv[1],timeout=10); print(r.status, r.read().decode())\n"
    "except urllib.error.HTTPError as e: print(e.code, e.read().decode().strip())\n"
    "except Exception as e: print('fail', type(e).__name__)\" "
)


async def _serve(body: bytes) -> tuple[asyncio.Server, int]:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
        )
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.fixture
async def servers() -> AsyncIterator[tuple[int, int]]:
    allowed, allowed_port = await _serve(b"allowed-ok")
    forbidden, forbidden_port = await _serve(b"forbidden-reached")
    try:
        yield allowed_port, forbidden_port
    finally:
        allowed.close()
        forbidden.close()


async def test_limited_networking_is_enforced_by_the_edge(
    api: Api, enroll, run_edge, servers: tuple[int, int]
) -> None:
    allowed_port, forbidden_port = servers
    allowed = f"127.0.0.1:{allowed_port}"
    env = await api.post(
        "/v1/environments",
        {
            "name": "egress",
            "config": {"type": "self_hosted", "networking": {"type": "limited", "allowed_hosts": [allowed]}},
        },
    )
    # The edge's own policy caps what any environment may ask for.
    await run_edge(
        await enroll(env["id"], policy={"egress": {"max_mode": "allowlist", "allowed_hosts": [allowed]}})
    )
    ok = await api.exec(env["id"], "s-egress", "bash", {"command": FETCH + f"http://{allowed}/"})
    assert text_of(ok).strip() == "200 allowed-ok", text_of(ok)
    refused = await api.exec(
        env["id"], "s-egress", "bash", {"command": FETCH + f"http://127.0.0.1:{forbidden_port}/"}
    )
    assert text_of(refused).startswith("403") and "egress.allowlist" in text_of(refused), text_of(refused)
    # Without the proxy there is no way out at all.
    direct = await api.exec(
        env["id"],
        "s-egress",
        "bash",
        {"command": f"env -u HTTP_PROXY -u http_proxy {FETCH} http://{allowed}/"},
    )
    assert text_of(direct).startswith("fail"), text_of(direct)
    await api.post("/v1/sandboxes/destroy", {"environment_id": env["id"], "session_id": "s-egress"})


async def test_environment_asking_beyond_the_edge_policy_is_refused_naming_the_rule(
    api: Api, enroll, run_edge
) -> None:
    env = await api.post(
        "/v1/environments",
        {"name": "open", "config": {"type": "self_hosted", "networking": {"type": "unrestricted"}}},
    )
    await run_edge(await enroll(env["id"]))  # default policy: at most allowlist
    out = await api.exec(env["id"], "s-open", "bash", {"command": "true"}, expect=403)
    assert "egress.max_mode" in out["error"]["message"]

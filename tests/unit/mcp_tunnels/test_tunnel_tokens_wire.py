"""MCP tunnel tokens on the wire and at both ends: the Hello carries them (an old edge's Hello,
without the field, decodes with none), the control plane keeps only their hashes and serves a
tunnel by its grants (a rotated token: connections made before the rotation only), and the edge
reads them from 0600 files."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from control_plane.mcp_tunnels import token_hash
from control_plane.store.base import EdgeRecord
from control_plane.tunnel.connection import EdgeConnection
from edge_agent.errors import ConfigError
from edge_agent.mcp.secrets import read_tunnel_tokens
from outpost_wire._proto import tunnel_pb2 as pb
from outpost_wire.codec import decode_frame, encode_frame
from outpost_wire.errors import ErrorCode
from outpost_wire.frames import Hello
from outpost_wire.session import SessionConfig

MAX = 1024 * 1024


def hello(tokens: tuple[str, ...] = ()) -> Hello:
    return Hello("edge_1", "1.0", 1, ("mcp",), "sha256:x", 4, 0, "env_1", tunnel_tokens=tokens)


def test_the_hello_carries_the_tokens_and_never_shows_them() -> None:
    frame = hello(("otun_secret_a", "otun_secret_b"))
    assert decode_frame(encode_frame(frame, MAX), MAX) == frame
    assert "otun_secret" not in repr(frame)


def test_an_old_edges_hello_decodes_with_no_tokens() -> None:
    old = pb.Frame(hello=pb.Hello(edge_id="edge_1", software_version="0.9", protocol_version=1))
    decoded = decode_frame(old.SerializeToString(), MAX)
    assert isinstance(decoded, Hello) and decoded.tunnel_tokens == ()


class Listener:
    def on_ready(self, conn: EdgeConnection) -> None: ...

    def expects_result(self, conn: EdgeConnection, request_id: str) -> bool:
        return False

    def on_result(self, conn: EdgeConnection, request_id: str, outcome: object) -> None: ...

    def on_closed(self, conn: EdgeConnection) -> None: ...


async def connected(tokens: tuple[str, ...]) -> EdgeConnection:
    now = datetime.now(UTC)
    record = EdgeRecord("edge_1", "env_1", "e", "01", "ff", now, now + timedelta(days=1))
    conn = EdgeConnection(
        record,
        listener=Listener(),
        session_config=SessionConfig(),
        control_plane_id="cp",
        software_version="1",
    )
    conn.receive(encode_frame(hello(tokens), MAX))  # as the transport hands it in
    await asyncio.sleep(0)
    return conn


async def test_the_control_plane_keeps_hashes_and_serves_by_grants() -> None:
    conn = await connected(("otun_current", "otun_old"))
    assert conn.hello is not None and conn.hello.tunnel_tokens == ()  # the tokens are not kept
    assert conn.tunnel_token_hashes == {token_hash("otun_current"), token_hash("otun_old")}
    later, earlier = conn.connected_at + timedelta(seconds=5), conn.connected_at - timedelta(seconds=5)
    assert conn.serves_tunnel({token_hash("otun_current"): None})
    assert conn.serves_tunnel({token_hash("otun_old"): later})  # retired after it connected: kept
    assert not conn.serves_tunnel({token_hash("otun_old"): earlier})  # retired before: refused
    assert not conn.serves_tunnel({token_hash("otun_other"): None})
    assert not conn.serves_tunnel({})
    conn.close(ErrorCode.UNAVAILABLE, "done")


def secret(path: Path, text: str, mode: int = 0o600) -> Path:
    path.write_text(text)
    path.chmod(mode)
    return path


def test_the_edge_reads_tokens_from_owner_only_files(tmp_path: Path) -> None:
    a = secret(tmp_path / "a.token", "otun_a\n")
    b = secret(tmp_path / "b.token", "otun_b")
    assert read_tunnel_tokens([a, b, a]) == ("otun_a", "otun_b")  # duplicates once
    assert read_tunnel_tokens([]) == ()
    bad = {
        "open to others": (secret(tmp_path / "open.token", "otun_x", 0o644), "chmod 600"),
        "empty": (secret(tmp_path / "empty.token", "\n"), "one tunnel token on one line"),
        "two lines": (secret(tmp_path / "two.token", "otun_x\notun_y\n"), "one tunnel token on one line"),
        "missing": (tmp_path / "nope.token", "cannot open"),
    }
    for what, (path, message) in bad.items():
        with pytest.raises(ConfigError, match=message) as caught:
            read_tunnel_tokens([path])
        assert "otun_x" not in str(caught.value), what
        assert "tunnel_token_files[0]" in str(caught.value)

"""Limits of the HTTP port on a real control plane (loopback, port 0): open event streams per API
key and in all, ``http_limit_concurrency`` and the header-read deadline."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest

from control_plane.api.auth import create_api_key
from control_plane.server import ControlPlane
from tests.support.edge_link import api_client, running_control_plane


async def _session(api: httpx.AsyncClient) -> str:
    r = await api.post("/v1/environments", json={"name": "limits", "config": {"type": "self_hosted"}})
    assert r.status_code == 200, r.text
    environment = r.json()["id"]
    r = await api.post("/v1/agents", json={"name": "limits", "model": "claude-sonnet-5-5"})
    assert r.status_code == 200, r.text
    r = await api.post("/v1/sessions", json={"agent": r.json()["id"], "environment_id": environment})
    assert r.status_code == 200, r.text
    return str(r.json()["id"])


@contextlib.asynccontextmanager
async def _open_stream(api: httpx.AsyncClient, session_id: str) -> AsyncIterator[httpx.Response]:
    async with api.stream("GET", f"/v1/sessions/{session_id}/events/stream") as response:
        if response.status_code != 200:
            await response.aread()
        yield response


async def _raw(cp: ControlPlane) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    url = httpx.URL(cp.http_url)
    assert url.host == "127.0.0.1" and url.port is not None
    return await asyncio.open_connection(url.host, url.port)


async def test_streams_past_the_per_key_cap_get_429_and_past_the_total_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with (
        running_control_plane(tmp_path, monkeypatch, stream_max_per_key=3, stream_max_total=4) as cp,
        api_client(cp) as api,
        contextlib.AsyncExitStack() as streams,
    ):
        session_id = await _session(api)
        for _ in range(3):
            opened = await streams.enter_async_context(_open_stream(api, session_id))
            assert opened.status_code == 200
        async with _open_stream(api, session_id) as refused:
            assert refused.status_code == 429
            error = refused.json()["error"]
            assert error["type"] == "rate_limit_error"
            assert "too many open event streams for this API key" in error["message"]
        # Other requests of the same key still answer.
        r = await api.get(f"/v1/sessions/{session_id}")
        assert r.status_code == 200

        assert cp.store is not None
        other_key, _ = await create_api_key(cp.store, "other", datetime.now(UTC))
        headers = {"authorization": f"Bearer {other_key}"}
        async with httpx.AsyncClient(base_url=cp.http_url, headers=headers, timeout=30) as other:
            opened = await streams.enter_async_context(_open_stream(other, session_id))
            assert opened.status_code == 200  # another key has its own share...
            async with _open_stream(other, session_id) as full:
                assert full.status_code == 503  # ... of the process's total
                assert "stream_max_total" in full.json()["error"]["message"]

        await streams.aclose()  # closing streams frees their slots

        async def reopened() -> bool:
            async with _open_stream(api, session_id) as again:
                return again.status_code == 200

        deadline = time.monotonic() + 15
        while not await reopened():
            assert time.monotonic() < deadline, "slots were not freed when the streams closed"
            await asyncio.sleep(0.05)


async def test_connections_past_the_concurrency_limit_get_503(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with running_control_plane(tmp_path, monkeypatch, http_limit_concurrency=5) as cp:
        held = [await _raw(cp) for _ in range(8)]  # a burst of idle connections
        try:
            async with httpx.AsyncClient(base_url=cp.http_url, timeout=30) as client:
                statuses = [(await client.get("/healthz")).status_code for _ in range(3)]
            assert statuses == [503, 503, 503]
        finally:
            for _, writer in held:
                writer.close()
            for _, writer in held:
                with contextlib.suppress(ConnectionError):
                    await writer.wait_closed()

        async def answers() -> int:
            async with httpx.AsyncClient(base_url=cp.http_url, timeout=30) as client:
                return (await client.get("/healthz")).status_code

        deadline = time.monotonic() + 15
        while await answers() != 200:  # the server notices the closed connections
            assert time.monotonic() < deadline
            await asyncio.sleep(0.05)


async def _closed_by_server(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, trickle: bytes
) -> bytes:
    """Send ``trickle`` a byte every 0.2 s (never finishing the head) until the server closes the
    connection; return what it sent. Gives up after 30 s."""
    received = b""
    deadline = time.monotonic() + 30
    for byte in trickle * 1000:
        assert time.monotonic() < deadline, "the server kept a slow request head open"
        with contextlib.suppress(ConnectionError):
            writer.write(bytes([byte]))
            await writer.drain()
        with contextlib.suppress(TimeoutError):
            chunk = await asyncio.wait_for(reader.read(4096), 0.2)
            received += chunk
            if not chunk:
                return received
    raise AssertionError("unreachable")


async def test_a_slow_request_head_is_cut_after_the_header_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A 1 s header deadline (default 10 s) keeps the test short; the default is used everywhere else.
    async with running_control_plane(tmp_path, monkeypatch, http_header_timeout_s=1.0) as cp:
        reader, writer = await _raw(cp)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n")
        await writer.drain()
        assert await _closed_by_server(reader, writer, b"X-Slow: y") == b""
        writer.close()

        # A kept-alive connection: the first request answers; a slow second head is cut as well.
        reader, writer = await _raw(cp)
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
        await writer.drain()
        head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30)
        assert head.startswith(b"HTTP/1.1 200")
        await asyncio.wait_for(reader.readexactly(_content_length(head)), 30)
        writer.write(b"GET /healthz HTTP/1.1\r\n")
        await writer.drain()
        assert await _closed_by_server(reader, writer, b"X-Slow: y") == b""
        writer.close()

        # A whole head sent at once is served as usual.
        async with httpx.AsyncClient(base_url=cp.http_url, timeout=30) as client:
            assert (await client.get("/healthz")).status_code == 200


def _content_length(head: bytes) -> int:
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    raise AssertionError(f"no content-length in {head!r}")

"""``/v1/files`` through the official SDK (``client.beta.files``), every reply parsed strictly:
upload (multipart), list (pages, ``ids``), metadata, content, delete; the size cap, expiry, and
who may upload."""

from __future__ import annotations

import asyncio
import hashlib
import random
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path

import anthropic
import httpx
import pytest

from control_plane.access_keys import KeyScope, create_api_key
from tests.support.api_app import Api, assert_complete, utcnow
from tests.support.api_server import DEFAULT_CONFIG, serve_api

SMALL_CAP = 64 * 1024


def stored_blobs(tmp_path: Path) -> list[Path]:
    """Every file under the blob store's directory (temporary ones included)."""
    root = tmp_path / "blobs"
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


async def test_binary_round_trip(api: Api, tmp_path: Path) -> None:
    data = random.Random(14).randbytes(300_000) + bytes(range(256))
    meta = await api.client.beta.files.upload(file=("data.bin", data, "application/x-outpost-test"))
    assert_complete(meta)
    assert meta.id.startswith("file_") and meta.type == "file"
    assert (meta.filename, meta.size_bytes) == ("data.bin", len(data))
    assert meta.mime_type == "application/x-outpost-test"
    assert meta.downloadable is True and meta.expires_at is None and meta.scope is None

    again = await api.client.beta.files.retrieve_metadata(meta.id)
    assert_complete(again)
    assert again == meta

    response = await api.client.beta.files.download(meta.id)
    content = await response.read()
    assert content == data
    assert hashlib.sha256(content).hexdigest() == hashlib.sha256(data).hexdigest()
    assert response.http_response.headers["content-type"] == "application/x-outpost-test"
    assert response.http_response.headers["content-length"] == str(len(data))
    assert "attachment" in response.http_response.headers["content-disposition"]
    assert len(stored_blobs(tmp_path)) == 1


async def test_content_type_and_name_kept_sanitized(api: Api) -> None:
    files = api.client.beta.files
    text = await files.upload(file=("../../etc/notes.txt", b"hello", "text/plain; charset=utf-8"))
    assert (text.filename, text.mime_type) == ("notes.txt", "text/plain")
    response = await files.download(text.id)
    assert response.http_response.headers["content-type"] == "text/plain"  # no charset added
    assert await response.read() == b"hello"
    guessed = await files.upload(file=("report.pdf", b"%PDF-1.7", "application/octet-stream"))
    assert guessed.mime_type == "application/pdf"  # octet-stream says nothing: the name does
    bogus = await files.upload(file=("blob", b"x", "not a type"))
    assert bogus.mime_type == "application/octet-stream"
    nameless = await files.upload(file=("", b"{}", "application/json"))
    assert nameless.filename == "unnamed.json"


async def test_list_pages_newest_first_and_by_ids(api: Api) -> None:
    files = api.client.beta.files
    ids = [(await files.upload(file=(f"f{i}.txt", f"file {i}".encode(), "text/plain"))).id for i in range(5)]
    first = await files.list(limit=2)
    assert len(first.data) == 2 and first.next_page is not None and first.next_page.startswith("page_")
    for item in first.data:
        assert_complete(item)
    seen = [item.id async for item in await files.list(limit=2)]  # the SDK follows next_page
    assert seen == list(reversed(ids))
    chosen = await files.list(ids=[ids[0], ids[3], "file_000000000000000000000000"])
    assert [f.id for f in chosen.data] == [ids[3], ids[0]] and chosen.next_page is None
    with pytest.raises(anthropic.BadRequestError):
        await files.list(ids=[ids[0]], limit=2)
    with pytest.raises(anthropic.BadRequestError):
        await files.list(limit=1001)


async def test_delete_then_404(api: Api, tmp_path: Path) -> None:
    files = api.client.beta.files
    meta = await files.upload(file=("gone.bin", b"\x00\x01", "application/octet-stream"))
    deleted = await files.delete(meta.id)
    assert_complete(deleted)
    assert (deleted.id, deleted.type) == (meta.id, "file_deleted")
    for call in (files.retrieve_metadata, files.download, files.delete):
        with pytest.raises(anthropic.NotFoundError):
            await call(meta.id)
    assert (await files.list()).data == []
    assert stored_blobs(tmp_path) == []


async def test_unknown_id_404(api: Api) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        await api.client.beta.files.retrieve_metadata("file_unknown")
    assert caught.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    with pytest.raises(anthropic.NotFoundError):
        await api.client.beta.files.download("file_unknown")


@pytest.fixture
async def small_cap(tmp_path: Path) -> AsyncIterator[Api]:
    # A 64 KiB cap instead of the default 500 MiB (tests/unit/test_config_docs.py and the config
    # test pin that): the refusal path is the same, without moving half a gigabyte in a test.
    async with serve_api(tmp_path, replace(DEFAULT_CONFIG, max_file_bytes=SMALL_CAP)) as served:
        yield served


async def test_file_over_cap_is_413_and_nothing_stored(small_cap: Api, tmp_path: Path) -> None:
    files = small_cap.client.beta.files
    exact = await files.upload(file=("cap.bin", b"a" * SMALL_CAP, "application/octet-stream"))
    assert exact.size_bytes == SMALL_CAP
    await files.delete(exact.id)
    for size in (SMALL_CAP + 1, 4 * SMALL_CAP):  # past the cap, then past the body limit too
        with pytest.raises(anthropic.APIStatusError) as caught:
            await files.upload(file=("big.bin", b"b" * size, "application/octet-stream"))
        assert caught.value.status_code == 413
        assert caught.value.body["error"]["type"] == "request_too_large"  # type: ignore[index]
    assert (await files.list()).data == []
    assert stored_blobs(tmp_path) == []


async def test_chunked_upload_over_cap_stops_early(small_cap: Api, tmp_path: Path) -> None:
    """No Content-Length: the bytes are counted as they stream in and refused past the cap."""

    async def body() -> AsyncIterator[bytes]:
        yield b'--B\r\nContent-Disposition: form-data; name="file"; filename="x.bin"\r\n\r\n'
        for _ in range(64):  # 64 x 16 KiB = 16 x the cap
            yield b"c" * (16 * 1024)
        yield b"\r\n--B--\r\n"

    headers = {"content-type": "multipart/form-data; boundary=B"}
    response = await small_cap.http.post("/v1/files", content=body(), headers=headers)
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "request_too_large"
    assert stored_blobs(tmp_path) == []


async def post_head_only(url: str, headers: dict[str, str]) -> bytes:
    """Send the head of ``POST /v1/files`` and not one byte of its declared body; return the
    status line the server answers with (it can only answer from the head)."""
    parsed = httpx.URL(url)
    reader, writer = await asyncio.open_connection(parsed.host, parsed.port)
    try:
        lines = ["POST /v1/files HTTP/1.1", f"host: {parsed.host}"]
        lines += [f"{name}: {value}" for name, value in headers.items()]
        writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), timeout=20)
    finally:
        writer.close()


async def test_upload_refused_before_the_body_is_read(small_cap: Api, tmp_path: Path) -> None:
    """No key: 401 from the head alone, although the declared body is past every limit (a 413
    would mean the limit was looked at first); a read_only key: 403 the same way."""
    huge = {"content-type": "multipart/form-data; boundary=B", "content-length": str(10 * SMALL_CAP)}
    assert (await post_head_only(small_cap.url, huge)).startswith(b"HTTP/1.1 401 ")
    reader, _ = await create_api_key(small_cap.store, "reader", utcnow(), scope=KeyScope.READ_ONLY)
    with_key = {**huge, "x-api-key": reader}
    assert (await post_head_only(small_cap.url, with_key)).startswith(b"HTTP/1.1 403 ")
    assert stored_blobs(tmp_path) == []


async def test_scoped_and_read_only_keys_read_but_do_not_write(api: Api) -> None:
    """Files belong to no environment (as agents): any key reads, writes need an unscoped one.
    (A read_only key's upload is refused by the gate from the head; it drops a little of the body
    first, so that the SDK, still sending it, reads the 403 and not a reset connection.)"""
    meta = await api.client.beta.files.upload(file=("shared.txt", b"shared", "text/plain"))
    env = await api.environment()
    scoped, _ = await create_api_key(
        api.store, "scoped", utcnow(), scope=KeyScope.READ_WRITE, environment_ids=(env,)
    )
    reader, _ = await create_api_key(api.store, "reader", utcnow(), scope=KeyScope.READ_ONLY)
    for key in (scoped, reader):
        async with anthropic.AsyncAnthropic(base_url=api.url, api_key=key, max_retries=0) as client:
            assert (await client.beta.files.retrieve_metadata(meta.id)).id == meta.id
            assert await (await client.beta.files.download(meta.id)).read() == b"shared"
            with pytest.raises(anthropic.PermissionDeniedError):
                await client.beta.files.upload(file=("mine.txt", b"x" * 200_000, "text/plain"))
            with pytest.raises(anthropic.PermissionDeniedError):
                await client.beta.files.delete(meta.id)


async def test_bad_uploads_are_400_and_store_nothing(api: Api, tmp_path: Path) -> None:
    files = api.client.beta.files
    for seconds in (60, 91 * 86_400):
        with pytest.raises(anthropic.BadRequestError) as caught:
            await files.upload(file=("e.txt", b"e", "text/plain"), expires_in_seconds=seconds)
        assert "expires_in_seconds" in str(caught.value)
    response = await api.http.post("/v1/files", data={"expires_in_seconds": "3600"})
    assert response.status_code == 400  # not multipart
    response = await api.http.post("/v1/files", files={"other": ("a.txt", b"a")})
    assert response.status_code == 400  # a field this route does not know
    two = [("file", ("a.txt", b"a")), ("file", ("b.txt", b"b"))]
    assert (await api.http.post("/v1/files", files=two)).status_code == 400
    assert (await files.list()).data == []
    assert stored_blobs(tmp_path) == []


async def test_expired_files_disappear(tmp_path: Path) -> None:
    now = [utcnow()]

    def clock() -> datetime:  # a millisecond per reading: uploads have distinct times, in order
        now[0] += timedelta(milliseconds=1)
        return now[0]

    async with serve_api(tmp_path, clock=clock) as api:
        files = api.client.beta.files
        lasting = await files.upload(file=("keep.txt", b"keep", "text/plain"))
        brief = await files.upload(file=("brief.txt", b"brief", "text/plain"), expires_in_seconds=3600)
        assert_complete(brief)
        assert brief.expires_at is not None and brief.expires_at - brief.created_at == timedelta(hours=1)
        assert [f.id for f in (await files.list()).data] == [brief.id, lasting.id]
        now[0] += timedelta(seconds=3601)
        assert [f.id for f in (await files.list(limit=1)).data] == [lasting.id]  # skipped, page filled
        with pytest.raises(anthropic.NotFoundError):
            await files.download(brief.id)
        with pytest.raises(anthropic.NotFoundError):
            await files.retrieve_metadata(brief.id)
        assert len(stored_blobs(tmp_path)) == 1  # the expired file's bytes are deleted too

"""The file service on the in-memory store and a blob directory, without HTTP: the size cap,
names and types kept, expiry (lazy and swept), listing past expired files, a failed upload
leaving nothing. The SDK tests drive the same service through the API."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from control_plane.blobs import FilesystemBlobStore
from control_plane.errors import ContentTooLarge, InvalidRequest, NotFound
from control_plane.files import FileQuery, FileService, UploadFields
from control_plane.retention import Pruner, RetentionConfig
from control_plane.store import MemoryStore

T0 = datetime(2026, 5, 1, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(milliseconds=1)  # every write its own time
        return self.now


@dataclass
class FakeUpload:
    data: bytes
    sent: UploadFields = field(default_factory=UploadFields)

    async def content(self) -> AsyncIterator[bytes]:
        for start in range(0, len(self.data), 1000):
            yield self.data[start : start + 1000]

    def fields(self) -> UploadFields:
        return self.sent


def blobs_on_disk(root: Path) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file()] if root.exists() else []


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def service(tmp_path: Path, clock: Clock) -> FileService:
    return FileService(MemoryStore(), FilesystemBlobStore(tmp_path), clock, max_file_bytes=10_000)


async def read(service: FileService, file_id: str) -> bytes:
    _, chunks = await service.content(file_id)
    return b"".join([c async for c in chunks])


async def test_upload_keeps_bytes_and_metadata(service: FileService) -> None:
    res = await service.upload(FakeUpload(b"abc" * 100, UploadFields("a/b\\c.csv", "Text/CSV; x=1")))
    assert res.id.startswith("file_")
    body = res.body
    assert (body["filename"], body["mime_type"], body["size_bytes"]) == ("c.csv", "text/csv", 300)
    assert body["expires_at"] is None and body["scope_id"] is None and body["downloadable"] is True
    assert await read(service, res.id) == b"abc" * 100


@pytest.mark.parametrize(
    ("sent", "kept"),
    [
        (UploadFields(None, None), ("unnamed.bin", "application/octet-stream")),
        (UploadFields("..", "image/png"), ("unnamed.png", "image/png")),
        (UploadFields("x.json", None), ("x.json", "application/json")),
        (UploadFields("x.tar.gz", None), ("x.tar.gz", "application/octet-stream")),
        (UploadFields("a\x00b\u202e.txt", "text/plain"), ("ab.txt", "text/plain")),
        (UploadFields("n" * 300, "<script>"), ("n" * 255, "application/octet-stream")),
    ],
)
async def test_names_and_types_are_cleaned(
    service: FileService, sent: UploadFields, kept: tuple[str, str]
) -> None:
    res = await service.upload(FakeUpload(b"x", sent))
    assert (res.body["filename"], res.body["mime_type"]) == kept


async def test_too_large_or_invalid_leaves_nothing(service: FileService, tmp_path: Path) -> None:
    with pytest.raises(ContentTooLarge) as caught:
        await service.upload(FakeUpload(b"x" * 10_001))
    assert caught.value.limit == 10_000 and "file" in str(caught.value)
    with pytest.raises(InvalidRequest) as invalid:
        await service.upload(FakeUpload(b"x", UploadFields(expires_in_seconds=3599)))
    assert invalid.value.param == "expires_in_seconds"
    assert (await service.list_files(FileQuery())).items == []
    assert blobs_on_disk(tmp_path) == []


async def test_expired_files_are_gone_lazily_and_swept(
    service: FileService, clock: Clock, tmp_path: Path
) -> None:
    keep = await service.upload(FakeUpload(b"keep"))
    brief = [await service.upload(FakeUpload(b"b", UploadFields(expires_in_seconds=3600))) for _ in range(3)]
    assert brief[0].body["expires_at"] == "2026-05-01T01:00:00.002000Z"
    clock.now += timedelta(hours=1)
    with pytest.raises(NotFound):
        await service.get(brief[0].id)  # deleted on the way
    page = await service.list_files(FileQuery(limit=1))
    assert [r.id for r in page.items] == [keep.id]  # expired ones skipped, the page still filled
    assert len(blobs_on_disk(tmp_path)) == 1

    # the pruner's sweep finds expired files nobody read
    late = await service.upload(FakeUpload(b"l", UploadFields(expires_in_seconds=3600)))
    clock.now += timedelta(hours=2)
    pruner = Pruner(MemoryStore(), RetentionConfig(enrollment_tokens_days=None), files=service)
    assert pruner.enabled
    assert (await pruner.run_once()).files == 1
    with pytest.raises(NotFound):
        await service.get(late.id)
    assert len(blobs_on_disk(tmp_path)) == 1


async def test_list_by_ids_and_scope(service: FileService) -> None:
    made = [await service.upload(FakeUpload(b"x")) for _ in range(3)]
    page = await service.list_files(FileQuery(ids=[made[0].id, made[2].id, made[0].id, "file_nope"]))
    assert [r.id for r in page.items] == [made[2].id, made[0].id] and page.next_cursor is None
    with pytest.raises(InvalidRequest):
        await service.list_files(FileQuery(ids=[made[0].id], limit=5))
    with pytest.raises(InvalidRequest):
        await service.list_files(FileQuery(ids=[f"file_{i}" for i in range(101)]))
    assert (await service.list_files(FileQuery(scope_id="sesn_1"))).items == []


async def test_delete_removes_metadata_then_bytes(service: FileService, tmp_path: Path) -> None:
    res = await service.upload(FakeUpload(b"x"))
    await service.delete(res.id)
    with pytest.raises(NotFound):
        await service.delete(res.id)
    with pytest.raises(NotFound):
        await service.content(res.id)
    assert blobs_on_disk(tmp_path) == []


def test_the_default_cap_is_the_hosted_apis() -> None:
    """500 MiB per file unless configured; the API and the body limit take it from the config."""
    from control_plane.api.app import ApiConfig
    from control_plane.api.multipart import MULTIPART_OVERHEAD_BYTES
    from control_plane.config import ControlPlaneConfig

    assert ControlPlaneConfig().max_file_bytes == ApiConfig().max_file_bytes == 500 * 1024 * 1024
    assert ControlPlaneConfig(max_file_bytes=2048).max_file_bytes == 2048
    with pytest.raises(ValueError):
        ControlPlaneConfig(max_file_bytes=10)
    assert MULTIPART_OVERHEAD_BYTES < 1024 * 1024  # the body limit allows little beyond the file

"""An upload read from a ``multipart/form-data`` request body as it streams in, never whole.

:class:`MultipartUpload` is the API's :class:`~control_plane.files.commands.Upload`: its
``content()`` drives python-multipart's push parser over the request's body chunks and yields the
file part's bytes as they arrive (the service streams them into the blob store, which counts them
against the size cap and stops reading the moment it is passed); the small text fields (e.g.
``expires_in_seconds``) are kept, before or after the file part. Starlette's own form parser is
not used: it spools files to the system's temporary directory with no size cap of its own.

Refused with a 400 (``InvalidRequest``), before or while the bytes are stored (the store then
keeps nothing): a body that is not multipart, a second file, a field this route does not know, a
field value or a part's headers past their small caps, a body that ends before its closing
boundary, no file at all. The body-size middleware allows the file cap plus
:data:`MULTIPART_OVERHEAD_BYTES` for the parts' headers and fields.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Collection, Iterator
from contextlib import contextmanager

from python_multipart.exceptions import FormParserError
from python_multipart.multipart import MultipartParser, parse_options_header
from starlette.requests import ClientDisconnect, Request

from control_plane.errors import InvalidRequest
from control_plane.files import UploadFields

__all__ = [
    "MULTIPART_OVERHEAD_BYTES",
    "MultipartUpload",
    "PartHeaders",
    "decode_text",
    "multipart_boundary",
    "parse_errors",
]

#: What a multipart body may carry beyond the file's bytes (boundaries, parts' headers, fields).
MULTIPART_OVERHEAD_BYTES = 64 * 1024
_MAX_PARTS = 8
_MAX_HEADER_BYTES = 4096  # one part's headers together
_MAX_FIELD_BYTES = 256  # one text field's value


def multipart_boundary(request: Request) -> bytes:
    """The body's boundary; 400 unless the body is ``multipart/form-data`` with one."""
    kind, options = parse_options_header(request.headers.get("content-type"))
    if kind != b"multipart/form-data" or not options.get(b"boundary"):
        raise InvalidRequest("the body must be multipart/form-data (with a boundary)")
    return bytes(options[b"boundary"])


@contextmanager
def parse_errors() -> Iterator[None]:
    """A malformed body or a client gone mid-body, while python-multipart parses it: a 400."""
    try:
        yield
    except FormParserError:
        raise InvalidRequest("the multipart body is malformed") from None
    except ClientDisconnect:
        raise InvalidRequest("the client went away before the body ended") from None


def decode_text(raw: bytes) -> str:
    """A part's field name, file name or value: UTF-8, else Latin-1 (never an error)."""
    try:
        return raw.decode()
    except UnicodeDecodeError:
        return raw.decode("latin-1")


class PartHeaders:
    """One part's headers as the parser's callbacks deliver them, capped at ``max_bytes``."""

    def __init__(self, max_bytes: int = _MAX_HEADER_BYTES) -> None:
        self.headers: dict[bytes, bytes] = {}
        self._max_bytes = max_bytes
        self._size = 0
        self._name = b""
        self._value = b""

    def _grow(self, size: int) -> None:
        self._size += size
        if self._size > self._max_bytes:
            raise InvalidRequest(f"a part's headers are longer than {self._max_bytes} bytes")

    def on_field(self, data: bytes, start: int, end: int) -> None:
        self._grow(end - start)
        self._name += data[start:end]

    def on_value(self, data: bytes, start: int, end: int) -> None:
        self._grow(end - start)
        self._value += data[start:end]

    def on_end(self) -> None:
        self.headers[self._name.strip().lower()] = self._value.strip()
        self._name = self._value = b""

    def disposition(self) -> tuple[str, str | None]:
        """The part's form field name and its file name (``None``: not a file)."""
        _, options = parse_options_header(self.headers.get(b"content-disposition"))
        filename = options.get(b"filename")
        return decode_text(options.get(b"name", b"")), None if filename is None else decode_text(filename)


class _Part:
    def __init__(self) -> None:
        self.headers = PartHeaders()
        self.name = ""
        self.is_file = False
        self.value = bytearray()


class MultipartUpload:
    """One file (the part named ``file_field``) and the text fields named in ``fields``."""

    def __init__(
        self,
        request: Request,
        *,
        file_field: str = "file",
        fields: Collection[str] = ("expires_in_seconds",),
    ) -> None:
        self._boundary = multipart_boundary(request)
        self._request = request
        self._file_field = file_field
        self._allowed = frozenset(fields)
        self._part = _Part()
        self._parts = 0
        self._file: _Part | None = None
        self._values: dict[str, str] = {}
        self._pending: list[bytes] = []
        self._ended = False

    # -- the Upload protocol ------------------------------------------------------------------
    async def content(self) -> AsyncIterator[bytes]:
        parser = MultipartParser(
            self._boundary,
            {
                "on_part_begin": self._on_part_begin,
                "on_header_field": self._on_header_field,
                "on_header_value": self._on_header_value,
                "on_header_end": self._on_header_end,
                "on_headers_finished": self._on_headers_finished,
                "on_part_data": self._on_part_data,
                "on_part_end": self._on_part_end,
                "on_end": self._on_end,
            },
        )
        with parse_errors():
            async for chunk in self._request.stream():
                parser.write(chunk)
                pending, self._pending = self._pending, []
                for data in pending:
                    yield data
            parser.finalize()
        if not self._ended:
            raise InvalidRequest("the multipart body ends before its closing boundary")
        if self._file is None:
            raise InvalidRequest(f"{self._file_field}: a file is required", param=self._file_field)

    def fields(self) -> UploadFields:
        file = self._file
        assert file is not None, "fields() is read after content()"
        _, filename = file.headers.disposition()
        content_type = file.headers.headers.get(b"content-type")
        return UploadFields(
            filename=filename,
            content_type=None if content_type is None else decode_text(content_type),
            expires_in_seconds=self._int("expires_in_seconds"),
        )

    def _int(self, name: str) -> int | None:
        raw = self._values.get(name)
        if raw is None or raw.strip() == "":
            return None
        try:
            return int(raw.strip())
        except ValueError:
            raise InvalidRequest(f"{name} must be an integer", param=name) from None

    # -- parser callbacks (synchronous; they only record) -------------------------------------
    def _on_part_begin(self) -> None:
        self._parts += 1
        if self._parts > _MAX_PARTS:
            raise InvalidRequest(f"the multipart body has more than {_MAX_PARTS} parts")
        self._part = _Part()

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._part.headers.on_field(data, start, end)

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._part.headers.on_value(data, start, end)

    def _on_header_end(self) -> None:
        self._part.headers.on_end()

    def _on_headers_finished(self) -> None:
        part = self._part
        name, _ = part.headers.disposition()
        part.name = name
        if name == self._file_field:
            if self._file is not None:
                raise InvalidRequest(f"{name}: only one file per upload", param=name)
            part.is_file = True
            self._file = part
        elif name not in self._allowed:
            raise InvalidRequest(f"unknown form field {name!r}", param=name or None)

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        part = self._part
        if part.is_file:
            self._pending.append(data[start:end])
            return
        part.value += data[start:end]
        if len(part.value) > _MAX_FIELD_BYTES:
            raise InvalidRequest(f"{part.name}: longer than {_MAX_FIELD_BYTES} bytes", param=part.name)

    def _on_part_end(self) -> None:
        part = self._part
        if not part.is_file:
            self._values[part.name] = decode_text(bytes(part.value))

    def _on_end(self) -> None:
        self._ended = True

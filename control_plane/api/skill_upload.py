"""A skill upload read from a ``multipart/form-data`` body: many file parts and ``display_name``.

The SDK sends each file of the skill directory as a part named ``files[]`` (``files`` is taken
too) whose ``filename`` is the file's path relative to the directory's parent
(``my-skill/SKILL.md``); ``display_name`` is a text field. The parts are gathered in memory — a
skill is small, and every cap is counted as the bytes arrive, before anything is kept: all files
together at most the skill's ``max_total_bytes`` (413 past it), at most ``max_files`` parts (400),
a part's headers and a field's value small. The checks of the paths and the manifest are the
service's (:mod:`control_plane.skills.archive`).
"""

from __future__ import annotations

from python_multipart.multipart import MultipartParser
from starlette.requests import Request

from control_plane.api.multipart import PartHeaders, decode_text, multipart_boundary, parse_errors
from control_plane.errors import ContentTooLarge, InvalidRequest
from control_plane.skills import SkillFile, SkillLimits, SkillUpload

__all__ = ["SKILL_PART_OVERHEAD_BYTES", "read_skill_upload"]

_FILE_FIELDS = frozenset({"files", "files[]"})
_TEXT_FIELDS = frozenset({"display_name"})
_MAX_HEADER_BYTES = 4096  # one part's headers together
_MAX_FIELD_BYTES = 4 * 255  # display_name: 255 characters of UTF-8
#: What one file part may carry beyond its bytes (its boundary and headers).
SKILL_PART_OVERHEAD_BYTES = _MAX_HEADER_BYTES + 256


class _Reader:
    def __init__(self, limits: SkillLimits) -> None:
        self._limits = limits
        self._headers = PartHeaders(_MAX_HEADER_BYTES)
        self._name = ""
        self._filename: str | None = None
        self._data = bytearray()
        self._total = 0
        self.files: list[SkillFile] = []
        self.fields: dict[str, str] = {}
        self.ended = False

    def callbacks(self) -> dict[str, object]:
        return {
            "on_part_begin": self._on_part_begin,
            "on_header_field": self._on_header_field,
            "on_header_value": self._on_header_value,
            "on_header_end": self._on_header_end,
            "on_headers_finished": self._on_headers_finished,
            "on_part_data": self._on_part_data,
            "on_part_end": self._on_part_end,
            "on_end": self._on_end,
        }

    def _on_part_begin(self) -> None:
        if len(self.files) + len(self.fields) >= self._limits.max_files + len(_TEXT_FIELDS):
            raise InvalidRequest(f"files: more than {self._limits.max_files} files", param="files")
        self._headers = PartHeaders(_MAX_HEADER_BYTES)
        self._name, self._filename, self._data = "", None, bytearray()

    def _on_header_field(self, data: bytes, start: int, end: int) -> None:
        self._headers.on_field(data, start, end)

    def _on_header_value(self, data: bytes, start: int, end: int) -> None:
        self._headers.on_value(data, start, end)

    def _on_header_end(self) -> None:
        self._headers.on_end()

    def _on_headers_finished(self) -> None:
        self._name, self._filename = self._headers.disposition()
        if self._name not in _FILE_FIELDS and self._name not in _TEXT_FIELDS:
            raise InvalidRequest(f"unknown form field {self._name!r}", param=self._name or None)
        if self._name in self.fields:
            raise InvalidRequest(f"{self._name}: given twice", param=self._name)

    def _on_part_data(self, data: bytes, start: int, end: int) -> None:
        self._data += data[start:end]
        if self._name in _FILE_FIELDS:
            self._total += end - start
            if self._total > self._limits.max_total_bytes:
                raise ContentTooLarge(self._limits.max_total_bytes, "the skill's files together")
        elif len(self._data) > _MAX_FIELD_BYTES:
            raise InvalidRequest(f"{self._name}: longer than {_MAX_FIELD_BYTES} bytes", param=self._name)

    def _on_part_end(self) -> None:
        if self._name in _FILE_FIELDS:
            self.files.append(SkillFile(self._filename or "", bytes(self._data)))
        else:
            self.fields[self._name] = decode_text(bytes(self._data))

    def _on_end(self) -> None:
        self.ended = True


async def read_skill_upload(request: Request, limits: SkillLimits) -> SkillUpload:
    """The body's files and ``display_name``; 400 for a body that is not a well-formed
    multipart one, 413 past the skill's size cap."""
    boundary = multipart_boundary(request)
    reader = _Reader(limits)
    parser = MultipartParser(boundary, reader.callbacks())  # type: ignore[arg-type]
    with parse_errors():
        async for chunk in request.stream():
            parser.write(chunk)
        parser.finalize()
    if not reader.ended:
        raise InvalidRequest("the multipart body ends before its closing boundary")
    if not reader.files:
        raise InvalidRequest("files: at least one file is required", param="files")
    return SkillUpload(files=reader.files, display_name=reader.fields.get("display_name"))

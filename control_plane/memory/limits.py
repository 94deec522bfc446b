"""The limits of memory stores and what a memory's path, content and hash may be.

A path starts with ``/`` and has 1 to 20 segments; a segment is not empty, ``.`` nor ``..``; the
path holds no control or format characters, no line or paragraph separators (U+2028, U+2029) and
no lone surrogates, is in Unicode Normalization Form C and at most 1,024 bytes of UTF-8. Paths are
case-sensitive. Content is UTF-8 text of at most 102,400 bytes; Outpost also refuses the NUL
character in it (PostgreSQL text cannot hold it, and every backend behaves alike). A
``path_prefix`` is ``/`` or a path ending with ``/``. Every breach is an ``InvalidRequest`` (400).
"""

from __future__ import annotations

import re
import unicodedata

from control_plane.errors import InvalidRequest

__all__ = [
    "MAX_CONTENT_BYTES",
    "MAX_MEMORIES_PER_STORE",
    "MAX_PATH_BYTES",
    "MAX_PATH_SEGMENTS",
    "MAX_STORE_DESCRIPTION",
    "MAX_STORE_NAME",
    "check_content",
    "check_path",
    "check_path_prefix",
    "check_sha256",
]

MAX_CONTENT_BYTES = 102_400
MAX_PATH_BYTES = 1024
MAX_PATH_SEGMENTS = 20
MAX_MEMORIES_PER_STORE = 2000
MAX_STORE_NAME = 255
MAX_STORE_DESCRIPTION = 1024

_REFUSED_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _check_characters(value: str, param: str) -> None:
    for char in value:
        if unicodedata.category(char) in _REFUSED_CATEGORIES:
            raise InvalidRequest(
                f"{param}: control, format and separator characters are not allowed (U+{ord(char):04X})",
                param=param,
            )
    if not unicodedata.is_normalized("NFC", value):
        raise InvalidRequest(f"{param}: must be in Unicode Normalization Form C", param=param)
    if len(value.encode("utf-8")) > MAX_PATH_BYTES:
        raise InvalidRequest(f"{param}: at most {MAX_PATH_BYTES} bytes", param=param)


def _check_segments(segments: list[str], param: str) -> None:
    if len(segments) > MAX_PATH_SEGMENTS:
        raise InvalidRequest(f"{param}: at most {MAX_PATH_SEGMENTS} segments", param=param)
    for segment in segments:
        if segment in ("", ".", ".."):
            raise InvalidRequest(f"{param}: segments cannot be empty, '.' or '..'", param=param)


def check_path(path: str, param: str = "path") -> str:
    if not path.startswith("/"):
        raise InvalidRequest(f"{param}: must start with '/'", param=param)
    _check_characters(path, param)
    _check_segments(path[1:].split("/"), param)
    return path


def check_path_prefix(prefix: str) -> str:
    """``/`` or ``/a/b/``: whole segments, ending with ``/``."""
    param = "path_prefix"
    if not prefix.startswith("/") or not prefix.endswith("/"):
        raise InvalidRequest(f"{param}: must start and end with '/'", param=param)
    _check_characters(prefix, param)
    if prefix != "/":
        _check_segments(prefix[1:-1].split("/"), param)
    return prefix


def check_content(content: str, param: str = "content") -> str:
    try:
        size = len(content.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidRequest(f"{param}: must be valid UTF-8 text", param=param) from None
    if size > MAX_CONTENT_BYTES:
        raise InvalidRequest(
            f"{param}: at most {MAX_CONTENT_BYTES} bytes of UTF-8 ({size} given)", param=param
        )
    if "\x00" in content:
        raise InvalidRequest(f"{param}: the NUL character is not allowed", param=param)
    return content


def check_sha256(value: str, param: str) -> str:
    if not _SHA256.fullmatch(value):
        raise InvalidRequest(f"{param}: must be 64 lowercase hexadecimal characters", param=param)
    return value

"""A skill's upload made one checked, normalised zip archive (no I/O: bytes in, bytes out).

An upload is either the skill directory's files, each with its path relative to the directory's
parent (``my-skill/SKILL.md``, ``my-skill/scripts/run.py``: what the SDK's ``files_from_dir``
sends), or one archive of that directory (zip, or tar plain or compressed with gzip, bzip2 or xz,
recognised by its first bytes). Either way the files are checked the same and stored as one
canonical zip: the entries sorted, under ``<name>/`` (the skill's slug), a fixed timestamp, modes
``0644`` (``0755`` for a member that was executable in an uploaded archive), deflated.

Refused (``InvalidRequest``, 400): a path that is absolute, has a ``..``, ``.`` or empty component,
a backslash, a control character or is longer than :data:`MAX_PATH_CHARS`; two files at one path;
files not all in one top-level directory; more than ``max_files`` files, a file over
``max_file_bytes``, all files together over ``max_total_bytes`` (``ContentTooLarge``, 413); in an
archive also links (symbolic or hard), devices, FIFOs and encrypted members (tar members are also
checked with the standard library's ``data`` extraction filter). Archives are never extracted to
disk; compressed tar streams are inflated in memory with a cap, so a small bomb stays small.

``<top>/SKILL.md`` is the manifest: UTF-8, YAML front matter between ``---`` lines (parsed with
``yaml.safe_load``) with ``description`` (1 to 1024 characters, no XML tags) and ``name`` (the
skill's slug: at most 64 characters, lowercase letters, digits and single hyphens, without the
reserved words ``anthropic`` and ``claude``); without ``name`` the top-level directory's name is
the slug, under the same rules (the hosted Agent Skills rules).
"""

from __future__ import annotations

import bz2
import io
import lzma
import re
import stat
import tarfile
import zipfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from control_plane.errors import ContentTooLarge, InvalidRequest

__all__ = [
    "DEFAULT_MAX_FILES",
    "DEFAULT_MAX_FILE_BYTES",
    "DEFAULT_MAX_TOTAL_BYTES",
    "MANIFEST",
    "MAX_DESCRIPTION_CHARS",
    "MAX_NAME_CHARS",
    "MAX_PATH_CHARS",
    "SkillArchive",
    "SkillFile",
    "SkillLimits",
    "build_archive",
    "is_archive",
]

MANIFEST = "SKILL.md"
DEFAULT_MAX_FILES = 500
DEFAULT_MAX_FILE_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_TOTAL_BYTES = 8 * 1024 * 1024  # the hosted API's cap on a skill upload
MAX_PATH_CHARS = 512
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1024
_RESERVED_WORDS = ("anthropic", "claude")
_SLUG = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_XML_TAG = re.compile(r"<\s*/?\s*[A-Za-z][^<>]*>")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_TAR_SLACK_PER_MEMBER = 2048  # a member's header and padding, generously


@dataclass(frozen=True, slots=True)
class SkillLimits:
    max_files: int = DEFAULT_MAX_FILES
    max_file_bytes: int = DEFAULT_MAX_FILE_BYTES
    max_total_bytes: int = DEFAULT_MAX_TOTAL_BYTES


@dataclass(frozen=True, slots=True)
class SkillFile:
    """One uploaded file: its path as sent (relative, ``/``-separated) and its bytes."""

    path: str
    data: bytes
    executable: bool = False


@dataclass(frozen=True, slots=True)
class SkillArchive:
    """The checked upload: the slug, the manifest's description and the canonical zip."""

    name: str
    description: str
    front_matter_name: str | None  # None: the slug is the top-level directory's name
    data: bytes  # the canonical zip
    file_count: int
    total_bytes: int  # the files' bytes, uncompressed


def is_archive(data: bytes) -> bool:
    """Whether ``data`` starts as a zip or a (compressed) tar does."""
    return _zip_magic(data) or _compression(data) is not None or _tar_magic(data)


def build_archive(files: Sequence[SkillFile], limits: SkillLimits) -> SkillArchive:
    """Check the upload (loose files, or one archive) and make its canonical zip."""
    if not files:
        raise InvalidRequest("files: at least one file is required", param="files")
    if len(files) == 1 and _last(files[0].path) != MANIFEST and is_archive(files[0].data):
        files = _unpack(files[0].data, limits)
    return _normalised(files, limits)


# -- loose files ---------------------------------------------------------------------------------


def _last(path: str) -> str:
    return path.rsplit("/", 1)[-1]


def _check_path(path: str) -> list[str]:
    if not path:
        raise InvalidRequest("files: a file has no path (its part needs a filename)", param="files")
    shown = path[:80]
    if len(path) > MAX_PATH_CHARS:
        raise InvalidRequest(f"files: {shown!r}...: path longer than {MAX_PATH_CHARS} characters", "files")
    if _CONTROL.search(path) or "\\" in path:
        raise InvalidRequest(f"files: {shown!r}: control characters and backslashes are refused", "files")
    if path.startswith("/") or re.match(r"[A-Za-z]:", path):
        raise InvalidRequest(f"files: {shown!r}: absolute paths are refused", param="files")
    parts = path.split("/")
    if any(part in ("", ".", "..") for part in parts):
        raise InvalidRequest(f"files: {shown!r}: '..', '.' and empty path components are refused", "files")
    return parts


def _normalised(files: Iterable[SkillFile], limits: SkillLimits) -> SkillArchive:
    tops: set[str] = set()
    seen: dict[str, SkillFile] = {}
    total = 0
    for file in files:
        parts = _check_path(file.path)
        if len(parts) < 2:
            raise InvalidRequest(
                f"files: {file.path!r}: every file must be in the skill's top-level directory "
                f"(e.g. my-skill/{MANIFEST})",
                param="files",
            )
        tops.add(parts[0])
        if file.path in seen:
            raise InvalidRequest(f"files: {file.path!r} is uploaded twice", param="files")
        seen[file.path] = file
        if len(seen) > limits.max_files:
            raise InvalidRequest(f"files: more than {limits.max_files} files", param="files")
        if len(file.data) > limits.max_file_bytes:
            raise ContentTooLarge(limits.max_file_bytes, f"skill file {file.path!r}")
        total += len(file.data)
        if total > limits.max_total_bytes:
            raise ContentTooLarge(limits.max_total_bytes, "the skill's files together")
    if len(tops) != 1:
        raise InvalidRequest(
            f"files: all files must be in one top-level directory (found {len(tops)})", param="files"
        )
    top = tops.pop()
    manifest = seen.get(f"{top}/{MANIFEST}")
    if manifest is None:
        raise InvalidRequest(f"files: {top}/{MANIFEST} is required (the skill's manifest)", param="files")
    front_name, description = parse_manifest(manifest.data)
    name = front_name if front_name is not None else _slug(top, f"the directory name {top!r}")
    return SkillArchive(
        name=name,
        description=description,
        front_matter_name=front_name,
        data=_zip(name, top, seen.values()),
        file_count=len(seen),
        total_bytes=total,
    )


def _zip(name: str, top: str, files: Iterable[SkillFile]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for file in sorted(files, key=lambda f: f.path):
            info = zipfile.ZipInfo(name + file.path[len(top) :], date_time=_FIXED_TIME)
            info.create_system = 3  # unix: the mode below is read
            info.external_attr = (stat.S_IFREG | (0o755 if file.executable else 0o644)) << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, file.data)
    return out.getvalue()


# -- the manifest --------------------------------------------------------------------------------


def parse_manifest(raw: bytes) -> tuple[str | None, str]:
    """``(name or None, description)`` from SKILL.md's front matter."""
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidRequest(f"{MANIFEST} must be UTF-8 text", param="files") from None
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise InvalidRequest(f"{MANIFEST} must start with YAML front matter ('---' line)", param="files")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise InvalidRequest(f"{MANIFEST}: the front matter has no closing '---' line", "files") from None
    try:
        front: Any = yaml.safe_load("\n".join(lines[1:end]))
    except yaml.YAMLError:
        raise InvalidRequest(f"{MANIFEST}: the front matter is not valid YAML", param="files") from None
    if not isinstance(front, dict):
        raise InvalidRequest(f"{MANIFEST}: the front matter must be a mapping", param="files")
    description = front.get("description")
    if not isinstance(description, str) or not description.strip():
        raise InvalidRequest(f"{MANIFEST}: 'description' (a non-empty string) is required", "files")
    description = description.strip()
    if len(description) > MAX_DESCRIPTION_CHARS:
        raise InvalidRequest(
            f"{MANIFEST}: 'description' is longer than {MAX_DESCRIPTION_CHARS} characters", "files"
        )
    if _XML_TAG.search(description):
        raise InvalidRequest(f"{MANIFEST}: 'description' must not contain XML tags", param="files")
    name = front.get("name")
    if name is None:
        return None, description
    if not isinstance(name, str):
        raise InvalidRequest(f"{MANIFEST}: 'name' must be a string", param="files")
    return _slug(name, "'name'"), description


def _slug(name: str, what: str) -> str:
    if len(name) > MAX_NAME_CHARS or not _SLUG.fullmatch(name):
        raise InvalidRequest(
            f"{MANIFEST}: {what} must be at most {MAX_NAME_CHARS} lowercase letters, digits and "
            "single hyphens",
            param="files",
        )
    for word in _RESERVED_WORDS:
        if word in name:
            raise InvalidRequest(f"{MANIFEST}: {what} must not contain the reserved word {word!r}", "files")
    return name


# -- archives ------------------------------------------------------------------------------------


def _zip_magic(data: bytes) -> bool:
    return data[:4] in (b"PK\x03\x04", b"PK\x05\x06")


def _tar_magic(data: bytes) -> bool:
    return data[257:262] == b"ustar"


def _compression(data: bytes) -> str | None:
    if data[:2] == b"\x1f\x8b":
        return "gzip"
    if data[:3] == b"BZh":
        return "bzip2"
    if data[:6] == b"\xfd7zXZ\x00":
        return "xz"
    return None


def _unpack(data: bytes, limits: SkillLimits) -> list[SkillFile]:
    if _zip_magic(data):
        return _from_zip(data, limits)
    return _from_tar(data, limits)


def _refuse_member(name: str, why: str) -> InvalidRequest:
    return InvalidRequest(f"files: archive member {name[:80]!r}: {why}", param="files")


def _from_zip(data: bytes, limits: SkillLimits) -> list[SkillFile]:
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError):
        raise InvalidRequest("files: the zip archive is damaged", param="files") from None
    files: list[SkillFile] = []
    with archive:
        for info in archive.infolist():
            mode = info.external_attr >> 16 if info.create_system == 3 else 0
            kind = stat.S_IFMT(mode)
            if info.is_dir() or kind == stat.S_IFDIR:
                continue
            if kind == stat.S_IFLNK:
                raise _refuse_member(info.filename, "links are refused")
            if kind not in (0, stat.S_IFREG):
                raise _refuse_member(info.filename, "devices, FIFOs and sockets are refused")
            if info.flag_bits & 0x1:
                raise _refuse_member(info.filename, "encrypted members are refused")
            _count(files, limits)
            if info.file_size > limits.max_file_bytes:
                raise ContentTooLarge(limits.max_file_bytes, f"skill file {info.filename!r}")
            try:
                with archive.open(info) as member:
                    content = member.read(limits.max_file_bytes + 1)
            except (zipfile.BadZipFile, zlib.error, NotImplementedError, EOFError):
                raise _refuse_member(info.filename, "cannot be read") from None
            files.append(SkillFile(_member_path(info.filename), content, executable=bool(mode & 0o111)))
    return files


def _member_path(name: str) -> str:
    """A member's path as a loose file's (archivers often write ``./`` before each name)."""
    while name.startswith("./"):
        name = name[2:]
    return name


def _count(files: Sequence[SkillFile], limits: SkillLimits) -> None:
    if len(files) >= limits.max_files:
        raise InvalidRequest(f"files: more than {limits.max_files} files", param="files")


def _inflated(data: bytes, cap: int) -> bytes:
    """A compressed tar's plain bytes, at most ``cap`` (past it: ``ContentTooLarge``)."""
    kind = _compression(data)
    decompressor: Any
    if kind == "gzip":
        decompressor = zlib.decompressobj(wbits=zlib.MAX_WBITS | 16)
    elif kind == "bzip2":
        decompressor = bz2.BZ2Decompressor()
    elif kind == "xz":
        decompressor = lzma.LZMADecompressor()
    else:
        return data
    try:
        plain = decompressor.decompress(data, cap + 1)
    except (zlib.error, OSError, lzma.LZMAError, EOFError):
        raise InvalidRequest(f"files: the {kind} stream is damaged", param="files") from None
    if len(plain) > cap:
        raise ContentTooLarge(cap, "the skill archive, uncompressed")
    return bytes(plain)


def _from_tar(data: bytes, limits: SkillLimits) -> list[SkillFile]:
    cap = limits.max_total_bytes + limits.max_files * _TAR_SLACK_PER_MEMBER * 2 + 10 * 1024
    plain = _inflated(data, cap)
    files: list[SkillFile] = []
    try:
        with tarfile.open(fileobj=io.BytesIO(plain), mode="r:") as archive:
            for member in archive:
                _check_tar_member(member)
                if member.isdir():
                    continue
                _count(files, limits)
                if member.size > limits.max_file_bytes:
                    raise ContentTooLarge(limits.max_file_bytes, f"skill file {member.name!r}")
                handle = archive.extractfile(member)
                content = handle.read() if handle is not None else b""
                files.append(SkillFile(_member_path(member.name), content, bool(member.mode & 0o111)))
    except tarfile.TarError:
        raise InvalidRequest("files: the tar archive is damaged", param="files") from None
    return files


def _check_tar_member(member: tarfile.TarInfo) -> None:
    if member.issym() or member.islnk():
        raise _refuse_member(member.name, "links are refused")
    if not (member.isreg() or member.isdir()):
        raise _refuse_member(member.name, "devices, FIFOs and other special files are refused")
    try:
        tarfile.data_filter(member, "/nonexistent-skill-root")
    except tarfile.FilterError as exc:
        raise _refuse_member(member.name, f"refused by the data filter ({type(exc).__name__})") from None

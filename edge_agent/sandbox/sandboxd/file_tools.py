"""The file tools ``read``, ``write`` and ``edit`` (and the door to ``glob`` and ``grep``, in
:mod:`.search`), confined to a :class:`~.paths.Workspace` (the workspace and the mounts root);
writes in the workspace are counted against its :class:`~.quota.Quota` (the mounts are not: a
memory store, skill or upload has its own limits)."""

from __future__ import annotations

import base64
import errno
import os
import shutil
import stat
from collections.abc import Callable
from typing import Any, BinaryIO

from . import search
from .common import (
    NO_OUTPUT,
    Block,
    Result,
    ToolError,
    fs_error,
    log_exception,
    req_bool,
    req_str,
    text_block,
)
from .paths import Workspace
from .quota import Quota

FILE_TOOLS = ("read", "write", "edit", "glob", "grep")
FILE_BYTES_LIMIT = 256 * 1024
IMAGE_B64_LIMIT = 5 * 1024 * 1024
PDF_BYTES_LIMIT = 20 * 1024 * 1024
IMAGE_TYPES = {
    ".png": "image/png",
    ".jpg": "image/jpeg",
    ".jpeg": "image/jpeg",
    ".gif": "image/gif",
    ".webp": "image/webp",
}
PDF_TYPE = "application/pdf"


class FileTools:
    """read / write / edit / glob / grep, confined to a :class:`Workspace`; every path is opened
    through :meth:`Workspace.open` and then used only through its descriptor."""

    def __init__(self, workspace: Workspace, *, use_rg: bool = True, quota: Quota | None = None) -> None:
        self.ws = workspace
        self.quota = quota if quota is not None else Quota(workspace.root, 0)
        rg = shutil.which("rg") if use_rg else None
        # An rg that lives inside the workspace or a mount could be planted by the model: never run it.
        self.rg = rg if rg and not workspace.within_any(os.path.realpath(rg)) else None

    def run(self, tool: str, inp: dict[str, Any]) -> tuple[list[Block], bool]:
        """Run one file tool; returns (content blocks, is_error). Never raises."""
        func: Callable[[dict[str, Any]], Result] | None = (
            getattr(self, tool, None) if tool in FILE_TOOLS else None
        )
        if func is None:
            return [text_block(f"unknown tool '{tool}'")], True
        try:
            result = func(inp)
        except ToolError as exc:
            return [text_block(str(exc))], True
        except RecursionError:
            return [text_block(f"{tool}: input too deeply nested")], True
        except Exception as exc:
            log_exception(tool, exc)
            return [text_block(f"{tool}: internal error: {type(exc).__name__}")], True
        if isinstance(result, str):
            return [text_block(result or NO_OUTPUT)], False
        return result, False

    def _open(self, tool: str, given: str, flags: int, *, create_dirs: bool = False) -> int:
        try:
            return self.ws.open(tool, given, flags | os.O_NONBLOCK, create_dirs=create_dirs)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # a FIFO without a reader
                raise ToolError(f"{tool}: {given}: not a regular file") from None
            if exc.errno == errno.EROFS:  # a read-only mount (a memory store, skill or upload)
                raise self.ws.read_only(tool, given) from None
            raise fs_error(tool, given, exc) from None

    # read ------------------------------------------------------------------------------------

    def read(self, inp: dict[str, Any]) -> Result:
        file_path = req_str("read", inp, "file_path")
        assert file_path is not None
        view_range = inp.get("view_range")
        fd = self._open("read", file_path, os.O_RDONLY)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ToolError(f"read: {file_path}: not a regular file")
        with os.fdopen(fd, "rb") as fh:
            suffix = os.path.splitext(self.ws.real_path(fd))[1].lower()
            if suffix in IMAGE_TYPES or suffix == ".pdf":
                if view_range is not None:
                    raise ToolError(f"read: view_range is not supported for {suffix} files")
                return self._read_binary(file_path, fh, st.st_size, suffix)
            if view_range is None:
                if st.st_size > FILE_BYTES_LIMIT:
                    raise ToolError(
                        f"read: {file_path} is {st.st_size} bytes, over the {FILE_BYTES_LIMIT}-byte limit "
                        "for a whole-file read; pass view_range [start_line, end_line] to read a slice"
                    )
                try:
                    data = fh.read(FILE_BYTES_LIMIT + 1)
                except OSError as exc:
                    raise fs_error("read", file_path, exc) from None
                try:
                    return data.decode("utf-8")
                except UnicodeDecodeError:
                    raise ToolError(f"read: {file_path}: not valid UTF-8 text") from None
            start, end = parse_view_range(view_range)
            return self._read_lines(file_path, fh, start, end)

    def _read_binary(self, file_path: str, fh: BinaryIO, size: int, suffix: str) -> Result:
        if suffix == ".pdf":
            kind, media_type = "document", PDF_TYPE
            if size > PDF_BYTES_LIMIT:
                raise ToolError(
                    f"read: {file_path} is {size} bytes, over the {PDF_BYTES_LIMIT}-byte PDF limit"
                )
        else:
            kind, media_type = "image", IMAGE_TYPES[suffix]
            if (size + 2) // 3 * 4 > IMAGE_B64_LIMIT:
                raise ToolError(
                    f"read: {file_path} is {size} bytes, over the image limit "
                    f"({IMAGE_B64_LIMIT} bytes once base64-encoded)"
                )
        try:
            data = fh.read()
        except OSError as exc:
            raise fs_error("read", file_path, exc) from None
        return [{"type": kind, "media_type": media_type, "data_b64": base64.b64encode(data).decode("ascii")}]

    def _read_lines(self, file_path: str, fh: BinaryIO, start: int, end: int) -> str:
        """Lines start..end (1-indexed, inclusive; end <= 0 means EOF), streamed: any file size."""
        out: list[str] = []
        size = 0
        truncated = False
        line_no = 0
        ends_with_newline = True
        try:
            for line_no, raw in enumerate(fh, 1):
                ends_with_newline = raw.endswith(b"\n")
                if line_no < start:
                    continue
                if 0 < end < line_no:
                    break
                try:
                    line = raw.rstrip(b"\n").decode("utf-8")
                except UnicodeDecodeError:
                    raise ToolError(f"read: {file_path}: line {line_no} is not valid UTF-8 text") from None
                size += len(raw)
                if size > FILE_BYTES_LIMIT:
                    truncated = True
                    break
                out.append(line)
            else:
                # Like str.split("\n"): a file ending in a newline has an empty last line.
                if ends_with_newline and (line_no + 1) >= start and (end <= 0 or line_no + 1 <= end):
                    out.append("")
        except OSError as exc:
            raise fs_error("read", file_path, exc) from None
        text = "\n".join(out)
        if truncated:
            text += f"\n[output truncated at {FILE_BYTES_LIMIT} bytes; narrow view_range]"
        return text

    # write / edit ----------------------------------------------------------------------------

    def _replace_contents(self, tool: str, file_path: str, fh: BinaryIO, old_disk: int, data: bytes) -> None:
        """Overwrite the open file with ``data`` if the quota allows it (in the workspace)."""
        if self.ws.in_workspace(tool, file_path):
            self.quota.check(tool, file_path, old_disk, len(data))
        try:
            fh.seek(0)
            fh.truncate()
            fh.write(data)
            fh.flush()
        except OSError as exc:
            raise fs_error(tool, file_path, exc) from None

    def write(self, inp: dict[str, Any]) -> Result:
        file_path = req_str("write", inp, "file_path")
        content = req_str("write", inp, "content")
        assert file_path is not None and content is not None
        self.ws.relative("write", file_path)  # refuse a path outside before anything else
        try:
            data = content.encode("utf-8")
        except UnicodeEncodeError:
            raise ToolError("write: content is not valid UTF-8 text") from None
        try:
            fd = self.ws.open("write", file_path, os.O_WRONLY | os.O_NONBLOCK)
        except OSError:
            # New (or unopenable: the second open reports why). Refuse before creating anything.
            if self.ws.in_workspace("write", file_path):
                self.quota.check_room("write", file_path, len(data))
            fd = self._open("write", file_path, os.O_WRONLY | os.O_CREAT, create_dirs=True)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):  # a FIFO or device would block or worse
            os.close(fd)
            raise ToolError(f"write: {file_path}: not a regular file")
        with os.fdopen(fd, "wb") as fh:
            self._replace_contents("write", file_path, fh, st.st_blocks * 512, data)
        return f"wrote {len(data)} bytes to {file_path}"

    def edit(self, inp: dict[str, Any]) -> Result:
        file_path = req_str("edit", inp, "file_path")
        old = req_str("edit", inp, "old_string")
        new = req_str("edit", inp, "new_string")
        replace_all = req_bool("edit", inp, "replace_all")
        assert file_path is not None and old is not None and new is not None
        if not old:
            raise ToolError("edit: old_string must not be empty")
        fd = self._open("edit", file_path, os.O_RDWR)
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            os.close(fd)
            raise ToolError(f"edit: {file_path}: not a regular file")
        with os.fdopen(fd, "r+b") as fh:
            if st.st_size > FILE_BYTES_LIMIT:
                raise ToolError(
                    f"edit: {file_path} is {st.st_size} bytes, over the {FILE_BYTES_LIMIT}-byte limit; "
                    "use bash (sed, awk) to edit a large file"
                )
            try:
                raw = fh.read()
            except OSError as exc:
                raise fs_error("edit", file_path, exc) from None
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise ToolError(f"edit: {file_path}: not valid UTF-8 text") from None
            count = text.count(old)
            if count == 0:
                raise ToolError(f"edit: old_string not found in {file_path}")
            if count > 1 and not replace_all:
                raise ToolError(f"edit: old_string appears {count} times in {file_path} (must be unique)")
            updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
            try:
                data = updated.encode("utf-8")
            except UnicodeEncodeError:
                raise ToolError("edit: new_string is not valid UTF-8 text") from None
            self._replace_contents("edit", file_path, fh, st.st_blocks * 512, data)
        replaced = count if replace_all else 1
        return f"edited {file_path} ({replaced} replacement(s))"

    # glob and grep ---------------------------------------------------------------------------

    def glob(self, inp: dict[str, Any]) -> Result:
        return search.run_glob(self.ws, inp)

    def grep(self, inp: dict[str, Any]) -> Result:
        return search.run_grep(self.ws, self.rg, inp)


def parse_view_range(value: Any) -> tuple[int, int]:
    if (
        not isinstance(value, list)
        or len(value) != 2
        or not all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise ToolError("read: view_range must be [start_line, end_line]")
    start, end = max(1, value[0]), value[1]
    if 0 < end < start:
        raise ToolError(f"read: view_range end ({end}) is before start ({start})")
    return start, end

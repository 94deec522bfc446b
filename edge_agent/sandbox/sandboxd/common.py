"""What every part of sandboxd shares: the environment it reads, the shape of a result, the error a
tool raises for the model to see, and the checks on a tool's input."""

from __future__ import annotations

import sys
import traceback
from typing import Any, Union

ROOT_ENV = "SANDBOXD_ROOT"
NO_RG_ENV = "SANDBOXD_NO_RG"  # tests: force the pure-Python grep
QUOTA_ENV = "SANDBOXD_QUOTA_BYTES"  # the workspace size quota; unset or 0 = none
MOUNTS_ENV = "SANDBOXD_MOUNTS_ROOT"  # the mounts root the file tools also reach (default /mnt)
NO_OUTPUT = "(no output)"

Block = dict[str, Any]
Result = Union[str, list[Block]]  # noqa: UP007 - evaluated at run time, and 3.9 has no X | Y


class ToolError(Exception):
    """A tool failed in a way the model should see: the message becomes an ``is_error`` result."""


def text_block(text: str) -> Block:
    # Undecodable file names arrive as lone surrogates (surrogateescape); make the text valid UTF-8.
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = text.encode("utf-8", "surrogatepass")
    return {"type": "text", "text": raw.decode("utf-8", "replace")}


def fs_error(tool: str, shown: str, exc: OSError) -> ToolError:
    """Map an OSError to a stable message that names the path the model gave, not a host path."""
    if isinstance(exc, FileNotFoundError):
        reason = "no such file or directory"
    elif isinstance(exc, NotADirectoryError):
        reason = "not a directory"
    elif isinstance(exc, IsADirectoryError):
        reason = "is a directory"
    elif isinstance(exc, PermissionError):
        reason = "permission denied"
    elif isinstance(exc, FileExistsError):
        reason = "file already exists"
    else:
        reason = (exc.strerror or "i/o error").lower()
    return ToolError(f"{tool}: {shown}: {reason}")


def req_str(tool: str, inp: dict[str, Any], key: str, *, required: bool = True) -> str | None:
    value = inp.get(key)
    if value is None:
        if required:
            raise ToolError(f"{tool}: missing required field '{key}'")
        return None
    if not isinstance(value, str):
        raise ToolError(f"{tool}: field '{key}' must be a string")
    return value


def req_bool(tool: str, inp: dict[str, Any], key: str) -> bool:
    value = inp.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise ToolError(f"{tool}: field '{key}' must be a boolean")
    return value


def format_seconds(seconds: float) -> str:
    return f"{seconds:g}"


def log_exception(where: str, exc: BaseException) -> None:
    """An unexpected failure, with its traceback, on stderr (the edge keeps its tail)."""
    try:
        sys.stderr.write(f"sandboxd: {where}: {type(exc).__name__}: {exc}\n")
        traceback.print_exc(file=sys.stderr)
        sys.stderr.flush()
    except Exception:  # noqa: S110 - diagnostics must never take the daemon down
        pass

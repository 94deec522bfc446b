"""The workspace quota: a soft size limit on the workspace, kept by sandboxd (see :class:`Quota`)."""

from __future__ import annotations

import os
import stat
import threading
import time

from .common import ToolError

QUOTA_MAX_AGE_S = 5.0  # how stale the measured workspace usage may get between writes
QUOTA_CHEAP_WALK_S = 0.05  # after bash, measure again if the last walk took less than this ...
QUOTA_WALK_SHARE = 20  # ... or if it took less than 1/20 of the time since


def _disk_bytes(size: int) -> int:
    """What a file of ``size`` bytes takes on disk, roughly (whole 4 KiB blocks)."""
    return (size + 4095) // 4096 * 4096


class Quota:
    """A soft size limit on the workspace: ``write`` and ``edit`` refuse to pass it, and a bash call
    that ends with the workspace over it is reported as an error (bash itself is not stopped).

    Usage is what ``du`` would count (allocated blocks; hard links once), found by walking the
    workspace at most every ``max_age_s`` seconds and kept current in between by the file tools'
    own writes. After a bash call it is measured again, except that a workspace whose walk takes
    longer than :data:`QUOTA_CHEAP_WALK_S` is walked at most 1/:data:`QUOTA_WALK_SHARE` of the time.
    ``limit_bytes`` 0 means no quota. It covers the workspace only: writes under the mounts root
    (memory stores, skills, uploads; see :class:`~.paths.Workspace`) are neither counted nor refused.
    """

    def __init__(self, root: str, limit_bytes: int, *, max_age_s: float = QUOTA_MAX_AGE_S) -> None:
        self.root = root
        self.limit_bytes = max(0, limit_bytes)
        self.max_age_s = max_age_s
        self._lock = threading.Lock()
        self._used: int | None = None
        self._measured_at = 0.0
        self._walk_s = 0.0

    @property
    def enabled(self) -> bool:
        return self.limit_bytes > 0

    def measure(self) -> int:
        """Walk the workspace now (never following symlinks)."""
        total = 0
        seen: set[tuple[int, int]] = set()
        stack = [self.root]
        while stack:
            try:
                with os.scandir(stack.pop()) as entries:
                    for entry in entries:
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                            key = (st.st_dev, st.st_ino)
                            if key in seen:
                                continue
                            seen.add(key)
                        total += st.st_blocks * 512
                        if stat.S_ISDIR(st.st_mode):
                            stack.append(entry.path)
            except OSError:
                continue
        return total

    def used(self, *, fresh: bool = False) -> int:
        with self._lock:
            age = time.monotonic() - self._measured_at
            cheap = self._walk_s < QUOTA_CHEAP_WALK_S
            stale = age > self.max_age_s or (fresh and (cheap or age > self._walk_s * QUOTA_WALK_SHARE))
            if self._used is None or stale:
                started = time.monotonic()
                self._used = self.measure()
                self._measured_at = time.monotonic()
                self._walk_s = self._measured_at - started
            return self._used

    def check_room(self, tool: str, shown: str, new_size: int) -> None:
        """Refuse (ToolError) a new file of ``new_size`` bytes that cannot fit; counts nothing."""
        if self.enabled:
            used = self.used()
            if used + _disk_bytes(new_size) > self.limit_bytes:
                raise self._refusal(tool, shown, used + _disk_bytes(new_size))

    def _refusal(self, tool: str, shown: str, total: int) -> ToolError:
        return ToolError(
            f"{tool}: {shown}: refused, the workspace would exceed its size quota "
            f"({_mib(total)} of {_mib(self.limit_bytes)}); remove files to make room"
        )

    def check(self, tool: str, shown: str, old_disk: int, new_size: int) -> None:
        """Refuse (ToolError) a write that replaces ``old_disk`` bytes with ``new_size`` bytes if it
        would take the workspace past the quota; otherwise count it."""
        if not self.enabled:
            return
        delta = _disk_bytes(new_size) - old_disk
        used = self.used()
        if delta > 0 and used + delta > self.limit_bytes:
            raise self._refusal(tool, shown, used + delta)
        with self._lock:
            if self._used is not None:
                self._used = max(0, self._used + delta)

    def over_note(self) -> str | None:
        """After a bash call: a message if the workspace is now over the quota, else None."""
        if not self.enabled:
            return None
        used = self.used(fresh=True)
        if used <= self.limit_bytes:
            return None
        return (
            f"[the workspace is over its size quota ({_mib(used)} of {_mib(self.limit_bytes)}): "
            "remove files; write and edit are refused until it is back under]"
        )


def _mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"

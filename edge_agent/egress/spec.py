"""What a sandbox may reach: the egress mode and, for ``allowlist``, its entries.

Pure data. The spec is fixed when a sandbox is created and stored in a container label, so a
restarted edge applies the same rules to the sandboxes it adopts.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass, field

from .hosts import Allowlist

__all__ = ["EgressMode", "EgressSpec"]


class EgressMode(enum.StrEnum):
    """Ordered from the most to the least restrictive."""

    NONE = "none"  # no network interface but loopback
    ALLOWLIST = "allowlist"  # an internal network whose only way out is the edge's proxy
    UNRESTRICTED = "unrestricted"  # a NAT bridge: anything the host can reach

    @property
    def rank(self) -> int:
        return _RANK[self]

    def exceeds(self, other: EgressMode) -> bool:
        """Is this mode less restrictive than ``other``?"""
        return self.rank > other.rank


_RANK = {EgressMode.NONE: 0, EgressMode.ALLOWLIST: 1, EgressMode.UNRESTRICTED: 2}


@dataclass(frozen=True)
class EgressSpec:
    """``allowed_hosts`` is canonical (parsed, deduplicated, sorted) and empty unless ``allowlist``.

    Raises ValueError for an invalid entry or for entries given with another mode.
    """

    mode: EgressMode = EgressMode.NONE
    allowed_hosts: tuple[str, ...] = ()
    allowlist: Allowlist = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        mode = EgressMode(self.mode)
        if self.allowed_hosts and mode is not EgressMode.ALLOWLIST:
            raise ValueError(f"allowed hosts are only meaningful in 'allowlist' mode, not {mode.value!r}")
        allowlist = Allowlist.parse(self.allowed_hosts)
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "allowed_hosts", allowlist.entries())
        object.__setattr__(self, "allowlist", allowlist)

    def to_label(self) -> str:
        """Compact JSON for the ``outpost.egress`` container label."""
        body = {"mode": self.mode.value, "hosts": list(self.allowed_hosts)}
        return json.dumps(body, separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_label(cls, text: str | None) -> EgressSpec:
        """Inverse of :meth:`to_label`; a missing label is a container from before egress control
        (mode ``none``). Raises ValueError for a malformed one."""
        if not text:
            return cls()
        try:
            body = json.loads(text)
            mode, hosts = body["mode"], body["hosts"]
        except (ValueError, KeyError, TypeError):
            raise ValueError(f"malformed egress label {text!r}") from None
        if not isinstance(mode, str) or not isinstance(hosts, list):
            raise ValueError(f"malformed egress label {text!r}")
        return cls(EgressMode(mode), tuple(str(h) for h in hosts))

"""What an update leaves as it is: :data:`KEEP`, a field the request did not send.

Below every service (sessions, agents and environments patch their resources with it), so that none
imports another only for the sentinel. ``None`` keeps its own meaning where a field can be
cleared: sent as ``null``, clear it.
"""

from __future__ import annotations

import enum

__all__ = ["KEEP", "Keep"]


class Keep(enum.Enum):
    """:data:`KEEP`: a field the request did not send (keep what is there), as opposed to
    ``None`` (sent as ``null``: clear it)."""

    KEEP = "keep"


KEEP = Keep.KEEP

"""How a control plane admits an edge, in words both sides agree on.

**Refusals.** A control plane that does not accept an edge's identity says why as
``edge authentication failed: REASON``: in the gRPC status details (``UNAUTHENTICATED``), in the
body of the WebSocket upgrade's HTTP 401, in the close reason of WebSocket close code 4001, and in
the message of the ``unauthenticated`` error frame that cuts a live tunnel when the edge is revoked.
Some reasons are final: retrying, or restarting the edge, cannot help; only enrolling again can
(:data:`FINAL_REASONS`). Others may pass (a clock that is behind); anything else
``UNAUTHENTICATED`` (a malformed or replayed proof-of-possession token) is retried too::

    refusal_message("revoked")              -> "edge authentication failed: revoked"
    final_refusal("... failed: revoked")    -> "revoked"
    final_refusal("... failed: not_yet_valid") -> None   (retry)

**Probes.** A hello whose capabilities include :data:`PROBE_CAPABILITY` (``outpost-edge doctor``)
is authenticated and answered with a Welcome like any other, but the control plane does not
register the connection: it routes no call to it and leaves the edge's real tunnel in place.
"""

from __future__ import annotations

import re

__all__ = ["FINAL_REASONS", "PROBE_CAPABILITY", "REFUSAL_PREFIX", "final_refusal", "refusal_message"]

REFUSAL_PREFIX = "edge authentication failed: "

#: Reasons after which only a new enrollment helps (the control plane's ``EdgeAuthReason``).
FINAL_REASONS = frozenset(
    {
        "revoked",  # an operator revoked the edge
        "unknown_edge",  # the control plane's store does not know it (removed, or another store)
        "certificate_mismatch",  # not the certificate the edge was last issued (an old copy)
        "expired",  # the client certificate expired: it cannot be renewed any more
        "untrusted_issuer",  # issued by another CA than this control plane's
        "wrong_purpose",  # not a client certificate
        "malformed_certificate",  # not an Outpost edge certificate
    }
)

PROBE_CAPABILITY = "probe"

_REASON = re.compile(re.escape(REFUSAL_PREFIX) + r"([a-z_]+)")


def refusal_message(reason: str) -> str:
    """The words a control plane refuses an edge with."""
    return f"{REFUSAL_PREFIX}{reason}"


def final_refusal(text: str) -> str | None:
    """The final reason named in a refusal's ``text`` (see the module docstring), else ``None``."""
    found = _REASON.search(text)
    if found is None or found.group(1) not in FINAL_REASONS:
        return None
    return found.group(1)

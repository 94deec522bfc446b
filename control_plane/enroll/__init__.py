"""Enrollment and identity: the control plane's CA, join tokens, and tunnel peer authentication.

* :mod:`.ca` — :class:`CertificateAuthority` (EC P-256) signing edge client and tunnel server certs.
* :mod:`.service` — :class:`EnrollmentService`: tokens, ``enroll``, ``authenticate_peer``, ``renew``,
  ``revoke``.

HTTP routes live in ``control_plane.api.enroll_routes``.
"""

from __future__ import annotations

from control_plane.enroll.ca import (
    EDGE_URI_PREFIX,
    ENVIRONMENT_URI_PREFIX,
    CAError,
    CertificateAuthority,
    edge_id_from_cert,
    environment_id_from_cert,
)
from control_plane.enroll.service import (
    EdgeAuthError,
    EdgeAuthReason,
    EnrolledEdge,
    EnrollmentService,
    IssuedToken,
    RenewedEdge,
    RevocationListener,
    hash_token,
    renewal_audience,
)

__all__ = [
    "EDGE_URI_PREFIX",
    "ENVIRONMENT_URI_PREFIX",
    "CAError",
    "CertificateAuthority",
    "EdgeAuthError",
    "EdgeAuthReason",
    "EnrolledEdge",
    "EnrollmentService",
    "IssuedToken",
    "RenewedEdge",
    "RevocationListener",
    "edge_id_from_cert",
    "environment_id_from_cert",
    "hash_token",
    "renewal_audience",
]

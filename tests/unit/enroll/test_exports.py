"""Pin the public surface of enrollment, and keep the edge side free of control-plane imports."""

from __future__ import annotations

import subprocess
import sys

import control_plane.api.enroll_routes
import control_plane.enroll
import edge_agent.enroll
import edge_agent.identity
import edge_agent.renew


def test_control_plane_enroll_exports() -> None:
    assert set(control_plane.enroll.__all__) == {
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
    }
    for name in control_plane.enroll.__all__:
        assert hasattr(control_plane.enroll, name), name


def test_route_exports() -> None:
    assert {"enroll_router", "operator_router", "EnrollRequest", "EnrollResponse"} <= set(
        control_plane.api.enroll_routes.__all__
    )


def test_edge_exports() -> None:
    assert set(edge_agent.identity.__all__) == {
        "EDGE_URI_PREFIX",
        "ENVIRONMENT_URI_PREFIX",
        "IDENTITY_DIR",
        "Identity",
        "IdentityError",
        "discard_pending_key",
        "generate_key_and_csr",
        "write_pending_key",
    }
    assert set(edge_agent.enroll.__all__) == {
        "EnrollmentError",
        "EnrollmentRefused",
        "EnrollmentUnreachable",
        "check_config_target",
        "config_is_empty",
        "normalize_fingerprint",
        "normalize_url",
        "register",
        "render_config",
        "write_config",
    }


def test_uri_prefixes_agree_across_the_split() -> None:
    assert edge_agent.identity.EDGE_URI_PREFIX == control_plane.enroll.EDGE_URI_PREFIX
    assert edge_agent.identity.ENVIRONMENT_URI_PREFIX == control_plane.enroll.ENVIRONMENT_URI_PREFIX
    assert edge_agent.renew.RENEW_AUDIENCE_PREFIX == control_plane.enroll.service.RENEW_AUDIENCE_PREFIX
    assert edge_agent.renew.RENEW_PATH == "/v1/edges/renew"


def test_edge_modules_import_without_control_plane_or_fastapi() -> None:
    code = (
        "import sys, edge_agent.enroll, edge_agent.identity, edge_agent.renew\n"
        "banned = {'control_plane', 'fastapi', 'anthropic'}\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in banned)\n"
        "assert not bad, bad\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)

"""TLS on the control plane's HTTP port (``http_tls``): the files uvicorn is given.

The server certificate is the operator's (``http_tls_cert_file`` / ``http_tls_key_file``, PEM) or,
by default, the one our CA issues for ``tls_hostnames`` / ``tls_ips`` (the gRPC tunnel's). Client
certificates are requested but optional (``CERT_OPTIONAL``): an edge presents its certificate and
is authenticated by it on the WebSocket tunnel (mTLS), SDK and API clients present none and use
their API key as before. A certificate that does not verify against our CA fails the handshake.

uvicorn reads certificates from files only, so ours are written here, each 0600, in a 0700
directory under the data dir::

    http-tls/
        server.key   the server key (only when issued by our CA)
        server.crt   the server certificate (likewise)
        client-ca.crt  our CA certificate: what client certificates must be issued by
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from control_plane.enroll.ca import CertificateAuthority
from outpost_wire.files import write_atomic

__all__ = ["HTTP_TLS_DIR", "HttpTls", "prepare_http_tls"]

HTTP_TLS_DIR = "http-tls"


@dataclass(frozen=True)
class HttpTls:
    """Where uvicorn finds the HTTP port's TLS material."""

    cert_file: Path
    key_file: Path
    client_ca_file: Path

    def uvicorn_options(self) -> dict[str, Any]:
        """Keyword arguments for ``uvicorn.Config``: TLS, client certificates optional."""
        return {
            "ssl_certfile": str(self.cert_file),
            "ssl_keyfile": str(self.key_file),
            "ssl_ca_certs": str(self.client_ca_file),
            "ssl_cert_reqs": ssl.CERT_OPTIONAL,
        }


def prepare_http_tls(
    ca: CertificateAuthority,
    data_dir: Path,
    *,
    hostnames: list[str],
    ips: list[str],
    cert_file: Path | None = None,
    key_file: Path | None = None,
) -> HttpTls:
    """Write the TLS files for the HTTP port and name them. With ``cert_file`` and ``key_file``
    (the operator's) those are used as they are; otherwise a server certificate from ``ca``.

    Blocking file I/O: call it at start-up."""
    directory = data_dir / HTTP_TLS_DIR
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    directory.chmod(0o700)
    client_ca = directory / "client-ca.crt"
    write_atomic(client_ca, ca.ca_cert_pem, 0o600)
    if cert_file is not None and key_file is not None:
        return HttpTls(cert_file=cert_file, key_file=key_file, client_ca_file=client_ca)
    key_pem, cert_pem = ca.issue_server_cert(hostnames, ips)
    write_atomic(directory / "server.key", key_pem, 0o600)
    write_atomic(directory / "server.crt", cert_pem, 0o600)
    return HttpTls(
        cert_file=directory / "server.crt", key_file=directory / "server.key", client_ca_file=client_ca
    )

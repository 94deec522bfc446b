"""The control plane's configuration: explicit objects, validated, units in names."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, model_validator

from control_plane.harness.config import HarnessConfig

__all__ = ["ControlPlaneConfig"]


class ControlPlaneConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    data_dir: Path = Path("/var/lib/outpost-control")
    store_url: str | None = None  # default: sqlite:///<data_dir>/outpost.db
    http_host: str = "127.0.0.1"
    http_port: int = Field(8080, ge=0, le=65535)
    tunnel_host: str = "127.0.0.1"
    tunnel_port: int = Field(7443, ge=0, le=65535)
    #: What edges dial (host:port). Default: tunnel_host:<bound port>.
    public_tunnel_address: str | None = None
    #: Names and addresses put in the tunnel server's certificate (edges verify one of them).
    tls_hostnames: tuple[str, ...] = ("localhost",)
    tls_ips: tuple[str, ...] = ("127.0.0.1",)
    heartbeat_interval_s: float = Field(3.0, gt=0)
    heartbeat_timeout_s: float = Field(9.0, gt=0)
    drain_grace_s: float = Field(30.0, ge=0)
    reconnect_grace_s: float = Field(30.0, ge=0)  # how long a call waits for its edge to come back
    edge_wait_s: float = Field(10.0, ge=0)  # how long a call waits for any edge of its environment
    max_frame_bytes: int = Field(4 * 1024 * 1024, ge=64 * 1024)
    #: The model endpoint (any Messages-API server). ``None``: ``$ANTHROPIC_BASE_URL`` or Anthropic's.
    model_base_url: str | None = None
    #: A file holding the model API key (e.g. a systemd credential); an empty file means no key. Wins
    #: over ``$ANTHROPIC_API_KEY``. ``None``: ``$ANTHROPIC_API_KEY_FILE``, else ``$ANTHROPIC_API_KEY``.
    model_api_key_file: Path | None = None
    #: The harnesses: leases, model retries, provisioning mode.
    harness: HarnessConfig = HarnessConfig()
    #: The vault's key-encryption key: 32 raw bytes, mode 0600. Default ``<data_dir>/vault.kek``,
    #: created (random) at first start if missing; a file named here must exist (a missing mounted
    #: secret must not silently become a new key). Keep it out of the database's backups.
    vault_key_file: Path | None = None
    #: Serve ``GET /metrics`` without an API key (for a scraper on a trusted network).
    metrics_public: bool = False
    #: Serve the HTTP port over TLS (``https://``, ``wss://``). Client certificates are requested but
    #: optional: edges present theirs (mTLS on the WebSocket tunnel), API clients need none.
    http_tls: bool = False
    #: The HTTP port's certificate chain and key (PEM), both or neither, with ``http_tls``. Default:
    #: a certificate from the control plane's CA for ``tls_hostnames`` / ``tls_ips``.
    http_tls_cert_file: Path | None = None
    http_tls_key_file: Path | None = None

    @model_validator(mode="after")
    def _check_http_tls(self) -> ControlPlaneConfig:
        if (self.http_tls_cert_file is None) != (self.http_tls_key_file is None):
            raise ValueError("http_tls_cert_file and http_tls_key_file go together")
        if self.http_tls_cert_file is not None and not self.http_tls:
            raise ValueError("http_tls_cert_file / http_tls_key_file need http_tls: true")
        return self

    @property
    def effective_store_url(self) -> str:
        return self.store_url or f"sqlite:///{self.data_dir / 'outpost.db'}"

    @property
    def effective_vault_key_file(self) -> Path:
        return self.vault_key_file or self.data_dir / "vault.kek"

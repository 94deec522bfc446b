"""The control plane's configuration: explicit objects, validated, units in names."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from control_plane.deployments.scheduler import DeploymentsConfig
from control_plane.dreams.config import DreamsConfig
from control_plane.files import DEFAULT_MAX_FILE_BYTES
from control_plane.harness.config import HarnessConfig
from control_plane.retention import RetentionConfig
from control_plane.skills.archive import DEFAULT_MAX_FILE_BYTES as DEFAULT_MAX_SKILL_FILE_BYTES
from control_plane.skills.archive import DEFAULT_MAX_FILES
from control_plane.skills.archive import DEFAULT_MAX_TOTAL_BYTES as DEFAULT_MAX_SKILL_BYTES
from control_plane.store.options import StoreOptions
from control_plane.webhooks.config import WebhookConfig
from outpost_wire.addresses import AddressPolicy

__all__ = ["ControlPlaneConfig"]


class ControlPlaneConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    data_dir: Path = Field(
        Path("/var/lib/outpost-control"),
        description="The control plane's state: the SQLite store, the CA (`ca/`), the admin API key, the "
        "vault's key files, uploaded files' bytes (`blobs/`). Several replicas on several hosts share it "
        "(docs/scale-out.md).",
    )
    store_url: str | None = Field(
        None,
        description="The store: `sqlite:///relative.db` or `sqlite:////absolute.db` (one process), "
        "`postgresql://user@host:port/database` (several replicas; see docs/scale-out.md), `memory://` for "
        "tests; `null`: `<data_dir>/outpost.db`. Keep a PostgreSQL password in `store_password_file`, not "
        "in the URL.",
    )
    store_password_file: Path | None = Field(
        None,
        description="PostgreSQL: a file holding the store's password (one line, mode 0600; e.g. a systemd "
        "credential), read for every new connection. `null`: the URL's, else libpq's `PGPASSWORD` / "
        "`~/.pgpass`.",
    )
    store_pool_min: int = Field(2, ge=1, description="PostgreSQL: connections the pool keeps open.")
    store_pool_max: int = Field(
        10,
        ge=1,
        description="PostgreSQL: connections the pool opens at most (per process; plus one for the feed of "
        "appends, which listens on a connection of its own).",
    )
    store_ssl_mode: Literal["disable", "prefer", "require", "verify-ca", "verify-full"] | None = Field(
        None,
        description="PostgreSQL: TLS to the server, as libpq's `sslmode`. `null`: the URL's `sslmode`, else "
        "`prefer`; with `store_ssl_root_cert_file`, `verify-full`.",
    )
    store_ssl_root_cert_file: Path | None = Field(
        None,
        description="PostgreSQL: the CA certificate (PEM) that signs the server's; the server is then "
        "verified (its name too, unless `store_ssl_mode` is `verify-ca`).",
    )
    store_schema: str = Field(
        "public",
        min_length=1,
        max_length=48,
        description="PostgreSQL: the schema holding the store's tables (several control planes can share a "
        "database, each in its own schema).",
    )
    http_host: str = Field(
        "127.0.0.1",
        description="Listen address of the HTTP API (and of the WebSocket tunnel).",
    )
    http_port: int = Field(8080, ge=0, le=65535, description="Port of the HTTP API; 0 picks a free one.")
    tunnel_host: str = Field("127.0.0.1", description="Listen address of the gRPC tunnel.")
    tunnel_port: int = Field(7443, ge=0, le=65535, description="Port of the gRPC tunnel; 0 picks a free one.")
    public_tunnel_address: str | None = Field(
        None,
        description="What edges are told to dial (`host:port`); `null`: `tunnel_host` and the bound port.",
    )
    tls_hostnames: tuple[str, ...] = Field(
        ("localhost",),
        description="DNS names in the server certificate of the tunnel (and of the HTTP port with "
        "`http_tls`); edges verify one.",
    )
    tls_ips: tuple[str, ...] = Field(("127.0.0.1",), description="IP addresses in that certificate.")
    heartbeat_interval_s: float = Field(
        3.0,
        gt=0,
        description="Send an edge a heartbeat when nothing else was sent to it for this long.",
    )
    heartbeat_timeout_s: float = Field(
        9.0,
        gt=0,
        description="Drop an edge's tunnel after this long without a frame from it.",
    )
    drain_grace_s: float = Field(
        30.0,
        ge=0,
        description="On SIGTERM, how long calls in flight may finish after the edges are told to drain.",
    )
    reconnect_grace_s: float = Field(
        30.0,
        ge=0,
        description="How long a tool call waits for its sandbox's edge to come back before the session moves "
        "to another edge.",
    )
    edge_recheck_interval_s: float = Field(
        2.0,
        gt=0,
        description="How often live tunnels are checked again against the store: an edge revoked through "
        "any control-plane process on the store, or whose certificate expired, is cut within this time.",
    )
    edge_wait_s: float = Field(
        30.0,
        ge=0,
        description="How long a tool call waits for an edge of its environment to connect when none is (the "
        "session is told at once, with a `session.error`); then the call fails with a tool error. `exec` "
        "does not wait: it answers 503 at once.",
    )
    max_frame_bytes: int = Field(
        4 * 1024 * 1024,
        ge=64 * 1024,
        description="The largest tunnel frame; larger tool results travel in chunks.",
    )
    model_base_url: str | None = Field(
        None,
        description="The model endpoint (any Messages-API server); `null`: `$ANTHROPIC_BASE_URL`, else "
        "Anthropic's.",
    )
    model_api_key_file: Path | None = Field(
        None,
        description="A file holding the model API key (e.g. a systemd credential; an empty file: no key); it "
        "wins over `$ANTHROPIC_API_KEY`. `null`: `$ANTHROPIC_API_KEY_FILE`, else `$ANTHROPIC_API_KEY`.",
    )
    #: The harnesses: leases, model retries, provisioning mode.
    harness: HarnessConfig = HarnessConfig()
    #: What the store forgets, and when: archived sessions, spent enrollment tokens.
    retention: RetentionConfig = RetentionConfig()
    #: Scheduled runs of deployments: how often to check, when to pause a failing one.
    deployments: DeploymentsConfig = DeploymentsConfig()
    #: Dreams: claims, model requests, input bounds (docs/dreams.md).
    dreams: DreamsConfig = DreamsConfig()
    #: Webhook deliveries: timeouts, retries, what is kept (docs/webhooks.md).
    webhooks: WebhookConfig = WebhookConfig()
    vault_key_file: Path | None = Field(
        None,
        description="The vault's key-encryption key: 32 raw bytes, mode 0600. `null`: "
        "`<data_dir>/vault.kek`, made at first start; a file named here must exist (a missing mounted "
        "secret must not become a new key). Keep it out of the database's backups.",
    )
    metrics_public: bool = Field(
        False,
        description="Serve `GET /metrics` without an API key (for a scraper on a trusted network).",
    )
    api_key_cache_ttl_s: float = Field(
        5.0,
        ge=0,
        description="How long a process trusts an API key's record it read from the store: a key revoked "
        "through this process's API is refused at once, one revoked elsewhere (another process on the "
        "store, `api-keys rotate-admin`) within this time. 0: read the store on every request.",
    )
    work_lease_ttl_s: int = Field(
        300,
        ge=1,
        le=3600,
        description="A work item's lease in a worker-run environment (docs/work-queue.md): a worker that "
        "sends no heartbeat for this long loses the item, which is queued again. 300 is what the SDK's "
        "worker assumes (it heartbeats every 30 s at most).",
    )
    gc_thresholds: tuple[int, int, int] | None = Field(
        (50_000, 20, 100),
        description="The Python garbage collector's generation thresholds for `serve` (`gc.set_threshold`); "
        "what is alive once the control plane is up is frozen out of collections first. Python's own "
        "(700, 10, 10) cost a quarter of the CPU of a busy control plane. `null`: Python's own.",
    )
    http_tls: bool = Field(
        False,
        description="Serve the HTTP port over TLS (`https://`, `wss://`). Client certificates are requested "
        "but optional: edges present theirs (mTLS on the WebSocket tunnel), API clients need none.",
    )
    http_tls_cert_file: Path | None = Field(
        None,
        description="The HTTP port's certificate chain (PEM), with `http_tls_key_file` and `http_tls`; "
        "reloaded from its file while the control plane runs. `null`: a certificate from the control "
        "plane's CA for `tls_hostnames` / `tls_ips`, replaced 30 days before it expires.",
    )
    http_tls_key_file: Path | None = Field(None, description="The private key (PEM) of `http_tls_cert_file`.")
    http_limit_concurrency: int = Field(
        4096,
        ge=1,
        description="Connections (and requests in progress) the HTTP port serves at once; past it a new "
        "request is answered 503 at once. Keep it well under the open-file limit (`LimitNOFILE`).",
    )
    http_max_body_bytes: int = Field(
        1024 * 1024,
        ge=1024,
        description="The largest request body the API reads, for every route but those carrying content "
        "(413 past it, counted as it streams in).",
    )
    http_max_content_body_bytes: int = Field(
        32 * 1024 * 1024,
        ge=1024,
        description="The largest request body of the routes that carry content (a session's events, a new "
        "session's initial events: images and documents; `exec`).",
    )
    max_file_bytes: int = Field(
        DEFAULT_MAX_FILE_BYTES,
        ge=1024,
        description="The largest file `POST /v1/files` takes (413 `request_too_large` past it, found as the "
        "upload streams to `<data_dir>/blobs`, never held in memory); the hosted API's cap, 500 MiB, by "
        "default.",
    )
    skill_max_bytes: int = Field(
        DEFAULT_MAX_SKILL_BYTES,
        ge=1024,
        description="The largest skill upload (`POST /v1/skills`, `.../versions`): all its files together, "
        "uncompressed (413 `request_too_large` past it; an uploaded archive counts inflated); the hosted "
        "API's cap, 8 MiB, by default.",
    )
    skill_max_file_bytes: int = Field(
        DEFAULT_MAX_SKILL_FILE_BYTES,
        ge=1024,
        description="The largest single file of a skill upload (413 `request_too_large` past it).",
    )
    skill_max_files: int = Field(
        DEFAULT_MAX_FILES,
        ge=1,
        le=100_000,
        description="The most files a skill upload may hold (400 past it).",
    )
    http_body_timeout_s: float = Field(
        30.0,
        gt=0,
        description="A request body that stops arriving for this long is answered 408 (slow-body clients).",
    )
    http_header_timeout_s: float = Field(
        10.0,
        gt=0,
        description="A request's head (request line and headers) must arrive within this long of the "
        "connection opening, or of its first byte on a kept-alive connection; else the connection is "
        "closed (slow-header clients).",
    )
    http_timeout_keep_alive_s: int = Field(
        5,
        ge=1,
        description="An idle kept-alive HTTP connection is closed after this long without a new request.",
    )
    stream_max_per_key: int = Field(
        200,
        ge=1,
        description="Live event streams (`/v1/sessions/{id}/events/stream`) one API key may hold open on "
        "this process; past it, 429 `rate_limit_error`.",
    )
    stream_max_total: int = Field(
        2000,
        ge=1,
        description="Live event streams this process holds open, all keys together; past it, 503.",
    )
    stream_ping_interval_s: float = Field(
        15.0,
        gt=0,
        description="A keep-alive `ping` frame goes down an event stream idle for this long (it reads "
        "nothing from the store).",
    )
    outbound_allow_networks: tuple[str, ...] = Field(
        (),
        description="Networks (CIDR, e.g. `10.20.0.0/16`) the control plane may dial on a user's behalf "
        "although they are not public: OAuth token endpoints of vault credentials and agents' MCP servers. "
        "By default loopback, link-local and metadata, private, CGNAT, unique-local, multicast and reserved "
        "addresses are refused (see docs/security.md, Outbound requests).",
    )
    tunnel_base_domain: str = Field(
        "tunnels.outpost.invalid",
        min_length=3,
        max_length=200,
        pattern=r"^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)(\.[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?)+$",
        description="MCP tunnels: every tunnel's `domain` is `<random label>.<this>`, and an agent's MCP "
        "server URL `https://<server>.<tunnel domain>/` goes through an edge serving that tunnel, never to "
        "DNS. The default is under `.invalid` (RFC 6761), which never resolves publicly; a name of your own "
        "works too, as long as nothing else should be reached under it (docs/mcp-tunnels.md).",
    )
    max_reassembly_bytes: int = Field(
        256 * 1024 * 1024,
        ge=64 * 1024 * 1024,
        description="Tunnel: partial tool results held for one edge connection, all requests together "
        "(one result is at most 64 MiB); past it the connection is closed with `FRAME_TOO_LARGE`. Chunks "
        "of results no request on that edge awaits are never buffered.",
    )

    @field_validator("outbound_allow_networks")
    @classmethod
    def _check_networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        AddressPolicy.parse(value)  # ValueError names a bad entry
        return value

    @field_validator("gc_thresholds")
    @classmethod
    def _check_gc(cls, value: tuple[int, int, int] | None) -> tuple[int, int, int] | None:
        if value is not None and min(value) < 1:
            raise ValueError("every threshold must be at least 1 (null keeps Python's own)")
        return value

    @field_validator("store_url")
    @classmethod
    def _check_store_url(cls, url: str | None) -> str | None:
        if url is None:
            return None
        scheme = url.partition("://")[0]
        if scheme in ("postgres", "postgresql"):
            return url
        if url != "memory://" and not (url.startswith("sqlite:///") and len(url) > len("sqlite:///")):
            raise ValueError(
                "expected sqlite:///path/to/file.db or postgresql://user@host:port/database "
                "(or unset: <data_dir>/outpost.db)"
            )
        return url

    @model_validator(mode="after")
    def _check_store(self) -> ControlPlaneConfig:
        if self.store_pool_min > self.store_pool_max:
            raise ValueError("store_pool_min must not exceed store_pool_max")
        if self.store_ssl_mode == "disable" and self.store_ssl_root_cert_file is not None:
            raise ValueError("store_ssl_root_cert_file needs TLS: store_ssl_mode is disable")
        return self

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
    def store_options(self) -> StoreOptions:
        """What ``open_store`` needs beyond the URL."""
        return StoreOptions(
            pool_min=self.store_pool_min,
            pool_max=self.store_pool_max,
            password_file=self.store_password_file,
            ssl_mode=self.store_ssl_mode,
            ssl_root_cert_file=self.store_ssl_root_cert_file,
            schema=self.store_schema,
        )

    @property
    def effective_vault_key_file(self) -> Path:
        return self.vault_key_file or self.data_dir / "vault.kek"

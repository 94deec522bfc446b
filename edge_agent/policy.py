"""The customer's local policy: what the control plane may ask this edge for.

The policy is read from the edge's own files; the control plane can read its digest (sent in
hello) but has no way to change it. A request outside the policy is refused with
:class:`~edge_agent.errors.PolicyDenied`, whose message names the rule.

The ``egress`` section caps what sandboxes may reach (see :mod:`edge_agent.egress`)::

    egress:
      max_mode: allowlist          # none | allowlist | unrestricted (default: allowlist)
      allowed_hosts:               # what an allowlist may contain (default: nothing)
        - pypi.org
        - "*.pythonhosted.org"
        - github.com:443

A requested entry must be covered by one of ``allowed_hosts`` (``*.example.com`` covers
``api.example.com`` and ``*.api.example.com``; an entry without a port covers every port).

The ``repositories`` section says which session repositories the edge clones and relays (on its
own host, outside the egress proxy): allowed hosts, ``http``, and the non-public networks they may
resolve into; by default none (see :mod:`edge_agent.git.policy`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from edge_agent.egress import Allowlist, EgressMode, EgressSpec
from edge_agent.errors import PolicyDenied
from edge_agent.git.policy import RepositoryPolicy
from edge_agent.mcp.config import McpPolicy
from edge_agent.sandbox import SandboxLimits

__all__ = ["EgressPolicy", "ImagePolicy", "LimitsPolicy", "Policy"]

_MIB = 1024 * 1024


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ImagePolicy(_Strict):
    default: str = Field(
        "outpost-sandbox:1",
        description="The image of a sandbox whose request names none (must be in `images.allowed`).",
    )
    allowed: tuple[str, ...] = Field(("outpost-sandbox:1",), description="The only images a sandbox may use.")

    @model_validator(mode="after")
    def _default_allowed(self) -> ImagePolicy:
        if self.default not in self.allowed:
            raise ValueError(f"images.default {self.default!r} must be listed in images.allowed")
        return self


class LimitsPolicy(_Strict):
    max_cpus: float = Field(2.0, gt=0, description="CPU ceiling of one sandbox.")
    max_memory_mb: int = Field(2048, gt=16, description="Memory ceiling of one sandbox, in MiB.")
    max_pids: int = Field(512, gt=8, description="Process ceiling of one sandbox.")
    default_cpus: float = Field(1.0, gt=0, description="CPUs of a sandbox whose request names none.")
    default_memory_mb: int = Field(
        1024,
        gt=16,
        description="Memory of a sandbox whose request names none, in MiB.",
    )
    default_pids: int = Field(256, gt=8, description="Processes of a sandbox whose request names none.")
    max_workspace_mb: int = Field(
        10240,
        ge=0,
        description="Size quota of one sandbox's `/workspace`, in MiB (0 = none). A soft quota: the "
        "`write` and `edit` tools refuse to pass it, and a `bash` call that ends with the workspace "
        "over it is reported as an error; see docs/security.md.",
    )

    @model_validator(mode="after")
    def _defaults_within_max(self) -> LimitsPolicy:
        if self.default_cpus > self.max_cpus:
            raise ValueError("limits.default_cpus exceeds limits.max_cpus")
        if self.default_memory_mb > self.max_memory_mb:
            raise ValueError("limits.default_memory_mb exceeds limits.max_memory_mb")
        if self.default_pids > self.max_pids:
            raise ValueError("limits.default_pids exceeds limits.max_pids")
        return self


class EgressPolicy(_Strict):
    max_mode: EgressMode = Field(
        EgressMode.ALLOWLIST,
        description="The most network an environment may ask for.",
    )
    allowed_hosts: tuple[str, ...] = Field(
        (),
        description="The hosts any allowlist may contain (`host`, `*.domain`, IPv4, optional `:port`); each "
        "requested entry must be covered by one.",
    )

    @field_validator("allowed_hosts")
    @classmethod
    def _canonical(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        # Canonical (normalised, deduplicated, sorted): equivalent policies share a digest.
        return Allowlist.parse(value).entries()

    def check(self, mode: str, allowed_hosts: Sequence[str]) -> EgressSpec:
        """The egress a request may have, or PolicyDenied naming the rule. Hosts requested with a
        mode other than ``allowlist`` are ignored."""
        try:
            wanted = EgressMode(mode or EgressMode.NONE)
        except ValueError:
            raise PolicyDenied("egress.mode", f"unknown egress mode {mode!r}") from None
        if wanted.exceeds(self.max_mode):
            raise PolicyDenied(
                "egress.max_mode",
                f"egress mode {wanted.value!r} requested, the policy allows at most {self.max_mode.value!r}",
            )
        if wanted is not EgressMode.ALLOWLIST:
            return EgressSpec(wanted)
        try:
            requested = Allowlist.parse(allowed_hosts)
        except ValueError as exc:
            raise PolicyDenied("egress.allowed_hosts", f"invalid allowlist entry: {exc}") from None
        uncovered = Allowlist.parse(self.allowed_hosts).uncovered(requested)
        if uncovered:
            names = ", ".join(repr(str(entry)) for entry in uncovered)
            raise PolicyDenied("egress.allowed_hosts", f"host(s) {names} not allowed by this edge's policy")
        return EgressSpec(wanted, requested.entries())


class Policy(_Strict):
    images: ImagePolicy = ImagePolicy()
    limits: LimitsPolicy = LimitsPolicy()
    egress: EgressPolicy = EgressPolicy()
    max_sandboxes: int = Field(8, ge=1, le=1024, description="Sandboxes this edge runs at once.")
    #: Which private MCP servers (and which of their tools) sessions may use. Default: none.
    mcp: McpPolicy = McpPolicy()
    #: Which repositories the edge may clone and relay (hosts, http, networks). Default: none.
    repositories: RepositoryPolicy = RepositoryPolicy()

    def digest(self) -> str:
        """sha256 of the canonical JSON form; reported to the control plane in hello."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()

    def resolve(
        self,
        *,
        image: str = "",
        cpus: float = 0.0,
        memory_bytes: int = 0,
        pids: int = 0,
        egress_mode: str = "",
        allowed_hosts: Sequence[str] = (),
    ) -> SandboxLimits:
        """Turn a provision request (0 / "" = default; egress ``none``) into limits, or refuse it
        naming the rule."""
        image = image or self.images.default
        if image not in self.images.allowed:
            raise PolicyDenied("images.allowed", f"image {image!r} is not allowed by this edge's policy")
        cpus = cpus or self.limits.default_cpus
        if cpus > self.limits.max_cpus:
            raise PolicyDenied(
                "limits.max_cpus", f"{cpus} CPUs requested, the policy allows {self.limits.max_cpus}"
            )
        memory = memory_bytes or self.limits.default_memory_mb * _MIB
        if memory > self.limits.max_memory_mb * _MIB:
            raise PolicyDenied(
                "limits.max_memory_mb",
                f"{memory // _MIB} MiB requested, the policy allows {self.limits.max_memory_mb} MiB",
            )
        pids = pids or self.limits.default_pids
        if pids > self.limits.max_pids:
            raise PolicyDenied(
                "limits.max_pids", f"{pids} pids requested, the policy allows {self.limits.max_pids}"
            )
        egress = self.egress.check(egress_mode, allowed_hosts)
        return SandboxLimits(image=image, cpus=cpus, memory_bytes=memory, pids=pids, egress=egress)

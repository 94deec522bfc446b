"""Session sandboxes: local Docker containers that run the ``agent_toolset_20260401`` tools.

The lead object is :class:`SandboxManager`; :class:`DockerRuntime` is the single seam to the
Docker SDK; ``sandboxd`` (a stdlib-only program sent into each container at start) runs the tools.
"""

from __future__ import annotations

from .channel import DaemonChannel
from .manager import ReconcileReport, SandboxInfo, SandboxManager
from .runtime import DockerRuntime
from .spec import SandboxLimits, SandboxSpec

__all__ = [
    "DaemonChannel",
    "DockerRuntime",
    "ReconcileReport",
    "SandboxInfo",
    "SandboxLimits",
    "SandboxManager",
    "SandboxSpec",
]

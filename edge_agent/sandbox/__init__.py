"""Session sandboxes: local Docker containers that run the ``agent_toolset_20260401`` tools.

The lead object is :class:`SandboxManager`; it drives the :class:`ContainerRuntime` it is given,
which :class:`DockerRuntime` implements as the single seam to the Docker SDK; ``sandboxd`` (a
stdlib-only program sent into each container at start) runs the tools. A tool call is a
:class:`ToolCall`, checked once at the edge's door, with one deadline.
"""

from __future__ import annotations

from .channel import DaemonChannel
from .container_runtime import ContainerRuntime
from .docker_runtime import DockerRuntime
from .manager import ReconcileReport, SandboxInfo, SandboxManager
from .spec import SandboxLimits, SandboxSpec
from .tool_call import ToolCall

__all__ = [
    "ContainerRuntime",
    "DaemonChannel",
    "DockerRuntime",
    "ReconcileReport",
    "SandboxInfo",
    "SandboxLimits",
    "SandboxManager",
    "SandboxSpec",
    "ToolCall",
]

"""Shared constants and helpers of the Docker sandbox tests."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable

from edge_agent.sandbox import SandboxLimits, SandboxManager

IMAGE = "outpost-sandbox:1"
EDGE_PREFIX = f"test-sbx-{uuid.uuid4().hex[:8]}"
LIMITS = SandboxLimits(image=IMAGE, cpus=1.0, memory_bytes=512 * 1024 * 1024, pids=256)

# make_manager(**SandboxManager kwargs) -> a started manager for the test's edge id
ManagerFactory = Callable[..., Awaitable[SandboxManager]]

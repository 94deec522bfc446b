"""The hands, driven by an operator: one tool call run by hand on an edge of an environment,
exactly as the harness would run it, a sandbox destroyed, the edges this process holds.
:class:`~control_plane.sandboxes.service.SandboxService` holds the rules; the HTTP face is
``control_plane.api.operations``."""

from __future__ import annotations

from control_plane.sandboxes.service import ExecCall, SandboxGateway, SandboxService

__all__ = ["ExecCall", "SandboxGateway", "SandboxService"]

"""Deployments: an agent bound to an environment, initial events and an optional cron schedule,
run on demand or on schedule (docs/deployments.md)."""

from control_plane.deployments.scheduler import DeploymentScheduler, DeploymentsConfig
from control_plane.deployments.service import (
    DEPLOYMENT_KIND,
    RUN_KIND,
    DeploymentService,
    RunListener,
    no_listener,
)

__all__ = [
    "DEPLOYMENT_KIND",
    "RUN_KIND",
    "DeploymentScheduler",
    "DeploymentService",
    "DeploymentsConfig",
    "RunListener",
    "no_listener",
]

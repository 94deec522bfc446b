"""Webhooks: endpoints (an Outpost extension), the outbox, the deliverer and the session feed.

See docs/webhooks.md. ``WebhookOutbox.emit`` is the call other parts make when something happened.
"""

from control_plane.webhooks.commands import CreateEndpoint, EndpointView, UpdateEndpoint, Viewer
from control_plane.webhooks.config import WebhookConfig
from control_plane.webhooks.deliverer import WebhookDeliverer
from control_plane.webhooks.envelope import EVENT_TYPES, PRODUCED_TYPES
from control_plane.webhooks.outbox import DELIVERY_KIND, WebhookOutbox
from control_plane.webhooks.service import ENDPOINT_KIND, EndpointSecrets, EndpointService
from control_plane.webhooks.session_feed import (
    DeploymentRunWebhooks,
    RefreshFailedWebhooks,
    SessionLifecycleWebhooks,
    SessionWebhookFeed,
)

__all__ = [
    "DELIVERY_KIND",
    "ENDPOINT_KIND",
    "EVENT_TYPES",
    "PRODUCED_TYPES",
    "CreateEndpoint",
    "DeploymentRunWebhooks",
    "EndpointSecrets",
    "EndpointService",
    "EndpointView",
    "RefreshFailedWebhooks",
    "SessionLifecycleWebhooks",
    "SessionWebhookFeed",
    "UpdateEndpoint",
    "Viewer",
    "WebhookConfig",
    "WebhookDeliverer",
    "WebhookOutbox",
]

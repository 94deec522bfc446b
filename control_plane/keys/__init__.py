"""API keys as a resource: :class:`~control_plane.keys.service.ApiKeyService` holds the rules
(scopes, environment limits, expiry, the last admin key); ``control_plane.api.api_keys`` is its
HTTP face. Hashing, generation and the key record live below, in :mod:`control_plane.access_keys`."""

from __future__ import annotations

from control_plane.keys.service import ApiKeyService, CreateApiKey, key_status

__all__ = ["ApiKeyService", "CreateApiKey", "key_status"]

"""The public exports of the API, sessions, agents and environments packages are pinned."""

from __future__ import annotations

import importlib

import pytest

import control_plane.sessions as sessions

EXPECTED = {
    "control_plane.api.agents": {"agents_router"},
    "control_plane.agents": {"AgentService"},
    "control_plane.agents.service": {"AgentService", "new_agent_id"},
    "control_plane.api.app": {
        "ApiConfig",
        "ApiServices",
        "NullRunner",
        "RequestIdMiddleware",
        "create_app",
        "deployment_service",
    },
    "control_plane.api.api_keys": {
        "MAX_ENVIRONMENTS",
        "MAX_TTL_S",
        "ApiKeyCreate",
        "api_key_json",
        "api_keys_router",
    },
    "control_plane.keys": {"ApiKeyService", "CreateApiKey", "key_status"},
    "control_plane.keys.service": {"ApiKeyService", "CreateApiKey", "KeyStore", "key_status"},
    "control_plane.api.operations": {"operations_router"},
    "control_plane.sandboxes": {"ExecCall", "SandboxGateway", "SandboxService"},
    "control_plane.api.caller": {
        "READ_METHODS",
        "Caller",
        "CallerDep",
        "KeyScope",
        "current_caller",
        "require_admin_key",
        "unscoped_writes",
    },
    "control_plane.api.body_limit": {
        "DEFAULT_BODY_TIMEOUT_S",
        "DEFAULT_MAX_BODY_BYTES",
        "DEFAULT_MAX_CONTENT_BODY_BYTES",
        "BodyLimitMiddleware",
        "drain_some",
        "is_content_route",
        "is_upload_route",
    },
    "control_plane.api.file_routes": {"file_json", "files_router"},
    "control_plane.api.multipart": {
        "MULTIPART_OVERHEAD_BYTES",
        "MultipartUpload",
        "PartHeaders",
        "decode_text",
        "multipart_boundary",
        "parse_errors",
    },
    "control_plane.files": {
        "DEFAULT_MAX_FILE_BYTES",
        "FilePage",
        "FileQuery",
        "FileService",
        "Upload",
        "UploadFields",
    },
    "control_plane.blobs": {"BlobInfo", "BlobStore", "FilesystemBlobStore"},
    "control_plane.api.environments": {"environment_json", "environments_router"},
    "control_plane.environments": {"EnvironmentService", "Viewer", "get_environment"},
    "control_plane.environments.service": {
        "SELF_HOSTED",
        "EnvironmentService",
        "EnvironmentStore",
        "get_environment",
        "new_environment_id",
    },
    "control_plane.api.session_events": {"events_router"},
    "control_plane.api.dreams": {"dream_json", "dreams_router"},
    "control_plane.dreams": {
        "CreateDream",
        "DreamPage",
        "DreamQuery",
        "DreamScheduler",
        "DreamService",
        "DreamWaker",
        "DreamsConfig",
        "NullDreamWaker",
    },
    "control_plane.api.health": {"ReadinessCheck", "health_router"},
    "control_plane.api.session_resources": {"session_resources_router"},
    "control_plane.api.sessions": {"sessions_router", "viewer_of"},
    "control_plane.api.streaming": {"PING_FRAME", "EventStream", "SseResponse", "StreamSlots", "sse_frame"},
    "control_plane.sessions.service": {
        "RunnerCalls",
        "SessionHooks",
        "SessionService",
        "SessionStore",
        "WorkQueueing",
        "new_session_id",
    },
    "control_plane.sessions.log": {
        "ANSWER_ID_FIELDS",
        "StatusView",
        "append_and_publish",
        "check_answers",
        "open_tool_uses",
        "pending_answers",
        "read_active_ms",
        "read_status",
        "read_usage",
        "zero_usage",
    },
}


@pytest.mark.parametrize("module", sorted(EXPECTED))
def test_module_exports(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == EXPECTED[module]
    for name in mod.__all__:
        assert hasattr(mod, name)


def test_sessions_package_exports() -> None:
    assert set(sessions.__all__) == {
        "DELTA_EVENT_TYPES",
        "EVENT_TYPES",
        "INPUT_EVENT_TYPES",
        "STATUS_BY_EVENT_TYPE",
        "STREAM_ONLY_TYPES",
        "SessionStatus",
        "StatusView",
        "append_and_publish",
        "event_json",
        "new_event_id",
        "parse_input_events",
        "read_status",
        "read_usage",
    }
    for name in sessions.__all__:
        assert hasattr(sessions, name)

"""outpost_wire.metrics: each daemon's own prometheus_client registry, with process and build info."""

from __future__ import annotations

from prometheus_client import Counter
from prometheus_client.parser import text_string_to_metric_families

import outpost_wire.metrics as metrics
from outpost_wire.metrics import CONTENT_TYPE, daemon_registry, exposition
from outpost_wire.version import SOFTWARE_VERSION


def test_exports() -> None:
    assert set(metrics.__all__) == {"CONTENT_TYPE", "DEFAULT_BUCKETS", "daemon_registry", "exposition"}
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_a_daemon_registry_has_process_python_and_build_info() -> None:
    body, content_type = exposition(daemon_registry("outpost_test_build"))
    assert content_type == CONTENT_TYPE
    families = {f.name: f for f in text_string_to_metric_families(body.decode())}
    assert {
        "process_cpu_seconds",
        "process_resident_memory_bytes",
        "process_open_fds",
        "process_start_time_seconds",
        "python_info",
        "outpost_test_build_info",
    } <= set(families)
    (build,) = families["outpost_test_build_info"].samples
    assert build.labels == {"version": SOFTWARE_VERSION} and build.value == 1
    assert families["process_resident_memory_bytes"].samples[0].value > 0


def test_registries_are_separate() -> None:
    """Two daemons in one process (as in the tests) register the same names without colliding."""
    a, b = daemon_registry("outpost_test_build"), daemon_registry("outpost_test_build")
    Counter("outpost_things", "Things.", registry=a).inc()
    Counter("outpost_things", "Things.", registry=b)
    assert a.get_sample_value("outpost_things_total") == 1
    assert b.get_sample_value("outpost_things_total") == 0


def test_openmetrics_when_asked() -> None:
    body, content_type = exposition(daemon_registry("outpost_test_build"), "application/openmetrics-text")
    assert content_type.startswith("application/openmetrics-text")
    assert body.endswith(b"# EOF\n")

"""The Prometheus text format of outpost_wire.metrics."""

from __future__ import annotations

import math

import pytest

import outpost_wire.metrics as metrics
from outpost_wire.metrics import CONTENT_TYPE, Registry, escape_label_value, format_value


def test_exports() -> None:
    assert set(metrics.__all__) == {
        "CONTENT_TYPE",
        "DEFAULT_BUCKETS",
        "Counter",
        "Gauge",
        "Histogram",
        "Registry",
        "escape_label_value",
        "format_value",
    }
    assert CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"


def test_counter_and_gauge_render_with_help_and_type() -> None:
    r = Registry()
    calls = r.counter("calls_total", "Calls made.", ("tool", "outcome"))
    up = r.gauge("up", "1 when up.")
    calls.labels("bash", "ok").inc()
    calls.labels("bash", "ok").inc(2)
    calls.labels("read", "tool_error").inc()
    up.set(1)
    assert r.render() == (
        "# HELP calls_total Calls made.\n"
        "# TYPE calls_total counter\n"
        'calls_total{tool="bash",outcome="ok"} 3\n'
        'calls_total{tool="read",outcome="tool_error"} 1\n'
        "# HELP up 1 when up.\n"
        "# TYPE up gauge\n"
        "up 1\n"
    )
    assert calls.value("bash", "ok") == 3


def test_label_values_and_help_are_escaped() -> None:
    r = Registry()
    c = r.counter("x_total", 'Help with \\ and\nnewline "quoted".', ("path",))
    c.labels('a"b\\c\nd').inc()
    text = r.render()
    assert '# HELP x_total Help with \\\\ and\\nnewline "quoted".' in text
    assert 'x_total{path="a\\"b\\\\c\\nd"} 1' in text
    assert escape_label_value('"') == '\\"'


def test_histogram_buckets_are_cumulative_with_inf_sum_and_count() -> None:
    r = Registry()
    h = r.histogram("latency_seconds", "Latency.", ("tool",), buckets=(0.1, 1.0, 10.0))
    for v in (0.05, 0.1, 0.5, 5.0, 50.0):
        h.labels("bash").observe(v)
    lines = [line for line in r.render().splitlines() if not line.startswith("#")]
    assert lines == [
        'latency_seconds_bucket{tool="bash",le="0.1"} 2',
        'latency_seconds_bucket{tool="bash",le="1"} 3',
        'latency_seconds_bucket{tool="bash",le="10"} 4',
        'latency_seconds_bucket{tool="bash",le="+Inf"} 5',
        'latency_seconds_sum{tool="bash"} 55.65',
        'latency_seconds_count{tool="bash"} 5',
    ]
    assert "# TYPE latency_seconds histogram" in r.render()


def test_function_families_read_at_render_time_and_a_broken_one_is_skipped() -> None:
    r = Registry()
    state = {"n": 1.0}
    r.gauge_func("live", "Live things.", ("kind",), lambda: {("a",): state["n"]})
    r.counter_func("broken_total", "Raises.", (), lambda: 1 / 0)  # type: ignore[arg-type,return-value]
    assert 'live{kind="a"} 1' in r.render()
    state["n"] = 2.5
    text = r.render()
    assert 'live{kind="a"} 2.5' in text
    assert "# TYPE broken_total counter" in text


def test_invalid_names_and_misuse_are_refused() -> None:
    r = Registry()
    with pytest.raises(ValueError):
        r.counter("bad-name", "x")
    with pytest.raises(ValueError):
        r.counter("ok_total", "x", ("__reserved",))
    with pytest.raises(ValueError):
        r.histogram("h", "x", ("le",))
    c = r.counter("dup_total", "x", ("a",))
    with pytest.raises(ValueError):
        r.counter("dup_total", "x")
    with pytest.raises(ValueError):
        c.labels("1", "2")
    with pytest.raises(ValueError):
        c.labels("1").inc(-1)


def test_format_value() -> None:
    assert format_value(3.0) == "3"
    assert format_value(0.25) == "0.25"
    assert format_value(math.inf) == "+Inf"
    assert format_value(-math.inf) == "-Inf"
    assert format_value(math.nan) == "NaN"

"""Log lines: JSON objects with context ids, plain lines with ids appended."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import pytest

import outpost_wire.logfmt as logfmt
from outpost_wire.logfmt import JsonFormatter, configure_logging, log_context


@pytest.fixture
def restore_root() -> Iterator[None]:
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    for h in list(root.handlers):
        root.removeHandler(h)
    for h in handlers:
        root.addHandler(h)
    root.setLevel(level)


def test_exports() -> None:
    assert set(logfmt.__all__) == {
        "CONTEXT_FIELDS",
        "ContextFilter",
        "JsonFormatter",
        "PlainFormatter",
        "configure_logging",
        "escape_field",
        "log_context",
    }


def test_json_formatter_emits_one_object_with_ids_from_extra() -> None:
    record = logging.LogRecord("outpost.x", logging.WARNING, __file__, 1, 'said "%s"\nthen', ("hi",), None)
    record.session_id = "sesn_1"
    line = JsonFormatter().format(record)
    assert "\n" not in line
    doc = json.loads(line)
    assert doc["level"] == "WARNING"
    assert doc["logger"] == "outpost.x"
    assert doc["message"] == 'said "hi"\nthen'
    assert doc["session_id"] == "sesn_1"
    assert "edge_id" not in doc and "request_id" not in doc
    assert doc["time"].endswith("+00:00")


def test_json_formatter_includes_the_exception() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        import sys

        record = logging.LogRecord("x", logging.ERROR, __file__, 1, "failed", (), sys.exc_info())
    doc = json.loads(JsonFormatter().format(record))
    assert "ValueError: boom" in doc["exception"]


async def test_context_ids_reach_every_line_including_tasks_started_inside(restore_root: None) -> None:
    out = io.StringIO()
    context = configure_logging("INFO", "json", stream=out, static={"edge_id": "edge_7"})
    log = logging.getLogger("outpost.test")

    async def inner() -> None:
        log.info("in a task")

    with log_context(session_id="sesn_2", request_id="req_3"):
        log.info("inside")
        await asyncio.create_task(inner())
    log.info("outside", extra={"request_id": "req_explicit"})
    context.static["edge_id"] = "edge_8"
    log.info("later")
    docs = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [d["message"] for d in docs] == ["inside", "in a task", "outside", "later"]
    assert docs[0]["session_id"] == "sesn_2" and docs[0]["request_id"] == "req_3"
    assert docs[1]["session_id"] == "sesn_2"
    assert "session_id" not in docs[2] and docs[2]["request_id"] == "req_explicit"
    assert docs[0]["edge_id"] == "edge_7" and docs[3]["edge_id"] == "edge_8"


def test_plain_lines_append_ids_and_drop_timestamps_under_journald(
    restore_root: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("JOURNAL_STREAM", "8:1234")
    out = io.StringIO()
    configure_logging("INFO", "plain", stream=out)
    with log_context(session_id="sesn_9"):
        logging.getLogger("outpost.p").info("hello %d", 5)
    assert out.getvalue() == "INFO outpost.p: hello 5 [session_id=sesn_9]\n"


# escaping: a field a peer controls must never start a log line of its own ----------------------

HOSTILE = "1.0\nINFO control_plane.fake: edge ok\r\x1b[2J\x00\x85\u2028\u2029\x7fend"


def _record(msg: str, *args: object, exc: bool = False) -> logging.LogRecord:
    exc_info = None
    if exc:
        try:
            raise ValueError(HOSTILE)
        except ValueError:
            import sys

            exc_info = sys.exc_info()
    return logging.LogRecord("outpost.x", logging.WARNING, __file__, 1, msg, args, exc_info)


def test_escape_field() -> None:
    assert logfmt.escape_field(HOSTILE) == (
        "1.0\\nINFO control_plane.fake: edge ok\\r\\x1b[2J\\x00\\x85\\u2028\\u2029\\x7fend"
    )
    assert logfmt.escape_field("plain text, unicode é ✓") == "plain text, unicode é ✓"


def test_plain_lines_escape_the_message_and_ids() -> None:
    record = _record("edge hello: software_version=%s", HOSTILE)
    record.edge_id = "edge\nFAKE"
    line = logfmt.PlainFormatter(timestamps=False).format(record)
    assert line.splitlines() == [line]  # one line, whatever str.splitlines counts as a break
    assert line == (
        "WARNING outpost.x: edge hello: software_version="
        + logfmt.escape_field(HOSTILE)
        + " [edge_id=edge\\nFAKE]"
    )


def test_plain_traceback_lines_cannot_pass_for_records() -> None:
    line = logfmt.PlainFormatter(timestamps=False).format(_record("failed", exc=True))
    first, *rest = line.split("\n")
    assert first == "WARNING outpost.x: failed"
    assert rest and all(part.startswith("| ") for part in rest)
    # The newline inside the exception's message ends a traceback line, but the line after it is
    # still marked as part of this record.
    injected = logfmt.escape_field(HOSTILE.partition("\n")[2])
    assert rest[-2:] == ["| ValueError: 1.0", f"| {injected}"]


def test_json_lines_escape_everything_that_breaks_a_line() -> None:
    record = _record("v=%s", HOSTILE, exc=True)
    record.session_id = HOSTILE
    line = JsonFormatter().format(record)
    assert line.splitlines() == [line]
    doc = json.loads(line)
    assert doc["message"] == f"v={HOSTILE}"  # escaped on the wire, exact once parsed
    assert doc["session_id"] == HOSTILE
    assert doc["exception"].endswith(f"ValueError: {HOSTILE}")

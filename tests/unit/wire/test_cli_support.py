"""The shared command-line manners: one line per user error, documented exit codes, YAML loading."""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import pytest

from outpost_wire import cli_support as cs


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="tool")
    p.add_argument("--log-level", type=cs.log_level, default="INFO")
    return p


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (cs.UsageError("bad flag", hint="see --help"), cs.EXIT_USAGE),
        (cs.RefusedError("edge revoked"), cs.EXIT_REFUSED),
        (cs.UnreachableError("cannot reach http://x"), cs.EXIT_UNREACHABLE),
        (cs.CliError("other"), cs.EXIT_FAILURE),
        (cs.CliError("custom", exit_code=7), 7),
    ],
)
def test_errors_become_one_line_and_their_exit_code(
    error: cs.CliError, code: int, capsys: pytest.CaptureFixture[str]
) -> None:
    def dispatch(_: argparse.Namespace) -> int:
        raise error

    assert cs.run_cli("tool", _parser(), dispatch, []) == code
    err = capsys.readouterr().err
    assert err == f"tool: {error.line()}\n"


def test_an_unexpected_error_is_one_line_without_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    def dispatch(_: argparse.Namespace) -> int:
        raise RuntimeError("boom")

    assert cs.run_cli("tool", _parser(), dispatch, []) == cs.EXIT_FAILURE
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.count("\n") == 1
    assert "RuntimeError: boom" in err


def test_version_and_log_levels_in_any_case(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cs.run_cli("tool", _parser(), lambda a: 0, ["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith("tool ")
    seen: list[str] = []
    cs.run_cli("tool", _parser(), lambda a: seen.append(a.log_level) or 0, ["--log-level", "debug"])
    cs.run_cli("tool", _parser(), lambda a: seen.append(a.log_level) or 0, ["--log-level", "Warn"])
    assert seen == ["DEBUG", "WARNING"]
    with pytest.raises(SystemExit) as exited:
        cs.run_cli("tool", _parser(), lambda a: 0, ["--log-level", "loud"])
    assert exited.value.code == cs.EXIT_USAGE


@pytest.mark.parametrize(
    ("text", "expected"),
    [("", {}), ("# only comments\n\n", {}), ("a: 1\n", {"a": 1})],
)
def test_empty_and_comment_only_configs_are_valid(
    tmp_path: Path, text: str, expected: dict[str, int]
) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(text)
    assert cs.load_yaml_mapping(f) == expected


@pytest.mark.parametrize(
    ("text", "needle"),
    [(None, "does not exist"), ("a: [1\n", "not valid YAML at line"), ("- 1\n- 2\n", "must hold a mapping")],
)
def test_bad_config_files_are_usage_errors(tmp_path: Path, text: str | None, needle: str) -> None:
    f = tmp_path / "c.yaml"
    if text is not None:
        f.write_text(text)
    with pytest.raises(cs.UsageError) as raised:
        cs.load_yaml_mapping(f)
    assert needle in raised.value.message


def test_rows_as_table_or_json() -> None:
    rows = [{"id": "e1", "ok": True, "tags": ["a", "b"], "note": "two\nlines"}, {"id": "e2", "ok": None}]
    cols = [("id", "ID"), ("ok", "OK"), ("tags", "TAGS"), ("note", "NOTE")]
    out = io.StringIO()
    cs.print_rows(argparse.Namespace(output="table"), rows, cols, stream=out)
    lines = out.getvalue().splitlines()
    assert lines[0].split() == ["ID", "OK", "TAGS", "NOTE"]
    assert lines[1].split() == ["e1", "yes", "a,b", "two", "lines"]
    assert lines[2].split() == ["e2", "-", "-", "-"]
    out = io.StringIO()
    cs.print_rows(argparse.Namespace(output=None), rows, cols, stream=out)  # not a terminal: JSON
    assert json.loads(out.getvalue()) == rows

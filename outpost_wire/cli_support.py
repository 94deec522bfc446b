"""What both command-line tools share: exit codes, one-line errors, output formats, YAML loading.

Every user error ends as one line on stderr, ``PROG: what is wrong; what to do``, and a documented
exit code (docs/operations.md, "Exit codes"). A traceback is printed only for a bug, and only with
``OUTPOST_DEBUG=1``::

    def main(argv=None) -> int:
        return run_cli("outpost-edge", _parser(), _dispatch, argv)
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TextIO

import yaml
from pydantic import ValidationError

from outpost_wire.version import SOFTWARE_VERSION as _version

__all__ = [
    "EXIT_FAILURE",
    "EXIT_OK",
    "EXIT_REFUSED",
    "EXIT_UNREACHABLE",
    "EXIT_USAGE",
    "ArgumentParser",
    "CliError",
    "RefusedError",
    "UnreachableError",
    "UsageError",
    "add_output_flag",
    "env_help",
    "load_yaml_mapping",
    "log_level",
    "output_format",
    "print_rows",
    "run_cli",
    "validation_message",
]

EXIT_OK = 0
EXIT_FAILURE = 1  # anything else: the message says what
EXIT_USAGE = 2  # bad flags, arguments or configuration
EXIT_REFUSED = 3  # authentication refused, the edge revoked or unknown: retrying will not help
EXIT_UNREACHABLE = 4  # the control plane could not be reached

_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line, ``PROG: MESSAGE; see PROG --help`` (exit 2),
    not the usage block. Sub-command parsers made from it are of this class too."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: {message}; see {self.prog} --help\n")


class CliError(Exception):
    """A failure the user can act on: ``message`` says what is wrong, ``hint`` what to do."""

    exit_code = EXIT_FAILURE

    def __init__(self, message: str, *, hint: str | None = None, exit_code: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        if exit_code is not None:
            self.exit_code = exit_code

    def line(self) -> str:
        return f"{self.message}; {self.hint}" if self.hint else self.message


class UsageError(CliError):
    exit_code = EXIT_USAGE


class RefusedError(CliError):
    exit_code = EXIT_REFUSED


class UnreachableError(CliError):
    exit_code = EXIT_UNREACHABLE


def env_help(text: str, env: str) -> str:
    """Help text that names the flag's environment variable."""
    return f"{text} (env: {env})"


def log_level(value: str) -> str:
    """``--log-level`` in any case: ``debug``, ``Info``, ``WARNING``."""
    level = value.strip().upper()
    if level == "WARN":
        level = "WARNING"
    if level not in _LEVELS:
        raise argparse.ArgumentTypeError(f"unknown log level {value!r}; use one of {', '.join(_LEVELS)}")
    return level


def add_output_flag(parser: argparse.ArgumentParser) -> None:
    """``-o table|json``: a table for people when stdout is a terminal, JSON for programs otherwise."""
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "json"),
        default=None,
        help="table (default on a terminal) or json (default otherwise)",
    )


def output_format(args: argparse.Namespace, stream: TextIO) -> str:
    """``table`` or ``json``: the ``-o`` flag's choice, else table on a terminal, JSON otherwise."""
    chosen = getattr(args, "output", None)
    if chosen:
        return str(chosen)
    return "table" if stream.isatty() else "json"


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, (list, tuple)):
        return ",".join(_cell(v) for v in value) or "-"
    if isinstance(value, dict):
        return json.dumps(value, separators=(",", ":"), sort_keys=True)
    return " ".join(str(value).split())  # no newlines or tabs in a cell


def print_rows(
    args: argparse.Namespace,
    rows: Sequence[Mapping[str, Any]],
    columns: Sequence[tuple[str, str]],
    *,
    document: Any = None,
    stream: TextIO | None = None,
) -> None:
    """Print ``rows`` as a table (``columns``: (key, heading)) or the JSON ``document`` (default: the
    rows) for ``-o json``."""
    out = stream or sys.stdout
    if output_format(args, out) == "json":
        json.dump(list(rows) if document is None else document, out, indent=2, default=str)
        out.write("\n")
        return
    table = [[heading for _, heading in columns]]
    table += [[_cell(row.get(key)) for key, _ in columns] for row in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(columns))]
    for r in table:
        out.write("  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n")
    if not rows:
        out.write("(none)\n")


def validation_message(exc: ValidationError, source: str) -> str:
    """One line for a pydantic error: ``SOURCE: key.path: problem; other.key: problem``."""
    parts = []
    for e in exc.errors():
        where = ".".join(str(p) for p in e["loc"]) or "(top level)"
        message = str(e["msg"]).removeprefix("Value error, ")  # a validator's own words
        parts.append(f"{where}: {message}")
    return f"invalid configuration in {source}: " + "; ".join(parts)


def load_yaml_mapping(path: Path) -> dict[str, Any]:
    """A config file's keys. Empty or comments-only is valid (every key has a default); a missing
    file, invalid YAML or something other than a mapping is a :class:`UsageError`."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise UsageError(
            f"config file {path} does not exist", hint="check the path given to --config"
        ) from None
    except IsADirectoryError:
        raise UsageError(f"config file {path} is a directory", hint="give the YAML file's path") from None
    except PermissionError:
        raise UsageError(
            f"cannot read config file {path}: permission denied", hint="check its mode and owner"
        ) from None
    except UnicodeDecodeError:
        raise UsageError(f"config file {path} is not UTF-8 text") from None
    try:
        loaded = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or "not valid YAML"
        raise UsageError(f"config file {path} is not valid YAML{where}: {problem}") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise UsageError(f"config file {path} must hold a mapping of keys, not a {type(loaded).__name__}")
    return loaded


def run_cli(
    prog: str,
    parser: argparse.ArgumentParser,
    dispatch: Callable[[argparse.Namespace], int],
    argv: Sequence[str] | None = None,
) -> int:
    """Parse ``argv`` and run ``dispatch``; turn every failure into one line and an exit code."""
    parser.add_argument("--version", action="version", version=f"{prog} {_version}")
    args = parser.parse_args(argv)  # argparse: usage errors exit 2 with one line
    try:
        return dispatch(args)
    except CliError as exc:
        print(f"{prog}: {exc.line()}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `outpost-control sessions list | head`
        return EXIT_OK
    except Exception as exc:
        if os.environ.get("OUTPOST_DEBUG"):
            traceback.print_exc()
        logging.getLogger(prog).debug("unexpected error", exc_info=True)
        print(
            f"{prog}: unexpected error: {type(exc).__name__}: {exc}; "
            "run again with OUTPOST_DEBUG=1 for the traceback and report it",
            file=sys.stderr,
        )
        return EXIT_FAILURE

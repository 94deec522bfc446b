"""What README.md and docs/*.md claim, where a test can check it against the code.

* every ``outpost-control ...`` / ``outpost-edge ...`` command shown (fenced shell blocks, and inline
  code that starts with the program name) names subcommands and flags the real argparse parsers have;
  the flag table of ``outpost-control serve`` lists every flag ``serve`` has;
* loopback addresses are the configuration defaults (the edge's ``127.0.0.1:9464``, the control
  plane's ``127.0.0.1:8080`` and ``127.0.0.1:7443``), and the README says where the edge listens;
* metric names exist in the code, environment variables are read by the code, repository paths and
  relative links exist, log messages quoted in troubleshooting tables are ones the code writes,
  and dotted configuration keys named in the prose are keys of a model.

Each claim is its own test case (the id names the file and line), so a failure says which claim.
The parsers are taken from the CLIs' ``main`` as it builds them (``parse_args`` is intercepted),
so the check does not depend on how the CLI modules name their parser factories.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import re
import shlex
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from control_plane.config import ControlPlaneConfig
from edge_agent.config import ObservabilityConfig

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
CODE_DIRS = ("control_plane", "edge_agent", "outpost_wire")
PROGRAMS = ("outpost-control", "outpost-edge")
SHELL_LANGS = ("", "sh", "bash", "shell", "console")
OMITTED = ("…", "...")


# -- reading the docs --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Claim:
    doc: Path
    line: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.doc.relative_to(ROOT)}:{self.line}: {self.text}"


@dataclass(frozen=True)
class Fence:
    doc: Path
    line: int  # of the first line inside the fence
    lang: str
    body: str


_FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```", re.M | re.S)
_SPAN = re.compile(r"(?<!`)(`+)(?!`)(.+?)(?<!`)\1(?!`)", re.S)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


@cache
def _fences(doc: Path) -> tuple[Fence, ...]:
    text = doc.read_text(encoding="utf-8")
    return tuple(Fence(doc, _line_of(text, m.start(2)), m[1].lower(), m[2]) for m in _FENCE.finditer(text))


@cache
def _prose(doc: Path) -> str:
    """The doc with its fenced blocks blanked out (same offsets and line numbers)."""
    text = doc.read_text(encoding="utf-8")
    return _FENCE.sub(lambda m: re.sub(r"[^\n]", " ", m[0]), text)


def _spans(doc: Path) -> Iterator[Claim]:
    """Inline code spans outside fenced blocks, whitespace collapsed."""
    prose = _prose(doc)
    for m in _SPAN.finditer(prose):
        yield Claim(doc, _line_of(prose, m.start()), " ".join(m[2].split()))


def _shell_commands(fence: Fence) -> Iterator[Claim]:
    """One claim per command of a shell block: continuation lines joined, ``&&`` / ``;`` / ``|`` split."""
    if fence.lang not in SHELL_LANGS:
        return
    joined: list[tuple[int, str]] = []
    pending, start = "", 0
    for offset, raw in enumerate(fence.body.splitlines()):
        if not pending:
            start = fence.line + offset
        if raw.rstrip().endswith("\\"):
            pending += raw.rstrip()[:-1] + " "
            continue
        joined.append((start, pending + raw))
        pending = ""
    for line, command in joined:
        for part in re.split(r"&&|\|\||;|(?<![|])\|(?![|])", command):
            if part.strip():
                yield Claim(fence.doc, line, " ".join(part.split()))


def _tokens(text: str) -> list[str]:
    try:
        return shlex.split(text, comments=True)
    except ValueError:  # an unbalanced quote in an example: fall back to words
        return text.split("#", 1)[0].split()


# -- the CLIs' parsers -------------------------------------------------------------------------------
class _Captured(BaseException):  # a BaseException: a CLI's `except Exception` must not swallow it
    def __init__(self, parser: argparse.ArgumentParser) -> None:
        super().__init__()
        self.parser = parser


def _capture(main: Callable[..., Any]) -> argparse.ArgumentParser:
    original = argparse.ArgumentParser.parse_known_args

    def capture(self: argparse.ArgumentParser, *args: Any, **kwargs: Any) -> Any:
        raise _Captured(self)

    argparse.ArgumentParser.parse_known_args = capture  # type: ignore[method-assign]
    try:
        main(["--help"])
    except _Captured as captured:
        return captured.parser
    finally:
        argparse.ArgumentParser.parse_known_args = original  # type: ignore[method-assign]
    raise AssertionError(f"{main.__module__}.main did not parse its arguments with argparse")


@cache
def _parsers() -> dict[str, argparse.ArgumentParser]:
    from control_plane.cli import main as control_main
    from edge_agent.cli import main as edge_main

    return {"outpost-control": _capture(control_main), "outpost-edge": _capture(edge_main)}


def _subcommands(parser: argparse.ArgumentParser) -> argparse._SubParsersAction[Any] | None:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return action
    return None


def _takes_value(action: argparse.Action) -> bool:
    return action.nargs != 0


def _check_command(program: str, args: list[str]) -> str | None:
    """None if ``program args`` names subcommands and flags the parser has, else what is wrong."""
    parser = _parsers()[program]
    path = [program]
    chosen = False
    i = 0
    while i < len(args):
        token = args[i].strip("[]")
        i += 1
        if not token or token in OMITTED or token.startswith("<"):
            if token in OMITTED:
                break
            continue
        if token.startswith("-") and token != "-":
            name = token.split("=", 1)[0]
            action = parser._option_string_actions.get(name)
            if action is None:
                return f"`{' '.join(path)}` has no option {name}"
            value_follows = "=" not in token and _takes_value(action) and i < len(args)
            if value_follows and (action.nargs != "?" or not args[i].startswith("-")):
                i += 1
            continue
        sub = _subcommands(parser)
        if sub is not None and not chosen:
            for alternative in token.split("|"):
                if alternative not in sub.choices:
                    known = ", ".join(sorted(sub.choices))
                    return f"`{' '.join(path)}` has no subcommand {alternative!r} (it has: {known})"
            parser = sub.choices[token.split("|")[0]]
            path.append(token.split("|")[0])
            chosen = _subcommands(parser) is None
            continue
        # a positional value (or the placeholder of one)
    return None


def _invocations() -> Iterator[tuple[Claim, str, list[str]]]:
    for doc in DOCS:
        for fence in _fences(doc):
            for claim in _shell_commands(fence):
                found = _program_in(_tokens(claim.text))
                if found:
                    yield claim, *found
        for claim in _spans(doc):
            tokens = _tokens(claim.text)
            if len(tokens) > 1 and tokens[0] in PROGRAMS:
                yield claim, tokens[0], tokens[1:]


def _program_in(tokens: list[str]) -> tuple[str, list[str]] | None:
    """(program, arguments) when a command runs one of the CLIs: as the command itself (after
    ``sudo``, ``exec`` or variable assignments), or as a ``docker run`` of the edge's image."""
    words = list(tokens)
    while words and (words[0] in ("sudo", "exec", "time") or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0])):
        words.pop(0)
    if words and Path(words[0]).name in PROGRAMS:
        return Path(words[0]).name, words[1:]
    if words[:2] == ["docker", "run"]:
        for index, word in enumerate(words):
            if re.fullmatch(r"outpost-edge:[\w.-]+", word):
                return "outpost-edge", words[index + 1 :]
    return None


INVOCATIONS = list(_invocations())


@pytest.mark.parametrize(("claim", "program", "args"), INVOCATIONS, ids=[c.id for c, _, _ in INVOCATIONS])
def test_commands_shown_in_the_docs_exist(claim: Claim, program: str, args: list[str]) -> None:
    problem = _check_command(program, args)
    assert problem is None, f"{claim.id}: {problem}"


def test_the_docs_show_commands_of_both_programs() -> None:
    assert {program for _, program, _ in INVOCATIONS} == set(PROGRAMS)
    assert len(INVOCATIONS) > 20


def _serve_flag_table() -> dict[str, Claim]:
    """Flag -> row of the ``outpost-control serve`` table in docs/configuration.md."""
    doc = ROOT / "docs" / "configuration.md"
    text = doc.read_text(encoding="utf-8")
    start = text.index("## Control plane (`outpost-control serve`)")
    rows: dict[str, Claim] = {}
    for offset, line in enumerate(text[start:].splitlines()):
        if line.startswith("## ") and offset:
            break
        m = re.match(r"\| `(--[a-z0-9-]+)[^`]*` \|", line)
        if m:
            rows[m[1]] = Claim(doc, _line_of(text, start) + offset, line)
    return rows


def test_the_serve_flag_table_lists_every_flag_of_serve() -> None:
    serve = _subcommands(_parsers()["outpost-control"])
    assert serve is not None
    flags = {
        option
        for action in serve.choices["serve"]._actions
        if not isinstance(action, argparse._HelpAction)
        for option in action.option_strings
        if option.startswith("--")
    }
    table = _serve_flag_table()
    assert not flags - table.keys(), (
        f"docs/configuration.md: serve flags not in the table: {flags - table.keys()}"
    )
    assert not table.keys() - flags, f"docs/configuration.md: table flags serve lacks: {table.keys() - flags}"


# -- addresses -----------------------------------------------------------------------------------------
def _default_addresses() -> dict[str, str]:
    control = ControlPlaneConfig()
    edge_listen = ObservabilityConfig().listen
    assert edge_listen is not None
    return {
        edge_listen: "the edge's health and metrics endpoint (observability.listen)",
        f"{control.http_host}:{control.http_port}": "the control plane's HTTP API",
        f"{control.tunnel_host}:{control.tunnel_port}": "the control plane's gRPC tunnel",
    }


def _loopback_mentions() -> Iterator[Claim]:
    for doc in DOCS:
        text = doc.read_text(encoding="utf-8")
        for m in re.finditer(r"\b127\.0\.0\.1:\d+\b", text):
            yield Claim(doc, _line_of(text, m.start()), m[0])


def _all_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    yield from parser._actions
    sub = _subcommands(parser)
    if sub is not None:
        for child in dict.fromkeys(sub.choices.values()):
            yield from _all_actions(child)


LOOPBACK = list(_loopback_mentions())


@pytest.mark.parametrize("claim", LOOPBACK, ids=[c.id for c in LOOPBACK])
def test_loopback_addresses_in_docs_are_the_defaults(claim: Claim) -> None:
    assert claim.text in _default_addresses(), (
        f"{claim.id}: {claim.text} is no default address; the defaults are {_default_addresses()}"
    )


def test_loopback_addresses_in_cli_help_are_the_defaults() -> None:
    wrong = [
        f"{program} {'/'.join(action.option_strings) or action.dest}: {m[0]}"
        for program, parser in _parsers().items()
        for action in _all_actions(parser)
        for m in re.finditer(r"\b127\.0\.0\.1:\d+\b", str(action.help or "") + str(action.default or ""))
        if m[0] not in _default_addresses()
    ]
    assert not wrong, f"help or defaults naming an address that is no default: {wrong}"


def test_every_default_address_is_documented() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    operations = (ROOT / "docs" / "operations.md").read_text(encoding="utf-8")
    edge_listen = ObservabilityConfig().listen
    assert edge_listen is not None
    assert f"`{edge_listen}`" in readme, "README.md must say where the edge listens"
    assert f"`{edge_listen}`" in operations
    control = ControlPlaneConfig()
    table = _serve_flag_table()
    assert f"`{control.http_host}:{control.http_port}`" in table["--http"].text
    assert f"`{control.tunnel_host}:{control.tunnel_port}`" in table["--tunnel"].text


def test_no_doc_says_the_edge_listens_on_nothing() -> None:
    for doc in DOCS:
        text = " ".join(doc.read_text(encoding="utf-8").split())
        assert not re.search(r"listens on (nothing|no port)", text), f"{doc.name}: the edge serves /healthz"


# -- what the code holds ---------------------------------------------------------------------------------
def _code_files() -> Iterator[Path]:
    for directory in CODE_DIRS:
        for path in sorted((ROOT / directory).rglob("*.py")):
            if "_proto" not in path.parts:
                yield path


@cache
def _code_strings() -> frozenset[str]:
    """Every string literal of the packages, docstrings left out (an f-string's fixed parts joined
    around a NUL where a value goes)."""
    found: set[str] = set()
    for path in _code_files():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(node.body[0].value)
            for node in ast.walk(tree)
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(node.body[0].value, ast.Constant)
        }
        in_fstrings: set[int] = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.JoinedStr):
                parts = []
                for value in node.values:
                    in_fstrings.add(id(value))
                    parts.append(value.value if isinstance(value, ast.Constant) else "\0")
                found.add("".join(str(p) for p in parts))
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and id(node) not in docstrings
                and id(node) not in in_fstrings
            ):
                found.add(node.value)
    return frozenset(found)


@cache
def _code_text() -> str:
    return "\n".join(path.read_text(encoding="utf-8") for path in _code_files())


# metrics
_METRIC = re.compile(r"(?<![\w./])(outpost_[a-z0-9_]+|…_[a-z0-9_]+)(?![\w./])")
_NOT_METRICS = frozenset({"outpost_wire"})
_SUFFIXES = ("_total", "_created", "_bucket", "_count", "_sum", "_info")


def _metric_mentions() -> Iterator[Claim]:
    for doc in DOCS:
        texts = [(claim.line, claim.text) for claim in _spans(doc)]
        texts += [(fence.line, fence.body) for fence in _fences(doc) if fence.lang not in ("python", "py")]
        prefix = ""
        for line, text in sorted(texts):
            for m in _METRIC.finditer(text):
                name = m[1]
                if name.startswith("…"):
                    if not prefix:
                        continue
                    name = prefix + name[1:]
                elif name in _NOT_METRICS:
                    continue
                else:
                    prefix = "_".join(name.split("_")[:2])  # outpost_edge_x -> outpost_edge
                yield Claim(doc, line + text.count("\n", 0, m.start()), name)


def _metric_in_code(name: str) -> bool:
    strings = _code_strings()
    if name in strings:
        return True
    # prometheus_client adds these suffixes to the name it is given (a Counter's _total, an Info's _info).
    return any(name.endswith(suffix) and name[: -len(suffix)] in strings for suffix in _SUFFIXES)


METRICS = sorted(set(_metric_mentions()), key=lambda c: c.id)


@pytest.mark.parametrize("claim", METRICS, ids=[c.id for c in METRICS])
def test_metric_names_in_docs_exist_in_the_code(claim: Claim) -> None:
    assert _metric_in_code(claim.text), f"{claim.id}: no metric of that name in {', '.join(CODE_DIRS)}"


# environment variables
_ENV_PREFIXES = ("OUTPOST_", "ANTHROPIC_")
_PROXY_VARS = re.compile(r"^(https?|no|all)_proxy$", re.I)
_SHELL_VARS = frozenset({"HOME", "PATH", "USER", "PWD", "SHELL"})
#: Variables a library reads for us (the library's own source is searched for the name).
_LIBRARY_READS = {"ANTHROPIC_BASE_URL": "anthropic"}


def _is_env_name(name: str) -> bool:
    return name.startswith(_ENV_PREFIXES) or bool(_PROXY_VARS.match(name))


def _env_mentions() -> Iterator[Claim]:
    for doc in DOCS:
        for claim in _spans(doc):
            for m in re.finditer(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", claim.text):
                if m[1] not in _SHELL_VARS:
                    yield Claim(doc, claim.line, m[1])
            if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", claim.text) and _is_env_name(claim.text):
                yield Claim(doc, claim.line, claim.text)
        prose = _prose(doc)
        for m in re.finditer(r"(?<![`\w])\$([A-Z][A-Z0-9_]+)", prose):
            if m[1] not in _SHELL_VARS:
                yield Claim(doc, _line_of(prose, m.start()), m[1])
        for fence in _fences(doc):
            for claim in _shell_commands(fence):
                for m in re.finditer(r"(?:\bexport\s+|\s-e\s+|\s)([A-Z][A-Z0-9_]*)(?==|\s|$)", claim.text):
                    if _is_env_name(m[1]):
                        yield Claim(doc, claim.line, m[1])


def _env_read(name: str) -> bool:
    if name in _code_strings():
        return True
    shell = ROOT.glob("packaging/**/*.sh")
    if any(re.search(rf"\b{name}\b", path.read_text(encoding="utf-8")) for path in shell):
        return True
    library = _LIBRARY_READS.get(name)
    if library is not None:
        spec = importlib.util.find_spec(library)
        if spec is not None and spec.submodule_search_locations:
            package = Path(next(iter(spec.submodule_search_locations)))
            return any(name in path.read_text(encoding="utf-8") for path in package.rglob("*.py"))
    return False


ENV_VARS = sorted(set(_env_mentions()), key=lambda c: c.id)


@pytest.mark.parametrize("claim", ENV_VARS, ids=[c.id for c in ENV_VARS])
def test_environment_variables_in_docs_are_read_by_the_code(claim: Claim) -> None:
    assert _env_read(claim.text), f"{claim.id}: nothing in the code reads ${claim.text}"


# paths and links
_REPO_PATH = re.compile(
    r"(?<![\w/.<>%-])(?:\./)?((?:packaging|systemd|scripts|bench|docs|proto|control_plane|edge_agent|"
    r"outpost_wire|tests)/[\w./-]*|LICENSE|CHANGELOG\.md|pyproject\.toml)"
)


def _path_mentions() -> Iterator[Claim]:
    for doc in DOCS:
        texts = [(claim.line, claim.text) for claim in _spans(doc)]
        texts += [(claim.line, claim.text) for fence in _fences(doc) for claim in _shell_commands(fence)]
        for line, text in texts:
            for m in _REPO_PATH.finditer(text):
                yield Claim(doc, line, m[1].rstrip(".,:"))
        prose = _prose(doc)
        for m in re.finditer(r"\]\(([^)\s]+)\)", prose):
            target = m[1].split("#", 1)[0]
            if target and not re.match(r"^[a-z]+:", target):
                where = (doc.parent / target).resolve().relative_to(ROOT)
                yield Claim(doc, _line_of(prose, m.start()), str(where))


PATHS = sorted(set(_path_mentions()), key=lambda c: c.id)


@pytest.mark.parametrize("claim", PATHS, ids=[c.id for c in PATHS])
def test_repository_paths_in_docs_exist(claim: Claim) -> None:
    assert (ROOT / claim.text).exists(), f"{claim.id}: no such file or directory in the repository"


# log messages
def _message_mentions() -> Iterator[Claim]:
    """The first column of tables headed "Symptom ..." or "Message ...": messages the code writes."""
    for doc in DOCS:
        prose = _prose(doc)
        in_table = False
        for number, line in enumerate(prose.splitlines(), start=1):
            if re.match(r"\|\s*(Symptom|Message)", line, re.I):
                in_table = True
                continue
            if not line.startswith("|"):
                in_table = False
                continue
            if in_table and not line.startswith("|-") and not line.startswith("|---"):
                first = re.split(r"(?<!\\)\|", line)[1]
                for m in _SPAN.finditer(first):
                    yield Claim(doc, number, m[2])


def _message_in_code(message: str) -> bool:
    fragments = [f.strip() for f in re.split(r"…|\.\.\.|\bN\b", message)]
    strings = _code_strings()
    for fragment in fragments:
        if len(fragment) < 4:
            continue
        if not any(fragment in s for s in strings) and fragment not in _code_text():
            return False
    return True


MESSAGES = list(_message_mentions())


@pytest.mark.parametrize("claim", MESSAGES, ids=[c.id for c in MESSAGES])
def test_messages_in_troubleshooting_tables_are_written_by_the_code(claim: Claim) -> None:
    assert _message_in_code(claim.text), f"{claim.id}: the code writes no such message"


def test_the_troubleshooting_table_is_checked() -> None:
    assert len(MESSAGES) >= 5


# configuration keys named in the prose
@cache
def _config_keys() -> tuple[frozenset[str], frozenset[str]]:
    """(every key path, the first segments that make a dotted word a key path)."""
    gen = sys.modules.get("gen_config_docs")
    if gen is None:
        path = ROOT / "scripts" / "gen_config_docs.py"
        spec = importlib.util.spec_from_file_location("gen_config_docs", path)
        assert spec is not None and spec.loader is not None
        gen = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = gen  # dataclasses look their module up while the class is built
        spec.loader.exec_module(gen)
    keys: set[str] = set()
    for table in gen.TABLES:
        for key in gen.key_paths(table):
            keys.add(key)
            keys.add(key.replace("[]", ""))
    sections = {key.split(".")[0] for key in keys if "." in key}
    return frozenset(keys), frozenset(sections)


def _key_mentions() -> Iterator[Claim]:
    _, sections = _config_keys()
    for doc in DOCS:
        for claim in _spans(doc):
            word = claim.text.split(":", 1)[0].strip()
            if re.fullmatch(r"[a-z_]+(\[\])?(\.[a-z_<>]+(\[\])?)+", word) and word.split(".")[0] in sections:
                yield Claim(doc, claim.line, word)


KEYS = sorted(set(_key_mentions()), key=lambda c: c.id)


@pytest.mark.parametrize("claim", KEYS, ids=[c.id for c in KEYS])
def test_configuration_keys_named_in_docs_exist(claim: Claim) -> None:
    keys, _ = _config_keys()
    assert claim.text in keys, f"{claim.id}: no configuration key {claim.text}"


def test_the_checks_catch_what_is_not_there() -> None:
    # Guards the checks above against passing everything.
    assert _check_command("outpost-edge", ["run", "--config", "F"]) is None
    assert "no option --no-such-flag" in str(_check_command("outpost-edge", ["run", "--no-such-flag"]))
    assert "no subcommand 'nonsense'" in str(_check_command("outpost-control", ["nonsense"]))
    assert not _metric_in_code("outpost_no_such_metric_total")
    assert _env_read("HTTPS_PROXY")
    assert not _env_read("OUTPOST_NO_SUCH_VARIABLE")
    assert not _message_in_code("a message … no code writes")
    keys, _ = _config_keys()
    assert "connection.proxy_url" in keys
    assert "connection.no_such_key" not in keys

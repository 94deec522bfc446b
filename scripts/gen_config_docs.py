"""Generate the key tables of ``docs/configuration.md`` from the daemons' configuration models.

    .venv/bin/python scripts/gen_config_docs.py            # rewrite the tables in place
    .venv/bin/python scripts/gen_config_docs.py --check    # exit 1 if the doc is out of date

Each table sits between ``<!-- generated:NAME -->`` and ``<!-- /generated -->``; everything around
the markers is hand-written and kept as it is. A row is one key: its path, type (with bounds), default,
the environment variable that sets it where there is one, and the field's ``Field(description=...)``.
Every field must have a description. ``--check`` names each key that is undocumented (in a model,
not in the doc), stale (in the doc, not in a model) or changed, and exits 1.

The models: ``control_plane.config.ControlPlaneConfig`` (and what it nests, e.g. ``HarnessConfig``),
``edge_agent.config.EdgeConfig`` (every section), the edge's policy ``edge_agent.policy.Policy``, its
MCP servers ``edge_agent.mcp.config.McpServerConfig`` and its git section
``edge_agent.git.GitConfig``. A model nested in another is walked into; one that is given its own
table is named by a reference row instead.
"""

from __future__ import annotations

import argparse
import enum
import re
import sys
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import annotated_types  # noqa: E402
from pydantic import BaseModel, SecretStr, TypeAdapter  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402

from control_plane.config import ControlPlaneConfig  # noqa: E402
from edge_agent.config import EdgeConfig  # noqa: E402
from edge_agent.git.config import GitConfig  # noqa: E402
from edge_agent.mcp.config import McpServerConfig, SecretSource  # noqa: E402
from edge_agent.policy import Policy  # noqa: E402

__all__ = [
    "DOC",
    "TABLES",
    "DocError",
    "Row",
    "Table",
    "check",
    "documented_keys",
    "key_paths",
    "main",
    "render",
    "rows",
]

DOC = ROOT / "docs" / "configuration.md"

_BLOCK = re.compile(
    r"(?P<open><!-- generated:(?P<name>[a-z_-]+) -->\n)(?P<body>.*?)(?P<close><!-- /generated -->)", re.S
)
_HEADER = (
    "| Key | Type | Default | Environment | Meaning |",
    "|---|---|---|---|---|",
)
#: Models shown as one value ("secret") where they are used; the ``secret`` table lists their keys.
_LEAF_MODELS: tuple[type[BaseModel], ...] = (SecretSource,)


@dataclass(frozen=True)
class Table:
    """One generated table: the keys of ``model`` under ``prefix``."""

    name: str
    model: type[BaseModel]
    prefix: str = ""
    #: Fields with a table of their own: key -> where (a heading of the doc).
    refs: Mapping[str, str] = field(default_factory=dict)
    #: Key -> the environment variable(s) that set it (read by the daemon's CLI or a library).
    env: Mapping[str, str] = field(default_factory=dict)
    #: Key -> how to say a default computed at start (a ``default_factory`` that is not a container).
    computed_defaults: Mapping[str, str] = field(default_factory=dict)


TABLES: tuple[Table, ...] = (
    Table(
        "edge",
        EdgeConfig,
        refs={"policy": "Policy", "mcp_servers": "MCP servers", "git": "Git"},
        env={"connection.proxy_url": "`HTTPS_PROXY` / `https_proxy`, `NO_PROXY` / `no_proxy`"},
        computed_defaults={"name": "the host name"},
    ),
    Table("policy", Policy),
    Table("mcp", McpServerConfig, prefix="mcp_servers[]."),
    Table("secret", SecretSource),
    Table("git", GitConfig, prefix="git."),
    Table(
        "control",
        ControlPlaneConfig,
        env={
            "data_dir": "`OUTPOST_DATA_DIR`",
            "model_base_url": "`ANTHROPIC_BASE_URL`",
            "model_api_key_file": "`ANTHROPIC_API_KEY_FILE`",
        },
        computed_defaults={
            "harness.model_prices": "Anthropic's list prices (see Model prices)",
            "harness.context_windows": "200,000 for every model of Model prices (see Context windows)",
        },
    ),
)


@dataclass(frozen=True)
class Row:
    key: str
    type: str
    default: str
    env: str
    description: str

    def render(self) -> str:
        cells = (f"`{self.key}`", self.type, self.default, self.env, self.description)
        return "| " + " | ".join(_cell(c) for c in cells) + " |"


class DocError(Exception):
    """The models cannot be rendered (a field without a description, a stale mapping entry)."""


# -- rows from the models --------------------------------------------------------------------------
@dataclass(frozen=True)
class _Field:
    key: str
    owner: type[BaseModel]
    name: str
    info: FieldInfo
    kind: str  # "" (a value) or how it holds a model: "plain", "optional", "list", "map"


def rows(table: Table) -> list[Row]:
    """The table's rows, in the models' field order. Raises DocError naming every field without a
    description and every ``refs`` / ``env`` / ``computed_defaults`` entry naming no key."""
    problems: list[str] = []
    out: list[Row] = []
    for f in _fields(table):
        description = " ".join((f.info.description or "").split())
        if not description:
            problems.append(
                f"{table.name}: {f.key} ({f.owner.__name__}.{f.name}) has no Field(description=...)"
            )
        local = f.key[len(table.prefix) :]
        type_text = None
        if local in table.refs:
            shape = {"plain": "mapping", "optional": "mapping or null", "list": "list of mappings"}[f.kind]
            type_text = f"{shape}, see {table.refs[local]}"
        out.append(_row(table, f.key, f.info, description, type_text))
    keys = {row.key for row in out}
    for what, mapping in (
        ("refs", table.refs),
        ("env", table.env),
        ("computed_defaults", table.computed_defaults),
    ):
        for key in mapping:
            if table.prefix + key not in keys:
                problems.append(
                    f"{table.name}: {what} names {key!r}, which is no key of {table.model.__name__}"
                )
    if problems:
        raise DocError("\n".join(problems))
    return out


def key_paths(table: Table) -> list[str]:
    """The table's key paths (no descriptions needed): what a key named in prose may be."""
    return [f.key for f in _fields(table)]


def _fields(
    table: Table, model: type[BaseModel] | None = None, prefix: str | None = None
) -> Iterator[_Field]:
    """The fields that make rows: a section with defaults of its own makes none (its keys follow);
    a list, map or optional section makes one, then its keys follow; a ``refs`` field makes one."""
    model = model or table.model
    prefix = table.prefix if prefix is None else prefix
    for name, info in model.model_fields.items():
        key = prefix + name
        kind, nested = _nested_model(info.annotation)
        if key[len(table.prefix) :] in table.refs or nested is None:
            yield _Field(key, model, name, info, kind)
        elif kind == "plain":
            yield from _fields(table, nested, key + ".")
        else:
            yield _Field(key, model, name, info, kind)
            yield from _fields(table, nested, key + {"optional": ".", "list": "[].", "map": ".<name>."}[kind])


def _row(table: Table, key: str, info: FieldInfo, description: str, type_text: str | None = None) -> Row:
    local = key[len(table.prefix) :]
    return Row(
        key=key,
        type=type_text or _type(info),
        default=_default(info, table.computed_defaults.get(local)),
        env=table.env.get(local, ""),
        description=description,
    )


def _nested_model(annotation: Any) -> tuple[str, type[BaseModel] | None]:
    """("plain" | "optional" | "list" | "map", model) when the field holds a model, else ("", None)."""
    if _is_model(annotation):
        return "plain", annotation
    origin, args = get_origin(annotation), get_args(annotation)
    if origin in (Union, types.UnionType):
        models = [a for a in args if _is_model(a)]
        if len(models) == 1 and len(args) == 2 and type(None) in args:
            return "optional", models[0]
    if origin is tuple and args and _is_model(args[0]):
        return "list", args[0]
    if origin is dict and len(args) == 2 and _is_model(args[1]):
        return "map", args[1]
    return "", None


def _is_model(annotation: Any) -> bool:
    return (
        isinstance(annotation, type) and issubclass(annotation, BaseModel) and annotation not in _LEAF_MODELS
    )


# -- types -----------------------------------------------------------------------------------------
_SIMPLE: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    Path: "path",
    SecretStr: "string",
    SecretSource: "secret",
    type(None): "null",
}


def _type(info: FieldInfo) -> str:
    annotation: Any = info.annotation
    nullable = False
    if get_origin(annotation) in (Union, types.UnionType) and type(None) in get_args(annotation):
        rest = tuple(a for a in get_args(annotation) if a is not type(None))
        annotation = rest[0] if len(rest) == 1 else Union[rest]  # noqa: UP007
        nullable = True
    text = _type_name(annotation)
    values, length = _bounds(info.metadata)
    if values:
        text = f"{text}, {values}" if text.startswith("one of") else f"{text} {values}"
    if length:
        text = f"{text}, {length}"
    return f"{text} or null" if nullable else text


def _type_name(annotation: Any) -> str:
    if annotation in _SIMPLE:
        return _SIMPLE[annotation]
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is typing.Annotated:
        return _type_name(args[0])
    if origin in (Union, types.UnionType):
        parts = [_type_name(a) for a in args if a is not type(None)]
        if type(None) in args:
            parts.append("null")
        return " or ".join(parts)
    if origin is Literal:
        return _choices(args)
    if origin is tuple:
        return f"list of {_plural(_type_name(args[0]))}"
    if origin is dict:
        return f"map of {_plural(_type_name(args[1]))}"
    if isinstance(annotation, type) and issubclass(annotation, enum.Enum):
        return _choices(tuple(member.value for member in annotation))
    if _is_model(annotation):
        return "mapping"
    raise DocError(f"no way to name the type {annotation!r}")


def _choices(values: tuple[Any, ...]) -> str:
    quoted = [f"`{v}`" for v in values]
    if len(quoted) == 1:
        return quoted[0]
    return "one of " + ", ".join(quoted)


def _plural(name: str) -> str:
    irregular = {"mapping": "mappings", "secret": "secrets", "string": "strings", "path": "paths"}
    return irregular.get(name, name)


def _bounds(metadata: list[Any]) -> tuple[str, str]:
    """The bounds a field's metadata sets: of its value (``> 0``, ``0 to 65535``) and of its length
    (``1 to 128 characters``)."""
    low: tuple[str, Any] | None = None
    high: tuple[str, Any] | None = None
    min_len = max_len = None
    for item in metadata:
        if isinstance(item, annotated_types.Gt):
            low = (">", item.gt)
        elif isinstance(item, annotated_types.Ge):
            low = ("≥", item.ge)
        elif isinstance(item, annotated_types.Lt):
            high = ("<", item.lt)
        elif isinstance(item, annotated_types.Le):
            high = ("≤", item.le)
        elif isinstance(item, annotated_types.MinLen):
            min_len = item.min_length
        elif isinstance(item, annotated_types.MaxLen):
            max_len = item.max_length
    if low and high and low[0] == "≥" and high[0] == "≤":
        values = f"{_number(low[1])} to {_number(high[1])}"
    else:
        values = ", ".join(f"{bound[0]} {_number(bound[1])}" for bound in (low, high) if bound)
    length = ""
    if min_len is not None and max_len is not None:
        length = f"{min_len} to {max_len} characters"
    elif min_len is not None:
        length = "not empty" if min_len == 1 else f"at least {min_len} characters"
    elif max_len is not None:
        length = f"at most {max_len} characters"
    return values, length


def _number(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


# -- defaults --------------------------------------------------------------------------------------
def _default(info: FieldInfo, computed: str | None) -> str:
    if info.is_required():
        return "required"
    factory = info.default_factory
    if factory is not None:
        if factory in (dict, list, tuple):
            value: Any = typing.cast(Callable[[], Any], factory)()
        elif computed is not None:
            return computed
        else:
            raise DocError(f"a default_factory {factory!r} needs a computed_defaults entry")
    else:
        value = info.default
    if isinstance(value, BaseModel) and value == type(value)():
        return "`{}`"
    annotation: Any = info.annotation
    dumped = TypeAdapter(annotation).dump_python(value, mode="json")
    return f"`{_yaml(dumped)}`"


def _yaml(value: Any) -> str:
    """A YAML flow rendering of a JSON-mode value, as a user would write it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float | int):
        return _number(value)
    if isinstance(value, str):
        return value if value and re.fullmatch(r"[\w./:*@-]+", value) else f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_yaml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_yaml(v)}" for k, v in value.items()) + "}"
    raise DocError(f"no way to write the default {value!r}")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


# -- the document ----------------------------------------------------------------------------------
def render(table: Table) -> str:
    """The body of a generated block (the header and one line per key)."""
    return "\n".join((*_HEADER, *(row.render() for row in rows(table)))) + "\n"


def documented_keys(text: str) -> dict[str, dict[str, str]]:
    """Block name -> {key: row line} as the document has them."""
    blocks: dict[str, dict[str, str]] = {}
    for match in _BLOCK.finditer(text):
        found: dict[str, str] = {}
        for line in match["body"].splitlines():
            cells = _split_row(line)
            if len(cells) < 2 or cells[0] in ("Key", "---") or set(cells[0]) <= {"-"}:
                continue
            found[cells[0].strip("`")] = line
        blocks[match["name"]] = found
    return blocks


def _split_row(line: str) -> list[str]:
    if not line.startswith("|"):
        return []
    return [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]


def check(doc: Path = DOC) -> list[str]:
    """Every difference between the doc's tables and the models, one line each (empty: up to date)."""
    try:
        text = doc.read_text(encoding="utf-8")
    except OSError as exc:
        return [f"cannot read {doc}: {exc.strerror}"]
    problems: list[str] = []
    documented = documented_keys(text)
    for name in sorted(documented.keys() - {t.name for t in TABLES}):
        problems.append(f"{doc.name}: a generated block {name!r} that no table produces")
    for table in TABLES:
        try:
            wanted = {row.key: row.render() for row in rows(table)}
        except DocError as exc:
            problems.extend(str(exc).splitlines())
            continue
        if table.name not in documented:
            problems.append(f"{doc.name}: no <!-- generated:{table.name} --> block")
            continue
        have = documented[table.name]
        before = len(problems)
        for key in sorted(wanted.keys() - have.keys()):
            problems.append(f"undocumented key ({table.name}): {key}")
        for key in sorted(have.keys() - wanted.keys()):
            problems.append(f"stale key ({table.name}): {key} is in the doc but in no model")
        for key in sorted(wanted.keys() & have.keys()):
            if wanted[key] != have[key]:
                problems.append(f"changed key ({table.name}): {key}: {_what_differs(have[key], wanted[key])}")
        if len(problems) == before and list(have) != list(wanted):
            problems.append(f"{table.name}: the keys are out of order")
    return problems


def _what_differs(have: str, wanted: str) -> str:
    names = ("key", "type", "default", "environment", "meaning")
    parts = []
    for name, old, new in zip(names, _split_row(have), _split_row(wanted), strict=False):
        if old != new:
            parts.append(f"{name} {old or '(empty)'!r} in the doc, {new or '(empty)'!r} in the model")
    return "; ".join(parts) or "formatting"


def rewrite(doc: Path = DOC) -> None:
    """Replace every generated block of ``doc`` with the models' tables (the prose stays)."""
    text = doc.read_text(encoding="utf-8")
    bodies = {table.name: render(table) for table in TABLES}
    missing = bodies.keys() - {m["name"] for m in _BLOCK.finditer(text)}
    if missing:
        raise DocError(f"{doc.name} has no block for {', '.join(sorted(missing))}: add the markers by hand")

    def body(match: re.Match[str]) -> str:
        if match["name"] not in bodies:
            raise DocError(f"{doc.name}: a generated block {match['name']!r} that no table produces")
        return match["open"] + bodies[match["name"]] + match["close"]

    new = _BLOCK.sub(body, text)
    if new != text:
        doc.write_text(new, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="exit 1 (naming the keys) if the doc differs")
    parser.add_argument("--doc", type=Path, default=DOC, help="the document (default docs/configuration.md)")
    args = parser.parse_args(argv)
    if args.check:
        problems = check(args.doc)
        for problem in problems:
            print(problem, file=sys.stderr)
        if problems:
            print(
                f"{args.doc}: out of date; run .venv/bin/python scripts/gen_config_docs.py", file=sys.stderr
            )
            return 1
        return 0
    try:
        rewrite(args.doc)
    except DocError as exc:
        print(exc, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

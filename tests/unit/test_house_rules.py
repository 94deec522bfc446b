"""The house rules of docs/architecture.md that a reader can count: no hand-written module over
800 lines, no route function (a router factory or a route handler in ``control_plane/api``) over
about 40 lines. Generated code (protobuf stubs) does not count."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("control_plane", "edge_agent", "outpost_wire", "scripted_model")
MAX_MODULE_LINES = 800
MAX_ROUTE_LINES = 40


def hand_written_modules() -> list[Path]:
    found = [
        path
        for package in PACKAGES
        if (ROOT / package).is_dir()
        for path in sorted((ROOT / package).rglob("*.py"))
        if "_proto" not in path.parts and not path.name.endswith(("_pb2.py", "_pb2_grpc.py"))
    ]
    assert len(found) > 100  # the walk found the tree
    return found


def test_no_hand_written_module_is_over_800_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in hand_written_modules()
        if (n := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}


def route_functions(tree: ast.Module) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    """Router factories (``*_router``) and the methods of route classes (``_*Routes``)."""
    found: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.endswith("_router"):
            found.append(node)
        if isinstance(node, ast.ClassDef) and node.name.endswith("Routes"):
            found += [n for n in node.body if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return found


def test_no_route_function_is_over_40_lines() -> None:
    checked, long = 0, {}
    for path in sorted((ROOT / "control_plane" / "api").glob("*.py")):
        for fn in route_functions(ast.parse(path.read_text())):
            checked += 1
            lines = (fn.end_lineno or fn.lineno) - fn.lineno + 1
            if lines > MAX_ROUTE_LINES:
                long[f"{path.name}::{fn.name}"] = lines
    assert checked > 40  # every family's routes were found
    assert long == {}


def test_the_rules_catch_what_they_count() -> None:
    tree = ast.parse(
        "def big_router():\n"
        + "    x = 1\n" * 45
        + "class _ThingRoutes:\n    async def get(self):\n        pass\n"
    )
    names = [f.name for f in route_functions(tree)]
    assert names == ["big_router", "get"]
    big = route_functions(tree)[0]
    assert (big.end_lineno or 0) - big.lineno + 1 > MAX_ROUTE_LINES

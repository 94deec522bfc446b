"""Names say what they are: no two modules of the packages share a file name, but the per-package
conventions (docs/architecture.md, "Names"). Four ``events.py`` or three ``connection.py`` make a
reader open each to learn which one a traceback or a review means."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("control_plane", "edge_agent", "outpost_wire", "scripted_model")
# One per package that has the part, by convention: the name says the role, the package the subject.
CONVENTIONS = frozenset(
    {
        "__init__",
        "errors",
        "config",
        "service",
        "models",
        "commands",
        "cli",
        "server",
        "proxy",
        "policy",
        "spec",
        "addresses",
        "channel",
        "metrics",
    }
)


def module_paths() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "_proto" not in path.parts:
                found[path.stem].append(str(path.relative_to(ROOT)))
    return found


def test_no_two_modules_share_a_name_but_the_conventions() -> None:
    shared = {name: paths for name, paths in module_paths().items() if len(paths) > 1}
    assert not {name: paths for name, paths in shared.items() if name not in CONVENTIONS}

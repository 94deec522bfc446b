"""The script the edge sends to start sandboxd (edge_agent/sandbox/sandboxd/bundle.py): it carries
every module of the package, runs in a clean interpreter with nothing but the standard library, and
the modules it carries keep to what the image's ``python3`` (3.9+) can run."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
import traceback
from collections.abc import Iterator
from pathlib import Path

import pytest
from _sandboxd_local import LocalDaemon

from edge_agent.sandbox import sandboxd
from edge_agent.sandbox.channel import daemon_source
from edge_agent.sandbox.sandboxd.boot import SourceFinder
from edge_agent.sandbox.sandboxd.bundle import BOOT_MODULE, module_sources

PACKAGE_DIR = Path(sandboxd.__file__).parent


def package_modules() -> set[str]:
    return {info.name for info in pkgutil.iter_modules([str(PACKAGE_DIR)])} | {"__init__"}


def shipped_sources(script: bytes) -> dict[str, str]:
    """The dict the script hands to ``run``: its last statement is ``run({...})``."""
    last = ast.parse(script).body[-1]
    assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call)
    assert isinstance(last.value.func, ast.Name) and last.value.func.id == "run"
    sources = ast.literal_eval(last.value.args[0])
    assert isinstance(sources, dict)
    return sources


def test_the_bundle_runs_in_a_clean_interpreter(tmp_path: Path) -> None:
    # -I -S, the working directory an empty one: nothing of the edge's can be imported.
    empty = tmp_path / "empty"
    empty.mkdir()
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    daemon = LocalDaemon(workspace, cwd=empty)
    try:
        assert daemon.hello["event"] == "hello"
        assert daemon.hello["protocol"] == sandboxd.PROTOCOL_VERSION
        assert daemon.call("bash", {"command": "echo hello from the bundle"}) == (
            "hello from the bundle",
            False,
        )
        assert daemon.call("write", {"file_path": "notes.txt", "content": "one\ntwo\n"}) == (
            "wrote 8 bytes to notes.txt",
            False,
        )
        assert daemon.call("read", {"file_path": "notes.txt"}) == ("one\ntwo\n", False)
        assert daemon.call("grep", {"pattern": "tw."}) == (f"{workspace.resolve()}/notes.txt:2:two", False)
    finally:
        assert daemon.close() == 0
    assert daemon.stderr == b""
    assert list(empty.iterdir()) == []  # nothing written where it started


def test_every_module_of_the_package_is_in_the_bundle() -> None:
    script = daemon_source()
    shipped = shipped_sources(script)
    assert BOOT_MODULE not in shipped  # it is the script's start
    assert script.decode().startswith((PACKAGE_DIR / f"{BOOT_MODULE}.py").read_text(encoding="utf-8"))
    assert set(shipped) | {BOOT_MODULE} == package_modules()
    for name, source in shipped.items():
        assert source == (PACKAGE_DIR / f"{name}.py").read_text(encoding="utf-8"), name
    assert shipped == module_sources()


def test_the_bundle_is_built_once() -> None:
    assert daemon_source() is daemon_source()


@pytest.mark.parametrize("module", sorted(package_modules()))
def test_each_module_is_python39_and_imports_only_the_stdlib_and_its_package(module: str) -> None:
    tree = ast.parse((PACKAGE_DIR / f"{module}.py").read_bytes(), feature_version=(3, 9))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                # One dot: a sibling in the package (two would reach edge_agent.sandbox).
                assert node.level == 1, ast.unparse(node)
                continue
            assert node.module is not None
            names = [node.module]
        else:
            continue
        for name in names:
            assert name.partition(".")[0] in sys.stdlib_module_names, ast.unparse(node)


def test_the_script_is_python39() -> None:
    ast.parse(daemon_source(), feature_version=(3, 9))


@pytest.fixture
def finder() -> Iterator[SourceFinder]:
    package = "sandboxd_finder_test"
    found = SourceFinder(
        package,
        {
            "__init__": "from .answer import ANSWER\n",
            "answer": "ANSWER = 42\n\n\ndef fail():\n    raise ValueError('from a bundled module')\n",
        },
    )
    sys.meta_path.insert(0, found)
    try:
        yield found
    finally:
        sys.meta_path.remove(found)
        for name in [name for name in sys.modules if name.partition(".")[0] == package]:
            del sys.modules[name]


def test_the_finder_imports_the_package_from_its_sources(finder: SourceFinder) -> None:
    package = importlib.import_module("sandboxd_finder_test")
    assert package.ANSWER == 42
    assert package.__path__ == []  # a package, with no directory behind it
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sandboxd_finder_test.missing")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("sandboxd_finder_test.__init__")


def test_a_traceback_shows_the_bundled_lines(finder: SourceFinder) -> None:
    answer = importlib.import_module("sandboxd_finder_test.answer")
    with pytest.raises(ValueError) as caught:
        answer.fail()
    text = "".join(traceback.format_exception(caught.value))
    assert '"<sandboxd_finder_test>/answer.py", line 5, in fail' in text
    assert "raise ValueError('from a bundled module')" in text

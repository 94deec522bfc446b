"""The start of the script the edge sends: a loader for the rest of sandboxd.

The script (built by :mod:`.bundle`) is this module's source followed by a call of :func:`run` with
the source of every other module of the package, by module name. :func:`run` puts a finder on
``sys.meta_path`` that imports the package from those sources, as :data:`PACKAGE`, and then runs
``main`` of its :mod:`.daemon`. Nothing is written to disk. Standard library only, Python 3.9+, as
every module of the package: it runs on the image's ``python3``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import linecache
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

PACKAGE = "sandboxd"  # the package's name in the container
INIT = "__init__"


class SourceFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds and loads ``package`` and its modules from their sources, held in a dict by module
    name (``__init__`` for the package itself)."""

    def __init__(self, package: str, sources: dict[str, str]) -> None:
        self._package = package
        self._sources = sources

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        name = self._name(fullname)
        if name is None:
            return None
        return importlib.util.spec_from_loader(
            fullname, self, origin=self._filename(name), is_package=name == INIT
        )

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        return None  # the default module object

    def exec_module(self, module: ModuleType) -> None:
        name = self._name(module.__name__)
        if name is None:
            raise ImportError(f"{module.__name__} is not part of {self._package}", name=module.__name__)
        filename = self._filename(name)
        source = self._sources[name]
        # A traceback on stderr (which the edge keeps for its diagnostics) shows the lines.
        linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
        code = compile(source, filename, "exec", dont_inherit=True)
        exec(code, module.__dict__)  # noqa: S102 - the daemon's own code, sent by the edge

    def _name(self, fullname: str) -> str | None:
        """The module name within the package (``__init__`` for the package), or None."""
        if fullname == self._package:
            return INIT
        package, _, name = fullname.rpartition(".")
        if package == self._package and name != INIT and name in self._sources:
            return name
        return None

    def _filename(self, name: str) -> str:
        return f"<{self._package}>/{name}.py"


def run(sources: dict[str, str]) -> None:
    """Import the package from ``sources`` and run the daemon until stdin closes (it exits)."""
    sys.meta_path.insert(0, SourceFinder(PACKAGE, sources))
    main_loop = importlib.import_module(f"{PACKAGE}.main_loop")
    main_loop.main(sys.argv[1:])

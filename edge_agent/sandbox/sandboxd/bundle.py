"""What the edge sends to start sandboxd: one self-contained script, built from this package.

The edge runs ``python3 -u -c BOOTSTRAP`` in the container and writes ``"<length>\\n<script>"`` to
its stdin (then the frames). The script is :mod:`.boot`'s source followed by ``run({...})`` with the
source of every other module of the package, so the daemon is split into modules on the edge and
still arrives in one write: nothing is installed in the image or written into the container. The
sources are read from the package once and the script is cached.
"""

from __future__ import annotations

import functools
from importlib import resources

__all__ = ["BOOTSTRAP", "BOOT_MODULE", "module_sources", "payload"]

# The edge runs this as ``python3 -u -c BOOTSTRAP``, then writes "<len>\n<script>" and the frames.
BOOTSTRAP = (
    "import sys;n=int(sys.stdin.buffer.readline());exec(compile(sys.stdin.buffer.read(n),'sandboxd','exec'))"
)
BOOT_MODULE = "boot"  # the script's start; every other module travels in the dict it is given


def module_sources() -> dict[str, str]:
    """The source of every module of the package but :mod:`.boot`, by module name (``__init__``
    for the package itself)."""
    package = resources.files(__package__)
    return {
        entry.name[: -len(".py")]: entry.read_text(encoding="utf-8")
        for entry in sorted(package.iterdir(), key=lambda entry: entry.name)
        if entry.is_file() and entry.name.endswith(".py") and entry.name != f"{BOOT_MODULE}.py"
    }


@functools.cache
def payload() -> bytes:
    """The script, as sent to every sandbox (built once)."""
    boot = resources.files(__package__).joinpath(f"{BOOT_MODULE}.py").read_text(encoding="utf-8")
    return f"{boot}\nrun({module_sources()!r})\n".encode()

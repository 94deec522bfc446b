"""The software version both sides report in hello / welcome."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["DISTRIBUTION", "SOFTWARE_VERSION"]

#: The distribution's name on package indexes (``pip install outpost-runtime``); "outpost" there is
#: an unrelated project.
DISTRIBUTION = "outpost-runtime"

try:
    SOFTWARE_VERSION = version(DISTRIBUTION)
except PackageNotFoundError:  # running from a source tree that is not installed
    SOFTWARE_VERSION = "0.0.0+unknown"

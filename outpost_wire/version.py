"""The software version both sides report in hello / welcome."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

__all__ = ["SOFTWARE_VERSION"]

try:
    SOFTWARE_VERSION = version("outpost")
except PackageNotFoundError:  # running from a source tree that is not installed
    SOFTWARE_VERSION = "0.0.0+unknown"

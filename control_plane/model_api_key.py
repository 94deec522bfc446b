"""The model API key: from a file the configuration names (``model_api_key_file``, or
``$ANTHROPIC_API_KEY_FILE``; a systemd credential under the unit), else ``$ANTHROPIC_API_KEY``.

An empty file means no key. The key itself is never logged and never put in an error message;
only the file's path is."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from control_plane.config import ControlPlaneConfig
from control_plane.errors import ControlPlaneError

__all__ = ["ENV_KEY", "ENV_KEY_FILE", "ModelApiKeyFileError", "model_api_key", "model_api_key_file"]

ENV_KEY = "ANTHROPIC_API_KEY"
ENV_KEY_FILE = "ANTHROPIC_API_KEY_FILE"


class ModelApiKeyFileError(ControlPlaneError):
    """The model API key file is missing, unreadable or malformed (``.path``, ``.reason``)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"model API key file {path}: {reason}")
        self.path = path
        self.reason = reason


def model_api_key_file(config: ControlPlaneConfig, environ: Mapping[str, str]) -> Path | None:
    """The key file in effect: the config's, else ``$ANTHROPIC_API_KEY_FILE``, else None."""
    if config.model_api_key_file is not None:
        return config.model_api_key_file
    name = environ.get(ENV_KEY_FILE, "")
    return Path(name) if name else None


def model_api_key(config: ControlPlaneConfig, environ: Mapping[str, str]) -> str | None:
    """The model API key, or None for none. A named file must exist and be readable (a missing
    mounted secret is an error, not silently no key); surrounding whitespace is dropped."""
    path = model_api_key_file(config, environ)
    if path is None:
        return environ.get(ENV_KEY, "").strip() or None
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ModelApiKeyFileError(path, "no such file") from None
    except IsADirectoryError:
        raise ModelApiKeyFileError(path, "is a directory, not a file") from None
    except PermissionError:
        raise ModelApiKeyFileError(path, f"not readable by uid {os.getuid()}") from None
    except OSError as exc:
        raise ModelApiKeyFileError(path, exc.strerror or type(exc).__name__) from None
    except UnicodeDecodeError:
        raise ModelApiKeyFileError(path, "not UTF-8 text") from None
    key = text.strip()
    if any(c.isspace() for c in key):
        raise ModelApiKeyFileError(path, "holds more than one word (expected the key alone)")
    return key or None

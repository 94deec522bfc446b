"""sandboxd: the tool daemon that runs inside a sandbox container.

The edge starts it with a single ``docker exec`` per container, as the sandbox user, with a bootstrap
that reads one script from stdin (see :mod:`.bundle`): the package's modules travel in it, and
:mod:`.boot` imports them from memory, so it works in any image that has ``python3`` (3.9+): nothing
is installed in or mounted into the image. Every module uses the standard library only and imports
nothing outside this package (relative imports only: the package is ``sandboxd`` in the container).

Protocol, over the exec's stdin/stdout (stderr is for diagnostics only):

* every frame is a 4-byte big-endian length followed by that many bytes of UTF-8 JSON;
* edge → daemon: ``{"id": int, "tool": str, "input": {...}, "timeout_ms": int}`` runs a tool;
  ``{"cancel": int}`` cancels the request with that id (kills the running bash command);
* daemon → edge: first ``{"event": "hello", "protocol": 1, ...}`` once ready, then one
  ``{"id": int, "content": [block, ...], "is_error": bool}`` per request, in completion order.
  A block is ``{"type": "text", "text": str}`` or
  ``{"type": "image" | "document", "media_type": str, "data_b64": str}``.

The daemon writes nothing before it has read its own source, and it exits when stdin closes
(killing its shells). Bad input never kills it: every failure becomes an ``is_error`` response.

Tools follow ``agent_toolset_20260401``: ``bash`` (one persistent shell; calls are serialized),
``read``, ``write``, ``edit``, ``glob``, ``grep`` (file tools run concurrently, confined to the
workspace root ``$SANDBOXD_ROOT`` (``/workspace``) and the mounts root ``$SANDBOXD_MOUNTS_ROOT``
(``/mnt``: memory stores, skills, uploads; absolute paths only); every path is resolved without a
check-then-open race, see :mod:`.paths`). ``$SANDBOXD_QUOTA_BYTES`` sets a soft size quota on the
workspace only (see :mod:`.quota`). The hello also reports ``openat2`` (which resolver runs),
``mounts_root`` and ``quota_bytes``.

Modules: :mod:`.main_loop` (the frame loop and dispatch), :mod:`.bash` (the shell),
:mod:`.file_tools` (read, write, edit), :mod:`.search` (glob, grep), :mod:`.paths` (the path policy),
:mod:`.quota`, :mod:`.common` (results, errors, input checks); :mod:`.boot` and :mod:`.bundle`
(the script sent to the container).
"""

from __future__ import annotations

from .bundle import BOOTSTRAP, payload
from .common import MOUNTS_ENV, NO_RG_ENV, QUOTA_ENV, ROOT_ENV
from .main_loop import PROTOCOL_VERSION

__all__ = ["BOOTSTRAP", "MOUNTS_ENV", "NO_RG_ENV", "PROTOCOL_VERSION", "QUOTA_ENV", "ROOT_ENV", "payload"]

"""The cyclic garbage collector of a serving process (``gc_thresholds``).

Python's defaults (700, 10, 10) suit short scripts. A control plane holds many long-lived objects
(sessions' folded state, open streams and connections, the imported code itself), and every
collection of the older generations walks all of them: at 200 busy sessions a quarter of the
process's CPU went to the collector (`bench/bench_turn_cpu.py`). Once serving, the process:

* collects once, then **freezes** what is alive (``gc.freeze``): the code, configuration and
  start-up objects are never walked again;
* raises the youngest generation's threshold (``gc_thresholds[0]``, default 50,000 allocations), so
  a collection runs every few hundred turns, not several times per turn. Garbage that only the
  collector can free (reference cycles) waits that much longer: a few megabytes at most.

Reference counting frees everything else at once, whatever the thresholds.
"""

from __future__ import annotations

import gc
import logging
from collections.abc import Sequence

__all__ = ["tune_for_serving"]

log = logging.getLogger(__name__)


def tune_for_serving(thresholds: Sequence[int] | None) -> None:
    """Collect, freeze the survivors, then set ``thresholds`` (``None``: Python's own, unchanged)."""
    gc.collect()
    gc.freeze()
    if thresholds is not None:
        gc.set_threshold(*thresholds)
    log.debug("gc: %d objects frozen, thresholds %s", gc.get_freeze_count(), gc.get_threshold())

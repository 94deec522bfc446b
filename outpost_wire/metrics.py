"""A tiny, dependency-free metrics registry that renders the Prometheus text format (0.0.4).

Both the control plane and the edge use it (``prometheus_client`` is not a dependency)::

    registry = Registry()
    calls = registry.counter("outpost_tool_calls_total", "Tool calls.", ("tool", "outcome"))
    latency = registry.histogram("outpost_tool_call_duration_seconds", "Tool call latency.", ("tool",))
    registry.gauge_func("outpost_tunnel_up", "1 while the tunnel is up.", (), lambda: {(): 1.0})

    calls.labels("bash", "ok").inc()
    latency.labels("bash").observe(0.25)
    text = registry.render()  # serve with CONTENT_TYPE

Families:

* :class:`Counter`: only goes up (``inc``).
* :class:`Gauge`: ``set`` / ``inc`` / ``dec``.
* :class:`Histogram`: cumulative ``_bucket{le=...}`` series plus ``_sum`` and ``_count``.
* function families (:meth:`Registry.gauge_func`, :meth:`Registry.counter_func`): values read at
  render time from a callback returning ``{label values: value}``; for figures another object
  already keeps (a link's handshake count, the number of live sandboxes).

Label values are escaped (backslash, double quote, newline); names are validated when a family is
registered. Updates take a lock, so a value may be changed from a worker thread, but the registry
holds no global state: each process makes its own and passes it down.
"""

from __future__ import annotations

import math
import re
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence

__all__ = [
    "CONTENT_TYPE",
    "DEFAULT_BUCKETS",
    "Counter",
    "Gauge",
    "Histogram",
    "Registry",
    "escape_label_value",
    "format_value",
]

#: The ``Content-Type`` of :meth:`Registry.render`'s output.
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

#: Latency buckets in seconds, from 5 ms to 10 min (tool calls and model requests are slow).
DEFAULT_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    120.0,
    300.0,
    600.0,
)

_METRIC_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")

LabelValues = tuple[str, ...]
Sampler = Callable[[], Mapping[LabelValues, float]]


def escape_label_value(value: str) -> str:
    """A label value as it goes between the double quotes of the text format."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value: integers without a fraction, ``+Inf`` / ``-Inf`` / ``NaN`` spelled out."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _labels_text(names: Sequence[str], values: Sequence[str], extra: tuple[str, str] | None = None) -> str:
    pairs = [f'{n}="{escape_label_value(v)}"' for n, v in zip(names, values, strict=True)]
    if extra is not None:
        pairs.append(f'{extra[0]}="{escape_label_value(extra[1])}"')
    return "{" + ",".join(pairs) + "}" if pairs else ""


class _Family:
    """A metric family: a name, a help text, label names, and one child per label-value tuple."""

    kind = "untyped"

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str]) -> None:
        if not _METRIC_NAME.match(name):
            raise ValueError(f"invalid metric name {name!r}")
        for label in labelnames:
            if not _LABEL_NAME.match(label) or label.startswith("__"):
                raise ValueError(f"invalid label name {label!r} for {name}")
        if len(set(labelnames)) != len(labelnames):
            raise ValueError(f"duplicate label names for {name}: {labelnames}")
        self.name = name
        self.help = help_text
        self.labelnames = tuple(labelnames)
        self._lock = threading.Lock()

    def _key(self, values: Sequence[object]) -> LabelValues:
        if len(values) != len(self.labelnames):
            raise ValueError(f"{self.name} takes labels {self.labelnames}, got {len(values)} value(s)")
        return tuple(str(v) for v in values)

    def header(self) -> list[str]:
        return [f"# HELP {self.name} {_escape_help(self.help)}", f"# TYPE {self.name} {self.kind}"]

    def samples(self) -> list[str]:  # pragma: no cover - overridden
        raise NotImplementedError


class _Value:
    """One series of a counter or gauge."""

    __slots__ = ("_lock", "value")

    def __init__(self, lock: threading.Lock) -> None:
        self._lock = lock
        self.value = 0.0


class CounterChild(_Value):
    """One labelled series of a :class:`Counter`."""

    __slots__ = ()

    def inc(self, amount: float = 1.0) -> None:
        if amount < 0:
            raise ValueError("a counter cannot go down")
        with self._lock:
            self.value += amount


class GaugeChild(_Value):
    """One labelled series of a :class:`Gauge`."""

    __slots__ = ()

    def set(self, value: float) -> None:
        with self._lock:
            self.value = float(value)

    def inc(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value += amount

    def dec(self, amount: float = 1.0) -> None:
        with self._lock:
            self.value -= amount


class _Scalar(_Family):
    _child_type: type[_Value] = _Value

    def __init__(self, name: str, help_text: str, labelnames: Sequence[str]) -> None:
        super().__init__(name, help_text, labelnames)
        self._children: dict[LabelValues, _Value] = {}

    def _child(self, values: Sequence[object]) -> _Value:
        key = self._key(values)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = self._child_type(self._lock)
            return child

    def value(self, *labelvalues: object) -> float:
        """The current value of one series (0 if it was never touched); for tests."""
        child = self._children.get(self._key(labelvalues))
        return child.value if child is not None else 0.0

    def remove(self, *labelvalues: object) -> None:
        """Forget one series (a gauge for an edge that is gone, say)."""
        with self._lock:
            self._children.pop(self._key(labelvalues), None)

    def samples(self) -> list[str]:
        with self._lock:
            items = sorted((k, c.value) for k, c in self._children.items())
        return [f"{self.name}{_labels_text(self.labelnames, k)} {format_value(v)}" for k, v in items]


class Counter(_Scalar):
    """A monotonically increasing count. Name it ``*_total``."""

    kind = "counter"
    _child_type = CounterChild

    def labels(self, *labelvalues: object) -> CounterChild:
        child = self._child(labelvalues)
        assert isinstance(child, CounterChild)
        return child

    def inc(self, amount: float = 1.0) -> None:
        """Increment the unlabelled series."""
        self.labels().inc(amount)


class Gauge(_Scalar):
    """A value that goes up and down."""

    kind = "gauge"
    _child_type = GaugeChild

    def labels(self, *labelvalues: object) -> GaugeChild:
        child = self._child(labelvalues)
        assert isinstance(child, GaugeChild)
        return child

    def set(self, value: float) -> None:
        """Set the unlabelled series."""
        self.labels().set(value)


class HistogramChild:
    """One labelled series of a :class:`Histogram`."""

    __slots__ = ("_bounds", "_lock", "buckets", "count", "sum")

    def __init__(self, lock: threading.Lock, bounds: tuple[float, ...]) -> None:
        self._lock = lock
        self._bounds = bounds
        self.buckets = [0] * len(bounds)  # not cumulative; rendered cumulatively
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float) -> None:
        with self._lock:
            for i, bound in enumerate(self._bounds):
                if value <= bound:
                    self.buckets[i] += 1
                    break
            self.count += 1
            self.sum += value


class Histogram(_Family):
    """Observations counted into buckets (upper bounds, ``le``) plus their sum and count."""

    kind = "histogram"

    def __init__(
        self,
        name: str,
        help_text: str,
        labelnames: Sequence[str],
        buckets: Iterable[float] = DEFAULT_BUCKETS,
    ) -> None:
        if "le" in labelnames:
            raise ValueError(f"{name}: 'le' is reserved for histogram buckets")
        super().__init__(name, help_text, labelnames)
        bounds = sorted(float(b) for b in buckets)
        if not bounds or len(set(bounds)) != len(bounds):
            raise ValueError(f"{name}: buckets must be distinct and at least one")
        if bounds[-1] != math.inf:
            bounds.append(math.inf)
        self.bounds = tuple(bounds)
        self._children: dict[LabelValues, HistogramChild] = {}

    def labels(self, *labelvalues: object) -> HistogramChild:
        key = self._key(labelvalues)
        with self._lock:
            child = self._children.get(key)
            if child is None:
                child = self._children[key] = HistogramChild(self._lock, self.bounds)
            return child

    def observe(self, value: float) -> None:
        """Observe into the unlabelled series."""
        self.labels().observe(value)

    def samples(self) -> list[str]:
        out: list[str] = []
        with self._lock:
            items = sorted((k, list(c.buckets), c.count, c.sum) for k, c in self._children.items())
        for key, buckets, count, total in items:
            cumulative = 0
            for bound, n in zip(self.bounds, buckets, strict=True):
                cumulative += n
                labels = _labels_text(self.labelnames, key, ("le", format_value(bound)))
                out.append(f"{self.name}_bucket{labels} {cumulative}")
            labels = _labels_text(self.labelnames, key)
            out.append(f"{self.name}_sum{labels} {format_value(total)}")
            out.append(f"{self.name}_count{labels} {count}")
        return out


class _FuncFamily(_Family):
    def __init__(
        self, kind: str, name: str, help_text: str, labelnames: Sequence[str], sampler: Sampler
    ) -> None:
        super().__init__(name, help_text, labelnames)
        self.kind = kind
        self._sampler = sampler

    def samples(self) -> list[str]:
        values = self._sampler()
        return [
            f"{self.name}{_labels_text(self.labelnames, self._key(k))} {format_value(v)}"
            for k, v in sorted(values.items())
        ]


class Registry:
    """The metric families of one process, rendered together."""

    def __init__(self) -> None:
        self._families: dict[str, _Family] = {}
        self._lock = threading.Lock()

    def _add(self, family: _Family) -> None:
        with self._lock:
            if family.name in self._families:
                raise ValueError(f"metric {family.name} is already registered")
            self._families[family.name] = family

    def counter(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> Counter:
        family = Counter(name, help_text, labelnames)
        self._add(family)
        return family

    def gauge(self, name: str, help_text: str, labelnames: Sequence[str] = ()) -> Gauge:
        family = Gauge(name, help_text, labelnames)
        self._add(family)
        return family

    def histogram(
        self,
        name: str,
        help_text: str,
        labelnames: Sequence[str] = (),
        buckets: Iterable[float] = DEFAULT_BUCKETS,
    ) -> Histogram:
        family = Histogram(name, help_text, labelnames, buckets)
        self._add(family)
        return family

    def gauge_func(self, name: str, help_text: str, labelnames: Sequence[str], sampler: Sampler) -> None:
        """A gauge whose series are read from ``sampler()`` at render time."""
        self._add(_FuncFamily("gauge", name, help_text, labelnames, sampler))

    def counter_func(self, name: str, help_text: str, labelnames: Sequence[str], sampler: Sampler) -> None:
        """A counter kept elsewhere (it must only go up), read from ``sampler()`` at render time."""
        self._add(_FuncFamily("counter", name, help_text, labelnames, sampler))

    def render(self) -> str:
        """Every family in the text format, ending with a newline. A sampler that raises is left
        out of this scrape (its header stays) rather than failing the whole scrape."""
        with self._lock:
            families = list(self._families.values())
        lines: list[str] = []
        for family in families:
            lines.extend(family.header())
            try:
                lines.extend(family.samples())
            except Exception:  # noqa: S112 - a broken callback must not take the scrape down
                continue
        return "\n".join(lines) + "\n"

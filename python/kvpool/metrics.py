# SPDX-License-Identifier: Apache-2.0
"""kvpool.metrics — pools' statistics as prometheus_client metric families.

Owns ``PoolCollector``, a prometheus_client collector: each scrape renders
every registered pool's statistics with the library's own exposition
(``Pool.prometheus``, so names, types and help texts are the C library's,
including vLLM's ``kv_cache_usage_perc``, ``prefix_cache_queries`` and
``prefix_cache_hits``) and yields one family per metric with one sample per
pool, each carrying that pool's labels.  It needs Debian's
python3-prometheus-client; nothing else in the package imports this module.

    >>> import kvpool, prometheus_client
    >>> from kvpool.metrics import PoolCollector
    >>> pool = kvpool.Pool(block_size=16, num_blocks=1024)
    >>> collector = PoolCollector(prefix="vllm:")
    >>> collector.add(pool, model_name="llama", pool="gpu0")
    >>> registry = prometheus_client.CollectorRegistry()
    >>> registry.register(collector)
    >>> registry.get_sample_value("vllm:kv_cache_usage_perc",
    ...                           {"model_name": "llama", "pool": "gpu0"})
    0.0

Invariants: every pool of one collector has the same label names (a
family's samples differ only in their values), no two pools have the same
label values (a series is never reported twice), and the label names follow
the C library's rule: letters, digits and '_', not starting with a digit or
"__", "group" and "tier" reserved for samples split by those dimensions.
"""
from __future__ import annotations

import re
import threading

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from . import _kvpool

__all__ = ["PoolCollector"]

_LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RESERVED = frozenset(("group", "tier"))


def _native(pool):
    """The kvpool.Pool behind `pool`: itself, or a drop-in's ``.pool``."""
    if isinstance(pool, _kvpool.Pool):
        return pool
    inner = getattr(pool, "pool", None)
    if isinstance(inner, _kvpool.Pool):
        return inner
    raise TypeError(f"expected a kvpool.Pool or a drop-in with .pool, got {type(pool).__name__}")


def _check_label_names(names):
    """Refuse label names Prometheus or the exposition reserves."""
    for name in names:
        if not _LABEL_NAME.match(name) or name.startswith("__") or name in _RESERVED:
            raise ValueError(f"bad or reserved label name {name!r}")


class PoolCollector:
    """A prometheus_client collector over one or more pools.

    ``prefix`` is the metric name prefix (as ``Pool.prometheus``: "kvpool"
    by default; one ending in ':' such as "vllm:" is followed directly by
    the metric's name).  ``add(pool, **labels)`` registers a pool with its
    label values; ``remove(pool)`` drops it.  Closed pools are skipped at
    scrape time.  Safe to use from several threads: registration is locked
    and a scrape works on a copy of the list.
    """

    def __init__(self, pool=None, /, *, prefix: str = "kvpool", **labels):
        """Create the collector, optionally with a first pool and its labels."""
        if not isinstance(prefix, str):
            raise TypeError("prefix must be a str")
        self._prefix = prefix
        self._lock = threading.Lock()
        self._pools: list = []
        self._names: tuple | None = None
        if pool is not None:
            self.add(pool, **labels)

    def add(self, pool, /, **labels) -> None:
        """Register `pool` (a kvpool.Pool or a drop-in with ``.pool``) with
        its label values (str).  Raises TypeError or ValueError and changes
        nothing on a bad pool, a bad or reserved label name, label names
        that differ from the first pool's, label values another pool
        already has, or a pool already registered."""
        native = _native(pool)
        _check_label_names(labels)
        values = {k: str(v) for k, v in labels.items()}
        native.prometheus(self._prefix)  # a bad prefix raises here, before anything changes
        with self._lock:
            if self._names is not None and set(self._names) != set(values):
                raise ValueError(f"label names {sorted(values)} differ from {sorted(self._names)}")
            for other, other_values in self._pools:
                if other is native:
                    raise ValueError("pool already registered")
                if other_values == values:
                    raise ValueError(f"labels {values} already used by another pool")
            if self._names is None:
                self._names = tuple(values)
            self._pools.append((native, values))

    def remove(self, pool) -> None:
        """Drop `pool`; ValueError if it is not registered."""
        native = _native(pool)
        with self._lock:
            for i, (other, _values) in enumerate(self._pools):
                if other is native:
                    del self._pools[i]
                    return
        raise ValueError("pool not registered")

    def collect(self):
        """Yield one metric family per library metric, one sample per open
        pool, labelled with that pool's labels."""
        with self._lock:
            pools = list(self._pools)
        families: dict = {}
        for pool, values in pools:
            if pool.closed:
                continue
            for fam in text_string_to_metric_families(pool.prometheus(self._prefix)):
                out = families.get(fam.name)
                if out is None:
                    out = families[fam.name] = Metric(fam.name, fam.documentation, fam.type)
                for sample in fam.samples:
                    out.add_sample(sample.name, {**sample.labels, **values}, sample.value)
        yield from families.values()

"""Read the metrics a signal asked for (``required_metrics``) and name them as the signal expects.

The store keys carry the app prefix (``app,name``) or the cluster/pool dimensions
(``name|cluster=..,pool=..``); the signal sees bare names, as Clusterman's signals always have.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config import RequiredMetric
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import app_key
from clusterman.datastore.store import split_key
from clusterman.datastore.store import system_key
from clusterman_signals.wire import gc_paused

Window = dict[str, Sequence[Sequence[Any]]]


def read_required_metrics(
    store: MetricsStore, required: tuple[RequiredMetric, ...], app: str, identity: PoolIdentity, now: int
) -> Window:
    window: Window = {}
    with gc_paused():  # a long window is a million small objects, none of them garbage
        for metric in required:
            start = now - metric.minute_range * 60
            for key, name in _keys_for(store, metric, app, identity):
                # the store's (timestamp, value) pairs as they are: a day of points a metric each
                # run is too many to copy again (a socket sends them as JSON arrays either way)
                window[name] = store.read(metric.type, key, start, now)
    return window


def _keys_for(store: MetricsStore, metric: RequiredMetric, app: str, identity: PoolIdentity) -> list[tuple[str, str]]:
    """(store key, name the signal sees) for one required metric; a regex may match several."""
    if metric.type is MetricType.APP_METRICS:
        prefix = app_key(app, "")
        if not metric.regex:
            return [(app_key(app, metric.name), metric.name)]
        keys = store.keys(MetricType.APP_METRICS, prefix=prefix, regex=re.escape(prefix) + metric.name)
        return [(key, key[len(prefix) :]) for key in keys]
    # system metrics and metadata carry the cluster and pool as dimensions
    if not metric.regex:
        return [(system_key(metric.name, identity.cluster, identity.pool_with_scheduler), metric.name)]
    pattern = re.compile(metric.name)
    wanted = {"cluster": identity.cluster, "pool": identity.pool_with_scheduler}
    matches = []
    for key in store.keys(metric.type):
        name, dims = split_key(key)
        if dims == wanted and pattern.fullmatch(name):
            matches.append((key, name))
    return matches

"""The read-only metrics store on Prometheus: each required metric is a PromQL expression.

A pool's ``prometheus_queries`` maps metric names to PromQL; ``$cluster``, ``$pool``,
``$scheduler`` and ``$app`` are filled in from the key being read (its dimensions, or the app of an
``app,name`` key), falling back to the pool's identity. The window is read with ``query_range`` at
``step_seconds`` resolution, on step-aligned timestamps so successive reads line up. A query must
yield at most one series (aggregate with ``sum``/``max``); no series is an empty window. Samples
that are not finite (``NaN`` from 0/0, ``+Inf``) are skipped. Prometheus keeps its own history, so
``write`` refuses: the collector writes to SQLite or DynamoDB.
"""

from __future__ import annotations

import math
import string
from collections.abc import Iterable
from typing import Any

import requests

from clusterman.core.config import MetricType
from clusterman.core.config import PoolIdentity
from clusterman.core.config import PrometheusQueries
from clusterman.core.config import split_scheduler
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import Series
from clusterman.datastore.store import matching_keys
from clusterman.datastore.store import split_key
from clusterman.datastore.store import system_key

MAX_POINTS_PER_QUERY = 10_000  # Prometheus refuses more than 11,000 points per series per query_range


class PrometheusStore(MetricsStore):
    """``PrometheusStore(url, queries, identity)``; one HTTP session, opened on first use."""

    def __init__(
        self,
        url: str,
        queries: PrometheusQueries,
        identity: PoolIdentity,
        step_seconds: int = 60,
        timeout_seconds: float = 10.0,
        attempts: int = 2,
    ) -> None:
        self.url = url.rstrip("/")
        self.queries = queries
        self.identity = identity
        self.step_seconds = step_seconds
        self.timeout_seconds = timeout_seconds
        self.attempts = attempts
        self._session: requests.Session | None = None

    def write(self, points: Iterable[Point]) -> None:
        if any(True for _ in points):
            raise MetricsError(
                f"Prometheus at {self.url} is a read-only metrics store; "
                "write metrics to SQLite or DynamoDB (metrics.backend), or export them to Prometheus"
            )

    def create(self) -> list[str]:
        raise MetricsError(f"Prometheus at {self.url} is a read-only metrics store: there is nothing to create")

    def query_for(self, metric_type: MetricType, key: str) -> str:
        """The PromQL for one store key, its variables filled in."""
        variables = {
            "cluster": self.identity.cluster,
            "pool": self.identity.pool,
            "scheduler": self.identity.scheduler.value,
        }
        if metric_type is MetricType.APP_METRICS:
            variables["app"] = key.partition(",")[0]
            lookup = key
        else:
            name, dimensions = split_key(key)
            lookup = name
            variables.update({k: v for k, v in dimensions.items() if k != "pool"})
            if "pool" in dimensions:
                pool, scheduler = split_scheduler(dimensions["pool"])
                variables["pool"] = pool
                variables["scheduler"] = scheduler.value if scheduler is not None else variables["scheduler"]
        template = self.queries.for_type(metric_type).get(lookup)
        if template is None:
            raise MetricsError(
                f"no PromQL for {metric_type.value} {lookup!r}: add it to the pool's "
                f"prometheus_queries.{metric_type.value} ({self.identity})"
            )
        try:
            return string.Template(template).substitute(variables)
        except KeyError as e:
            raise MetricsError(f"PromQL for {lookup!r} uses ${e.args[0]}, which key {key!r} does not give") from e

    def read(self, metric_type: MetricType, key: str, start: int, end: int) -> Series:
        query = self.query_for(metric_type, key)
        step = self.step_seconds
        first = -(-start // step) * step  # the first step boundary inside the window
        series: Series = []
        chunk_start = first
        while chunk_start <= end:
            chunk_end = min(end, chunk_start + (MAX_POINTS_PER_QUERY - 1) * step)
            series.extend(self._query_range(query, chunk_start, chunk_end))
            chunk_start = chunk_end + step
        return series

    def _query_range(self, query: str, start: int, end: int) -> Series:
        params = {"query": query, "start": str(start), "end": str(end), "step": str(self.step_seconds)}
        body = self._get("/api/v1/query_range", params, query)
        data = body.get("data")
        results = data.get("result") if isinstance(data, dict) else None
        if not isinstance(results, list):
            raise MetricsError(f"Prometheus at {self.url}: unexpected answer to {query!r}: {str(body)[:200]}")
        if len(results) > 1:
            labels = ", ".join(str(r.get("metric", {})) for r in results[:3])
            raise MetricsError(
                f"PromQL {query!r} returned {len(results)} series ({labels}, ...); "
                "a metric needs one: aggregate it, e.g. sum(...)"
            )
        series: Series = []
        try:
            for ts, text in results[0]["values"] if results else []:
                value = float(text)
                if math.isfinite(value):
                    series.append((int(ts), value))
        except (KeyError, TypeError, ValueError) as e:
            raise MetricsError(f"Prometheus at {self.url}: unreadable samples for {query!r}: {e!r}") from e
        return series

    def _get(self, path: str, params: dict[str, str], query: str) -> dict[str, Any]:
        if self._session is None:
            self._session = requests.Session()
        problem = ""
        for _ in range(self.attempts):
            try:
                response = self._session.get(self.url + path, params=params, timeout=self.timeout_seconds)
            except requests.RequestException as e:
                problem = f"cannot reach Prometheus at {self.url}: {e}"
                continue
            try:
                body = response.json()
            except ValueError:
                body = None
            if isinstance(body, dict) and body.get("status") == "success":
                return body
            if isinstance(body, dict) and body.get("status") == "error":
                problem = f"Prometheus at {self.url} refused {query!r}: {body.get('errorType')}: {body.get('error')}"
                if response.status_code < 500:  # a bad query stays bad: no point asking again
                    break
            else:
                problem = f"Prometheus at {self.url} answered HTTP {response.status_code}: {response.text[:200]!r}"
        raise MetricsError(problem)

    def keys(self, metric_type: MetricType, prefix: str = "", regex: str | None = None) -> list[str]:
        """The keys this pool has queries for (Prometheus' own series names are not store keys)."""
        names = self.queries.for_type(metric_type)
        if metric_type is MetricType.APP_METRICS:
            return matching_keys(names, prefix, regex)
        pool = self.identity.pool_with_scheduler
        return matching_keys((system_key(name, self.identity.cluster, pool) for name in names), prefix, regex)

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None

    def __repr__(self) -> str:
        return f"PrometheusStore({self.url!r}, {self.identity})"

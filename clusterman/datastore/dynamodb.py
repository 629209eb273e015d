"""The metrics store on DynamoDB, in Clusterman's layout, so a Clusterman deployment's data reads back.

Three tables (``clusterman_system_metrics``, ``clusterman_app_metrics``, ``clusterman_metadata`` by
default), hash key ``key`` (S), range key ``timestamp`` (N). A number is the attribute ``value``; a
mapping such as ``fulfilled_capacity`` is one numeric attribute per entry (``<m5.large, us-west-2a>``),
as Clusterman stores it. With a retention, every item carries the TTL attribute
(``expiration_timestamp`` by default) = its timestamp + the retention, in Unix seconds: DynamoDB
expires each item on its own against the wall clock, so one item never shortens another's life.
Points more than a few minutes ahead of this host's clock (milliseconds, a wrong clock) are
refused before anything is sent: their TTL would keep them forever.

Writes go in ``BatchWriteItem`` requests of 25, several at once; items DynamoDB leaves unprocessed
are retried with backoff. Reads are paginated ``Query`` calls, one per key, several at once.
``keys()`` has to ``Scan`` (DynamoDB cannot list hash keys otherwise): fine for app-metric regexes
on modest tables, costly on big ones.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any
from typing import TypeVar

from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError

from clusterman.aws.session import AwsCredentialsError
from clusterman.aws.session import AwsSettings
from clusterman.aws.session import budget_config
from clusterman.aws.session import client as aws_client
from clusterman.aws.tables import UNUSABLE_TABLE_CODES
from clusterman.aws.tables import TableSpec
from clusterman.aws.tables import ensure_table
from clusterman.core.config import DynamoDBMetricsConfig
from clusterman.core.config import MetricType
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import Series
from clusterman.datastore.store import UnusableStore
from clusterman.datastore.store import Value
from clusterman.datastore.store import check_not_future
from clusterman.datastore.store import matching_keys

log = logging.getLogger(__name__)

BATCH_SIZE = 25  # DynamoDB's limit per BatchWriteItem
THROTTLED = frozenset({"ProvisionedThroughputExceededException", "ThrottlingException", "RequestLimitExceeded"})
T = TypeVar("T")
Item = dict[str, dict[str, str]]


class DynamoDBStore(MetricsStore):
    """``DynamoDBStore(AwsSettings(...), DynamoDBMetricsConfig())``; the client is made on first use."""

    def __init__(
        self,
        settings: AwsSettings,
        tables: DynamoDBMetricsConfig,
        retention_days: int = 0,
        *,
        max_attempts: int = 5,
        connect_timeout_seconds: float = 5.0,
        read_timeout_seconds: float = 10.0,
        concurrency: int = 8,
        page_size: int | None = None,
        backoff_seconds: float = 0.05,
        clock: Callable[[], float] = time.time,
        call_budget_seconds: float | None = None,
    ) -> None:
        """``call_budget_seconds`` bounds one call with all its attempts. A run has a budget, and
        a DynamoDB that does not answer must not spend it on retries."""
        self.settings = settings
        self.tables = tables
        self.retention_seconds = retention_days * 86400
        self.max_attempts = max_attempts
        self.connect_timeout_seconds = connect_timeout_seconds
        self.read_timeout_seconds = read_timeout_seconds
        self.concurrency = concurrency
        self.page_size = page_size
        self.backoff_seconds = backoff_seconds
        self.clock = clock
        self.call_budget_seconds = call_budget_seconds
        self._client: Any = None
        self._lock = threading.Lock()
        self._reserved = {"key", "timestamp", "value", tables.ttl_attribute}

    @property
    def where(self) -> str:
        return self.settings.endpoint_url or f"region {self.settings.region}"

    def _dynamodb(self) -> Any:
        with self._lock:
            if self._client is None:
                timeouts = {
                    "connect_timeout": self.connect_timeout_seconds,
                    "read_timeout": self.read_timeout_seconds,
                    **budget_config(self.call_budget_seconds),  # a run's budget, when given, decides
                }
                self._client = self._guard(
                    "connect",
                    "",
                    lambda: aws_client(
                        self.settings,
                        "dynamodb",
                        retries={"total_max_attempts": self.max_attempts, "mode": "standard"},
                        **timeouts,
                        max_pool_connections=max(10, self.concurrency),
                    ),
                )
            return self._client

    def _guard(self, action: str, table: str, fn: Callable[[], T]) -> T:
        """Run ``fn``, turning any botocore failure into one MetricsError naming the table and endpoint."""
        on = f" table {table}" if table else ""
        try:
            return fn()
        except ClientError as e:
            error = e.response.get("Error", {})
            code, message = error.get("Code", "?"), error.get("Message", "")
            if code == "ResourceNotFoundException":
                raise UnusableStore(
                    f"DynamoDB{on} not found at {self.where} (`clusterman metrics init` creates the tables)"
                ) from e
            if code in THROTTLED:
                raise MetricsError(
                    f"DynamoDB{on}: {action} throttled ({code}) after {self.max_attempts} attempts"
                ) from e
            failed = UnusableStore if code in UNUSABLE_TABLE_CODES else MetricsError
            raise failed(f"DynamoDB{on}: {action} failed at {self.where}: {code}: {message}") from e
        except (BotoCoreError, AwsCredentialsError) as e:
            raise MetricsError(f"cannot reach DynamoDB at {self.where} to {action}{on}: {e}") from e

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.close()
                self._client = None

    # -- items ----------------------------------------------------------------------------------

    def _item(self, p: Point) -> Item:
        item: Item = {"key": {"S": p.key}, "timestamp": {"N": str(p.timestamp)}}
        if isinstance(p.value, dict):
            clash = sorted(self._reserved & set(p.value))
            if clash:
                raise MetricsError(f"{p.key}: mapping entries named {', '.join(clash)} clash with DynamoDB attributes")
            item.update({name: {"N": repr(v)} for name, v in p.value.items()})
        else:
            item["value"] = {"N": repr(p.value)}
        if self.retention_seconds:
            item[self.tables.ttl_attribute] = {"N": str(p.timestamp + self.retention_seconds)}
        return item

    def _decode(self, item: dict[str, dict[str, str]]) -> tuple[int, Value]:
        timestamp = int(float(item["timestamp"]["N"]))
        if "value" in item:
            return timestamp, float(item["value"]["N"])
        return timestamp, {name: float(a["N"]) for name, a in item.items() if name not in self._reserved and "N" in a}

    # -- writing --------------------------------------------------------------------------------

    def write(self, points: Iterable[Point]) -> None:
        by_table: dict[str, dict[tuple[str, int], Item]] = {}
        newest: Point | None = None
        for p in points:  # one item per (key, timestamp): DynamoDB rejects a batch with duplicates
            by_table.setdefault(self.tables.table(p.metric_type), {})[(p.key, p.timestamp)] = self._item(p)
            if newest is None or p.timestamp > newest.timestamp:
                newest = p
        if newest is not None:
            check_not_future(newest.key, newest.timestamp, self.clock())
        batches = [
            (table, items[i : i + BATCH_SIZE])
            for table, by_key in by_table.items()
            for items in [list(by_key.values())]
            for i in range(0, len(items), BATCH_SIZE)
        ]
        if not batches:
            return
        dynamodb = self._dynamodb()
        if len(batches) == 1:
            self._write_batch(dynamodb, *batches[0])
            return
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(batches))) as pool:
            for _ in pool.map(lambda b: self._write_batch(dynamodb, *b), batches):
                pass

    def _write_batch(self, dynamodb: Any, table: str, items: list[Item]) -> None:
        request = {table: [{"PutRequest": {"Item": item}} for item in items]}
        for attempt in range(self.max_attempts):
            if attempt:
                time.sleep(min(self.backoff_seconds * 2 ** (attempt - 1), 2.0))
            response = self._guard("write", table, partial(dynamodb.batch_write_item, RequestItems=request))
            request = response.get("UnprocessedItems") or {}
            if not request:
                return
        left = sum(len(v) for v in request.values())
        raise MetricsError(
            f"DynamoDB table {table}: {left} of {len(items)} points still unprocessed after "
            f"{self.max_attempts} attempts (throttled: raise the table's capacity or write less often)"
        )

    # -- reading --------------------------------------------------------------------------------

    def read(self, metric_type: MetricType, key: str, start: int, end: int) -> Series:
        if start > end:
            return []
        table = self.tables.table(metric_type)
        dynamodb = self._dynamodb()
        request: dict[str, Any] = {
            "TableName": table,
            "KeyConditionExpression": "#k = :k AND #t BETWEEN :s AND :e",
            "ExpressionAttributeNames": {"#k": "key", "#t": "timestamp"},
            "ExpressionAttributeValues": {":k": {"S": key}, ":s": {"N": str(start)}, ":e": {"N": str(end)}},
        }
        if self.page_size:
            request["Limit"] = self.page_size
        series: Series = []
        while True:
            page = self._guard("read", table, lambda: dynamodb.query(**request))
            series.extend(self._decode(item) for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return series
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    def read_many(self, metric_type: MetricType, keys: Sequence[str], start: int, end: int) -> dict[str, Series]:
        if len(keys) <= 1:
            return {key: self.read(metric_type, key, start, end) for key in keys}
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(keys))) as pool:
            return dict(zip(keys, pool.map(lambda k: self.read(metric_type, k, start, end), keys), strict=True))

    def keys(self, metric_type: MetricType, prefix: str = "", regex: str | None = None) -> list[str]:
        table = self.tables.table(metric_type)
        dynamodb = self._dynamodb()
        request: dict[str, Any] = {
            "TableName": table,
            "ProjectionExpression": "#k",
            "ExpressionAttributeNames": {"#k": "key"},
        }
        if prefix:
            request["FilterExpression"] = "begins_with(#k, :p)"
            request["ExpressionAttributeValues"] = {":p": {"S": prefix}}
        found: set[str] = set()
        while True:
            page = self._guard("list keys of", table, lambda: dynamodb.scan(**request))
            found.update(item["key"]["S"] for item in page.get("Items", []))
            if "LastEvaluatedKey" not in page:
                return matching_keys(found, prefix, regex)
            request["ExclusiveStartKey"] = page["LastEvaluatedKey"]

    # -- set-up ---------------------------------------------------------------------------------

    def create(self) -> list[str]:
        """Create the missing tables (on-demand billing, TTL on when retention is set) and check the
        ones there (``aws/tables.py``); returns the tables that were created or changed."""
        dynamodb = self._dynamodb()
        ttl = self.tables.ttl_attribute if self.retention_seconds else None
        changed = []
        for metric_type in MetricType:
            spec = TableSpec(self.tables.table(metric_type), ("key", "S"), ("timestamp", "N"), ttl)
            if self._guard("set up", spec.name, partial(ensure_table, dynamodb, spec)):
                changed.append(spec.name)
        return changed

    def __repr__(self) -> str:
        return f"DynamoDBStore({self.where!r}, {self.tables.system_metrics_table!r}, ...)"

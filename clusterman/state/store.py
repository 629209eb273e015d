"""Durable state items, keyed as Clusterman keys its DynamoDB state table.

An item is (state, entity) → timestamp, optional expiration, and a small JSON payload; e.g. a
pause is state ``autoscaler_paused`` for entity ``<cluster>.<pool>.<scheduler>``. Backends: a
SQLite file under ``state_directory`` (the default) and Clusterman's DynamoDB table
(``aws.state_table``, hash key ``state``, range key ``entity``), so a pause set by Clusterman's
``manage``/``disable`` is honoured by us and the other way round.
"""

from __future__ import annotations

import abc
import json
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any
from typing import TypeVar

from clusterman.aws.tables import UNUSABLE_TABLE_CODES
from clusterman.aws.tables import TableSpec
from clusterman.aws.tables import ensure_table
from clusterman.errors import Unworkable
from clusterman.errors import UserError
from clusterman.paths import unusable_path

T = TypeVar("T")

NO_EXPIRY = 0  # an item that never expires


class StateError(UserError):
    """The state store could not be read or written; the message names the store."""


class UnusableStore(StateError, Unworkable):
    """The store the configuration names cannot work (a directory that is a file, a table that does
    not exist, no access): the autoscaler cannot act until the configuration is changed."""


class DamagedItem(StateError):
    """An item whose fields cannot be read (edited by hand, written by a broken tool). Readers treat
    it as unreadable; a lease claim treats it as no valid lease, as one without an expiry."""


def _item(where: str, state: str, entity: str, timestamp: Any, expiry: Any, payload: Any) -> StateItem:
    """An item from its stored fields; DamagedItem, naming the item, when they are not what we write."""
    try:
        decoded = json.loads(payload) if isinstance(payload, str) else payload
        if not isinstance(decoded, dict):
            raise ValueError(f"payload is {type(decoded).__name__}, not an object")
        return StateItem(state, entity, int(timestamp), int(expiry), decoded)
    except (TypeError, ValueError) as e:
        raise DamagedItem(
            f"{where}: the {state} item of {entity} cannot be read ({e}); "
            "the next write of it replaces it (for a pause: `clusterman disable` or `enable`)"
        ) from e


@dataclass(frozen=True)
class StateItem:
    state: str
    entity: str
    timestamp: int  # when it was written, Unix seconds
    expiration_timestamp: int = NO_EXPIRY
    payload: dict[str, Any] = field(default_factory=dict)

    def live_at(self, now: float) -> bool:
        return self.expiration_timestamp == NO_EXPIRY or now < self.expiration_timestamp


class StateStore(abc.ABC):
    @abc.abstractmethod
    def get(self, state: str, entity: str) -> StateItem | None:
        """The item, expired or not (callers decide with ``live_at``), or None when absent."""

    @abc.abstractmethod
    def put(self, item: StateItem) -> None: ...

    @abc.abstractmethod
    def delete(self, state: str, entity: str) -> None: ...

    @abc.abstractmethod
    def claim(self, item: StateItem, owner: str, now: float | None, stale: StateItem | None = None) -> StateItem | None:
        """Write ``item`` (a lease held by ``owner``) in one atomic step, only if no item is there,
        ``owner`` holds it, the one there is still ``stale`` (a lease the claimant saw unchanged for
        its whole TTL, on its own clock), or it has expired at ``now`` (payload ``expires_at``,
        another process's clock: None judges no expiry so).

        Returns None when written, else the item in the way (so the caller can say who holds it).
        """

    @abc.abstractmethod
    def release(self, state: str, entity: str, owner: str) -> None:
        """Delete the item only if ``owner`` holds it (a successor's lease is never removed)."""

    @abc.abstractmethod
    def set_up(self) -> list[str]:
        """Create the file or table, or check the one there (``clusterman setup``); what was done."""


def _claimable(existing: StateItem | None, owner: str, now: float | None, stale: StateItem | None) -> bool:
    if existing is None:
        return True
    holder, expires_at = existing.payload.get("holder"), existing.payload.get("expires_at")
    if holder == owner or not isinstance(expires_at, int | float):
        return True
    if stale is not None and existing.payload == stale.payload:
        return True
    return now is not None and expires_at <= now


class SqliteStateStore(StateStore):
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=10, isolation_level=None)  # we commit ourselves
            conn.execute(
                "CREATE TABLE IF NOT EXISTS state (state TEXT, entity TEXT, timestamp INTEGER, "
                "expiration_timestamp INTEGER, payload TEXT, PRIMARY KEY (state, entity))"
            )
            return conn
        except (OSError, sqlite3.Error) as e:
            raise _sqlite_error(self.path, e) from e

    def __repr__(self) -> str:
        return f"SQLite state store {self.path}"

    def set_up(self) -> list[str]:
        existed = self.path.exists()
        with self._guard():
            pass  # connecting creates the file and its table
        return [] if existed else ["created"]

    def get(self, state: str, entity: str) -> StateItem | None:
        with self._guard() as conn:
            return self._read(conn, state, entity)

    def put(self, item: StateItem) -> None:
        with self._guard() as conn:
            conn.execute(
                "INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?, ?)",
                (item.state, item.entity, item.timestamp, item.expiration_timestamp, json.dumps(item.payload)),
            )

    def delete(self, state: str, entity: str) -> None:
        with self._guard() as conn:
            conn.execute("DELETE FROM state WHERE state = ? AND entity = ?", (state, entity))

    def claim(self, item: StateItem, owner: str, now: float | None, stale: StateItem | None = None) -> StateItem | None:
        with self._guard() as conn:
            conn.execute("BEGIN IMMEDIATE")  # the write lock first: read, check and write as one step
            try:
                existing = self._read(conn, item.state, item.entity)
            except DamagedItem:
                existing = None  # no valid lease: written over
            if not _claimable(existing, owner, now, stale):
                return existing
            conn.execute(
                "INSERT OR REPLACE INTO state VALUES (?, ?, ?, ?, ?)",
                (item.state, item.entity, item.timestamp, item.expiration_timestamp, json.dumps(item.payload)),
            )
        return None

    def release(self, state: str, entity: str, owner: str) -> None:
        with self._guard() as conn:
            conn.execute("BEGIN IMMEDIATE")
            existing = self._read(conn, state, entity)
            if existing is not None and existing.payload.get("holder") == owner:
                conn.execute("DELETE FROM state WHERE state = ? AND entity = ?", (state, entity))

    def _read(self, conn: sqlite3.Connection, state: str, entity: str) -> StateItem | None:
        row = conn.execute(
            "SELECT timestamp, expiration_timestamp, payload FROM state WHERE state = ? AND entity = ?",
            (state, entity),
        ).fetchone()
        if row is None:
            return None
        return _item(f"state store {self.path}", state, entity, *row)

    def _guard(self) -> _SqliteGuard:
        return _SqliteGuard(self)


def _sqlite_error(path: Path, e: Exception) -> StateError:
    """SQLite keeps its file whole through crashes and full disks; a damaged one (overwritten, a
    disk fault) stays so, so the message says what to do. A path that can never be a store (under a
    regular file, a directory itself) is the configuration's fault: ``UnusableStore``."""
    unusable = unusable_path(path, e)
    if unusable:
        return UnusableStore(f"state store {path}: {e} ({unusable}: check state_directory and state.path)")
    damaged = getattr(e, "sqlite_errorname", "") in ("SQLITE_NOTADB", "SQLITE_CORRUPT")
    hint = (
        " (the file is damaged: move it aside to start afresh; a pause set with `clusterman disable` goes with it)"
        if damaged
        else ""
    )
    return StateError(f"state store {path}: {e}{hint}")


class _SqliteGuard:
    """Open, commit and close one connection per call, turning sqlite errors into StateError."""

    def __init__(self, store: SqliteStateStore) -> None:
        self.store = store
        self.conn: sqlite3.Connection | None = None

    def __enter__(self) -> sqlite3.Connection:
        self.conn = self.store._connect()
        return self.conn

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        assert self.conn is not None
        try:
            if exc is None:
                self.conn.commit()
        finally:
            self.conn.close()
        if isinstance(exc, sqlite3.Error):
            raise _sqlite_error(self.store.path, exc) from exc


class DynamoStateStore(StateStore):
    """Clusterman's state table; ``client`` is a boto3 DynamoDB client (see clusterman.aws.session)."""

    def __init__(self, client: Any, table: str) -> None:
        self.client = client
        self.table = table

    def __repr__(self) -> str:
        return f"DynamoDB state table {self.table} ({self.spec.describe()})"

    @property
    def spec(self) -> TableSpec:
        """Its TTL deletes expired pauses and leases; an item that never expires has 0 there, which
        DynamoDB's TTL leaves alone (it skips times more than five years past)."""
        return TableSpec(self.table, ("state", "S"), ("entity", "S"), "expiration_timestamp")

    def set_up(self) -> list[str]:
        return self._guarded(lambda: ensure_table(self.client, self.spec))

    def _call(self, operation: str, **kwargs: Any) -> Any:
        return self._guarded(lambda: getattr(self.client, operation)(TableName=self.table, **kwargs))

    def _guarded(self, call: Callable[[], T]) -> T:
        from botocore.exceptions import BotoCoreError
        from botocore.exceptions import ClientError

        try:
            return call()
        except ClientError as e:
            message = f"DynamoDB state table {self.table}: {e.response['Error'].get('Message', e)}"
            if e.response["Error"].get("Code") in UNUSABLE_TABLE_CODES:
                raise UnusableStore(f"{message} (check aws.state_table and the credentials)") from e
            raise StateError(message) from e
        except BotoCoreError as e:
            raise StateError(f"DynamoDB state table {self.table}: {e}") from e

    def get(self, state: str, entity: str) -> StateItem | None:
        raw = self._raw(state, entity)
        return None if raw is None else self._decoded(state, entity, raw)

    def _raw(self, state: str, entity: str) -> dict[str, Any] | None:
        response = self._call("get_item", Key={"state": {"S": state}, "entity": {"S": entity}}, ConsistentRead=True)
        raw: dict[str, Any] | None = response.get("Item")
        return raw

    def _decoded(self, state: str, entity: str, raw: dict[str, Any]) -> StateItem:
        return _item(
            f"DynamoDB state table {self.table}",
            state,
            entity,
            raw.get("timestamp", {}).get("N", "0"),
            raw.get("expiration_timestamp", {}).get("N", str(NO_EXPIRY)),
            raw["payload"].get("S") if "payload" in raw else {},
        )

    def put(self, item: StateItem) -> None:
        self._call("put_item", Item=self._record(item))

    def claim(self, item: StateItem, owner: str, now: float | None, stale: StateItem | None = None) -> StateItem | None:
        """A conditional put: DynamoDB checks the condition, so two claimants never both win. A
        ``stale`` lease is the one there still when its holder and expiry are (each renewal writes
        a new expiry)."""
        record = {
            **self._record(item),
            "holder": {"S": owner},
            "expires_at": {"N": repr(float(item.payload["expires_at"]))},
        }
        names = {"#e": "entity", "#h": "holder"}
        condition = "attribute_not_exists(#e) OR #h = :me"
        values = {":me": {"S": owner}}
        if now is not None:
            condition += " OR #x <= :now"
            values[":now"] = {"N": repr(float(now))}
        stale_expiry = stale.payload.get("expires_at") if stale is not None else None
        if stale is not None and isinstance(stale_expiry, int | float):
            condition += " OR (#h = :was AND #x = :until)"
            values[":was"] = {"S": str(stale.payload.get("holder", ""))}
            values[":until"] = {"N": repr(float(stale_expiry))}
        if "#x" in condition:
            names["#x"] = "expires_at"
        for _ in range(2):
            if self._conditional(
                "put_item",
                Item=record,
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            ):
                return None
            raw = self._raw(item.state, item.entity)
            if raw is None:
                continue  # released meanwhile: claimed again
            try:
                return self._decoded(item.state, item.entity, raw)
            except DamagedItem:  # no valid lease: written over, if it is still that one
                condition, values = "#p = :damaged", {":damaged": raw.get("payload", {"S": ""})}
                names = {"#p": "payload"}
        return self.get(item.state, item.entity)

    def release(self, state: str, entity: str, owner: str) -> None:
        self._conditional(
            "delete_item",
            Key={"state": {"S": state}, "entity": {"S": entity}},
            ConditionExpression="#h = :me",
            ExpressionAttributeNames={"#h": "holder"},
            ExpressionAttributeValues={":me": {"S": owner}},
        )

    def _conditional(self, operation: str, **kwargs: Any) -> bool:
        """False when the condition did not hold; StateError for every other failure."""
        try:
            self._call(operation, **kwargs)
        except StateError as e:
            cause = e.__cause__
            if getattr(cause, "response", {}).get("Error", {}).get("Code") == "ConditionalCheckFailedException":
                return False
            raise
        return True

    @staticmethod
    def _record(item: StateItem) -> dict[str, Any]:
        record = {
            "state": {"S": item.state},
            "entity": {"S": item.entity},
            "timestamp": {"N": str(item.timestamp)},
            "expiration_timestamp": {"N": str(item.expiration_timestamp)},
        }
        if item.payload:
            record["payload"] = {"S": json.dumps(item.payload)}
        return record

    def delete(self, state: str, entity: str) -> None:
        self._call("delete_item", Key={"state": {"S": state}, "entity": {"S": entity}})


class SplitStore(StateStore):
    """Some states in one store (the lease in Kubernetes Leases), every other in another."""

    def __init__(self, rest: StateStore, split: StateStore, states: frozenset[str]) -> None:
        self.rest = rest
        self.split = split
        self.states = states

    def __repr__(self) -> str:
        return f"{self.rest!r}, {', '.join(sorted(self.states))} in {self.split!r}"

    def _of(self, state: str) -> StateStore:
        return self.split if state in self.states else self.rest

    def set_up(self) -> list[str]:
        return self.rest.set_up() + self.split.set_up()

    def get(self, state: str, entity: str) -> StateItem | None:
        return self._of(state).get(state, entity)

    def put(self, item: StateItem) -> None:
        self._of(item.state).put(item)

    def delete(self, state: str, entity: str) -> None:
        self._of(state).delete(state, entity)

    def claim(self, item: StateItem, owner: str, now: float | None, stale: StateItem | None = None) -> StateItem | None:
        return self._of(item.state).claim(item, owner, now, stale)

    def release(self, state: str, entity: str, owner: str) -> None:
        self._of(state).release(state, entity, owner)

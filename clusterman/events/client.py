"""A client of the event API (``clusterman events`` and tools): pages of history, live streams.

Every failure is an ``EventAPIError`` whose message names the URL and what went wrong.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Collection
from collections.abc import Iterator
from dataclasses import dataclass
from http.client import HTTPResponse
from typing import Any
from typing import cast

from clusterman.core.config import EventsConfig
from clusterman.errors import OperationalError
from clusterman.events.event import EventRecord
from clusterman.events.event import EventType
from clusterman.events.event import record_from_json
from clusterman.events.http import BATCH_PATH
from clusterman.events.http import STREAM_PATH


class EventAPIError(OperationalError):
    """The event API could not be reached or answered something unexpected."""


_ANY_ADDRESS = {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}


def api_url(config: EventsConfig) -> str:
    """Where the ``events`` block says the autoscaler serves its API (an any-address as loopback)."""
    host = _ANY_ADDRESS.get(config.host, config.host)
    return f"http://[{host}]:{config.port}" if ":" in host else f"http://{host}:{config.port}"


@dataclass(frozen=True)
class Batch:
    instance_uuid: str
    lowest_id: int
    highest_id: int
    records: list[EventRecord]


@dataclass(frozen=True)
class StreamHeader:
    instance_uuid: str
    lowest_id: int
    highest_id: int  # live events start after this id
    history_from_id: int


@dataclass(frozen=True)
class Heartbeat:
    timestamp_ns: int
    last_id: int


@dataclass(frozen=True)
class StreamEnded:
    """The server ended the stream; ``next_id`` is where to resume with a batch read."""

    message: str
    description: str
    next_id: int


StreamItem = EventRecord | Heartbeat | StreamEnded


@dataclass(frozen=True)
class Health:
    """The autoscaler's ``/healthz``: what is wrong (its run loop, the bootstrap, its event store),
    what it runs without (an app on its fallback signal), and each app signal's last outcome as sent."""

    problems: tuple[str, ...]
    degraded: tuple[str, ...] = ()
    signals: tuple[Any, ...] = ()


class EventClient:
    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _open(
        self, path: str, params: dict[str, int | str], timeout: float, answers: tuple[int, ...] = ()
    ) -> HTTPResponse:
        """``answers``: HTTP error statuses that are answers here (their body is read), not errors."""
        query = urllib.parse.urlencode(params)
        url = f"{self.url}{path}" + (f"?{query}" if query else "")
        try:
            response: HTTPResponse = urllib.request.urlopen(url, timeout=timeout)
            return response
        except urllib.error.HTTPError as e:
            if e.code in answers:
                return cast(HTTPResponse, e)
            raise EventAPIError(f"{url}: HTTP {e.code}: {_error_message(e.read())}") from e
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            raise EventAPIError(f"cannot reach the event API at {url}: {reason}") from e
        except ValueError as e:  # urllib's word for an address that is no URL
            raise EventAPIError(f"{self.url}: not an http:// address of the event API ({e})") from e

    def batch(
        self,
        start: int | None = None,
        count: int | None = None,
        types: Collection[EventType] = (),
        last: int | None = None,
    ) -> Batch:
        """One page: from id ``start``, or from the ``last``-th newest event (of ``types``, if given)."""
        params: dict[str, int | str] = {
            k: v for k, v in (("start", start), ("count", count), ("last", last)) if v is not None
        }
        if types:
            params["type"] = _type_names(types)
        with self._open(BATCH_PATH, params, self.timeout) as response:
            body = _json(response.read(), BATCH_PATH)
        try:
            return Batch(
                body["InstanceUUID"],
                int(body["LowestID"]),
                int(body["HighestID"]),
                [record_from_json(r) for r in body["EventRecords"]],
            )
        except (KeyError, TypeError, ValueError) as e:
            raise EventAPIError(f"{self.url}{BATCH_PATH}: unexpected answer: {e}") from e

    def health(self) -> Health:
        """What the autoscaler's ``/healthz`` says. A 503 is an answer here, not an error."""
        with self._open("/healthz", {}, self.timeout, answers=(503,)) as response:
            body = _json(response.read(), "/healthz")
        if not isinstance(body, dict):
            raise EventAPIError(f"{self.url}/healthz: unexpected answer: {type(body).__name__}")
        stopped = ["its event store has stopped"] if body.get("publisher") == "stopped" else []
        return Health(
            tuple(stopped + [str(p) for p in body.get("problems", [])]),
            tuple(str(d) for d in body.get("degraded", [])),
            tuple(body.get("signals", [])),
        )

    def metrics(self) -> str:
        """The autoscaler's Prometheus exposition (``/metrics``), as text."""
        with self._open("/metrics", {}, self.timeout) as response:
            return str(response.read().decode("utf-8", errors="replace"))

    def history(
        self, start: int | None, until: int | None = None, types: Collection[EventType] = ()
    ) -> Iterator[EventRecord | StreamEnded]:
        """Events (of ``types``, if given) from ``start`` (default: the oldest kept) to ``until``
        (default: the newest now).

        Events overwritten before they were read are reported with a ``StreamEnded`` item naming
        the gap, then reading goes on from the oldest kept; a server restart ends the history.
        """
        probe = self.batch(count=1)
        yield from self._pages(start, until, types, probe)

    def newest(self, count: int, types: Collection[EventType] = ()) -> Iterator[EventRecord | StreamEnded]:
        """The ``count`` newest events (of ``types``, if given), oldest first: filtered, then counted."""
        if count <= 0:
            return
        first = self.batch(last=count, types=types)
        if not first.records:
            return
        yield from first.records
        rest = first.records[-1].id + 1
        yield from self._pages(rest, first.highest_id, types, first)

    def _pages(
        self, start: int | None, until: int | None, types: Collection[EventType], probe: Batch
    ) -> Iterator[EventRecord | StreamEnded]:
        """Pages from ``start`` to ``until``, of the server ``probe`` came from (same instance)."""
        uuid = probe.instance_uuid
        stop = probe.highest_id if until is None else until
        next_id = probe.lowest_id if start is None else start
        while next_id <= stop:
            page = self.batch(next_id, types=types)
            if page.instance_uuid != uuid:
                raise EventAPIError(f"{self.url}: the autoscaler restarted while reading (ids start again)")
            if not page.records:
                if next_id < page.lowest_id:
                    yield StreamEnded("events overwritten", f"{next_id}..{page.lowest_id - 1} are gone", page.lowest_id)
                    next_id = page.lowest_id
                    continue
                return
            for record in page.records:
                if record.id > stop:
                    return
                yield record
            next_id = page.records[-1].id + 1

    def stream(self, count: int = 0, types: Collection[EventType] = ()) -> Stream:
        """Live events (of ``types``, if given), after the ``count`` newest of them."""
        params: dict[str, int | str] = {"count": count}
        if types:
            params["type"] = _type_names(types)
        return Stream(self._open(STREAM_PATH, params, self.timeout), self.url)


class Stream:
    """An open stream: ``header`` first, then iterate for events, heartbeats and the end."""

    def __init__(self, response: HTTPResponse, url: str) -> None:
        self._response = response
        self._where = f"{url}{STREAM_PATH}"
        line = self._next_line()
        if line is None:
            raise EventAPIError(f"{self._where}: the stream closed before its header")
        try:
            self.header = StreamHeader(
                line["InstanceUUID"], int(line["LowestID"]), int(line["HighestID"]), int(line["HistoryFromID"])
            )
        except (KeyError, TypeError, ValueError) as e:
            raise EventAPIError(f"{self._where}: unexpected header {line!r}") from e

    def _next_line(self) -> dict[str, Any] | None:
        try:
            raw = self._response.readline()
        except TimeoutError as e:
            raise EventAPIError(f"{self._where}: nothing received, not even a heartbeat") from e
        if not raw:
            return None
        value = _json(raw, STREAM_PATH)
        if not isinstance(value, dict):
            raise EventAPIError(f"{self._where}: unexpected line {raw!r}")
        return value

    def __iter__(self) -> Iterator[StreamItem]:
        while True:
            line = self._next_line()
            if line is None:
                return
            if "Error" in line:
                error = line["Error"]
                yield StreamEnded(str(error.get("message")), str(error.get("description")), int(line["NextID"]))
                return
            if "Heartbeat" in line:
                yield Heartbeat(int(line["Heartbeat"]), int(line["LastID"]))
            else:
                yield record_from_json(line)

    def close(self) -> None:
        self._response.close()

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _type_names(types: Collection[EventType]) -> str:
    return ",".join(sorted(t.name for t in types))


def _json(raw: bytes, where: str) -> Any:
    try:
        return json.loads(raw)
    except json.JSONDecodeError as e:
        raise EventAPIError(f"{where}: not JSON: {raw[:200]!r}") from e


def _error_message(raw: bytes) -> str:
    try:
        body = json.loads(raw)
        return f"{body['message']} ({body['description']})"
    except (ValueError, KeyError, TypeError):
        return raw[:200].decode(errors="replace")

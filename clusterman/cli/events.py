"""``clusterman events``: what the autoscaler did and why, one line per event.

Reads the autoscaler's event API (``/ws/v1/events/*``); ``--follow`` keeps printing new events
as they happen, with no gap and no repeat between the history and the live part. ``--type`` is
sent to the server, which filters before it counts: ``--type POOL --last 3`` is the 3 newest
POOL events, however many other events came after them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable

from clusterman.batch.arguments import add_timeout_argument
from clusterman.batch.arguments import count_argument
from clusterman.config.loader import load_main_config
from clusterman.core.timestamps import format_time
from clusterman.errors import UserError
from clusterman.events.client import EventAPIError
from clusterman.events.client import EventClient
from clusterman.events.client import Heartbeat
from clusterman.events.client import StreamEnded
from clusterman.events.client import api_url
from clusterman.events.event import EventRecord
from clusterman.events.event import EventType


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser("events", help="show what the autoscaler did and why")
    parser.add_argument("--url", help="the event API (default: host and port of the main config's events block)")
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--since", type=count_argument, metavar="ID", help="start at this event id")
    which.add_argument("--last", type=count_argument, metavar="N", help="start with the N newest events")
    parser.add_argument(
        "--type",
        action="append",
        default=[],
        metavar="T",
        help=f"only these types (repeatable or comma-separated; --last counts these only): "
        f"{', '.join(t.name for t in EventType)}",
    )
    parser.add_argument("-f", "--follow", action="store_true", help="keep printing new events as they happen")
    parser.add_argument("--json", action="store_true", help="one JSON record per line, for tools")
    add_timeout_argument(parser, 60.0, "seconds to wait for the API (and heartbeats)")
    parser.set_defaults(func=run_events)


def parse_types(values: Iterable[str]) -> frozenset[EventType]:
    """--type values; empty means every type."""
    chosen = set()
    for value in values:
        for name in filter(None, (part.strip().upper() for part in value.split(","))):
            if name not in EventType.__members__:
                known = ", ".join(t.name for t in EventType)
                raise UserError(f"--type {name}: unknown event type (known: {known})")
            chosen.add(EventType[name])
    return frozenset(chosen)


def default_url(env_config_path: str) -> str:
    return api_url(load_main_config(env_config_path).events)


def format_line(record: EventRecord) -> str:
    e = record.event
    parts = [
        format_time(e.timestamp_ns / 1e9, digits=3),
        f"{record.id:>8}",
        f"{e.type.name:<8}",
        f"{e.change.name:<6}",
        f"{e.detail.name:<22}",
        e.object_id,
    ]
    if e.reference_id:
        parts.append(f"({e.reference_id})")
    if e.resource:
        parts.append(" ".join(f"{k}={v:g}" for k, v in e.resource))
    line = " ".join(parts)
    return f"{line}: {e.message}" if e.message else line


class _Printer:
    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.printed = 0

    def __call__(self, item: EventRecord | StreamEnded) -> None:
        if isinstance(item, StreamEnded):
            print(f"clusterman events: {item.message}: {item.description}", file=sys.stderr)
            return
        text = json.dumps(item.to_json()) if self.as_json else format_line(item)
        print(text, flush=True)
        self.printed += 1


def _none_found(types: frozenset[EventType], since: int | None) -> None:
    """An empty answer said on stderr (stdout stays the events), not a silence."""
    kinds = f" of type {', '.join(sorted(t.name for t in types))}" if types else ""
    after = f" from id {since} on" if since is not None else ""
    print(f"clusterman events: no events{kinds}{after} kept by the autoscaler", file=sys.stderr)


def run_events(args: argparse.Namespace) -> int:
    types = parse_types(args.type)
    client = EventClient(args.url or default_url(args.env_config_path), timeout=args.timeout)
    emit = _Printer(args.json)
    try:
        if args.follow:
            return _follow(client, args, types, emit)
        last, since = args.last, args.since
        for item in client.newest(last, types) if last is not None else client.history(since, types=types):
            emit(item)
        if not emit.printed and last != 0:
            _none_found(types, since)
        return 0
    except EventAPIError as e:
        print(f"clusterman events: {e}", file=sys.stderr)
        return 1


def _follow(client: EventClient, args: argparse.Namespace, types: frozenset[EventType], emit: _Printer) -> int:
    # --last N: the server sends the N newest (of the types) and then the live ones, with no gap.
    # Otherwise subscribe first (no history), then read the history up to the subscription point
    # by pages: the live part starts right after it, so nothing is missed or printed twice.
    history = args.last if args.last is not None else 0
    with client.stream(count=history, types=types) as stream:
        highest = stream.header.highest_id
        if args.last is None:
            start = stream.header.lowest_id if args.since is None else int(args.since)
            if start <= highest:
                for item in client.history(start, until=highest, types=types):
                    emit(item)
        for live in stream:
            if isinstance(live, Heartbeat):
                continue
            if isinstance(live, StreamEnded):
                emit(live)
                return 1
            emit(live)
    print("clusterman events: the event stream closed (autoscaler stopped?)", file=sys.stderr)
    return 1

"""``python -m clusterman.batch.spot_price_collector``: keep EC2's spot prices in the metrics store.

Every ``batches.spot_prices.run_interval_seconds`` it asks EC2 (DescribeSpotPriceHistory) for the
price changes since the last pass and writes them as Clusterman did: metadata series
``spot_prices|aws_availability_zone=<zone>,aws_instance_type=<type>``, dollars per instance-hour,
at most one point per market in each ``dedupe_interval_seconds`` (the latest price in it, stamped
at the interval's end, or now when that is later than now). A market's price in effect when the
collector starts, and again once a day, is written too, stamped with that pass's start: any day of
the store has a point for every market, so the simulator finds a price without reading further back
(Clusterman wrote only changes).

A pass that fails (EC2 throttling or not answering, the store down) is logged and the next pass
covers its period too: nothing is lost within EC2's 90 days of history. ``--once`` runs one pass
and exits 1 if it failed. Beside its writes the collector applies the store's retention hourly.
"""

from __future__ import annotations

import argparse
import logging
import math
import sys
import threading
import time
from collections.abc import Callable
from collections.abc import Iterable

from botocore.exceptions import BotoCoreError
from botocore.exceptions import ClientError

from clusterman.aws.session import AwsSettings
from clusterman.aws.session import client
from clusterman.aws.spot_prices import SpotPrice
from clusterman.aws.spot_prices import describe_spot_prices
from clusterman.batch.arguments import add_program_arguments
from clusterman.batch.arguments import configure_logging
from clusterman.batch.arguments import time_argument
from clusterman.batch.stopping import stop_on_signals
from clusterman.config.loader import load_main_config
from clusterman.core.config import MainConfig
from clusterman.core.config import MetricsBackend
from clusterman.core.config import MetricType
from clusterman.core.config_schema import ConfigError
from clusterman.core.timestamps import format_time
from clusterman.datastore.store import MetricsError
from clusterman.datastore.store import MetricsStore
from clusterman.datastore.store import Point
from clusterman.datastore.store import RetentionPass
from clusterman.datastore.store import spot_price_key
from clusterman.run.budget import metrics_timeout
from clusterman.wiring.metrics_store import open_store

log = logging.getLogger(__name__)

REFRESH_SECONDS = 86400.0  # every market's price in effect is written again after this long
Fetch = Callable[[float, float], Iterable[SpotPrice]]


class PriceRecorder:
    """Which points a pass writes; ``since`` moves on only once the store has them."""

    def __init__(self, dedupe_seconds: float, since: float) -> None:
        self.dedupe_seconds = dedupe_seconds
        self.since = since
        self.recorded: set[tuple[str, str]] = set()  # markets whose price in effect is written
        self.refreshed = since

    def points(self, prices: Iterable[SpotPrice], now: float) -> tuple[list[Point], set[tuple[str, str]]]:
        """The pass's points (oldest first) and the markets they cover."""
        latest: dict[tuple[str, int], SpotPrice] = {}
        markets = set()
        last_second = math.floor(now)
        for p in prices:
            at = p.timestamp
            if at < self.since:  # in effect at the pass's start: written once a day per market
                if p.market in self.recorded:
                    continue
                at = self.since
            stamp = min(math.ceil(at / self.dedupe_seconds) * self.dedupe_seconds, last_second)
            where = (spot_price_key(p.instance_type, p.availability_zone), int(stamp))
            held = latest.get(where)
            if held is None or p.timestamp >= held.timestamp:
                latest[where] = p
            markets.add(p.market)
        points = [Point(MetricType.METADATA, key, stamp, p.price) for (key, stamp), p in latest.items()]
        return sorted(points, key=lambda p: (p.timestamp, p.key)), markets

    def written(self, markets: set[tuple[str, str]], now: float) -> None:
        self.recorded |= markets
        self.since = now
        if now - self.refreshed >= REFRESH_SECONDS:
            self.recorded.clear()
            self.refreshed = now


def collect_once(fetch: Fetch, store: MetricsStore, recorder: PriceRecorder, now: float) -> int:
    """One pass; the points written. Raises what EC2 or the store raised, having written nothing
    it would not write again."""
    points, markets = recorder.points(fetch(recorder.since, now), now)
    store.write(points)
    recorder.written(markets, now)
    return len(points)


def pass_once(fetch: Fetch, store: MetricsStore, recorder: PriceRecorder, now: float, interval_seconds: float) -> bool:
    """``collect_once``, each failure one log line; whether the pass succeeded."""
    since = recorder.since
    try:
        count = collect_once(fetch, store, recorder, now)
    except (BotoCoreError, ClientError, MetricsError) as e:
        log.error(
            "no spot prices this pass (the next, in %g s, reads again from %s): %s",
            interval_seconds,
            format_time(since),
            e,
        )
        return False
    except Exception:  # a bug must not stop the next pass
        log.exception("no spot prices this pass: unexpected error")
        return False
    log.info("wrote %d spot prices of %s to %s", count, format_time(since), format_time(now))
    return True


def run_forever(
    fetch: Fetch,
    store: MetricsStore,
    recorder: PriceRecorder,
    interval_seconds: float,
    stop: threading.Event,
    clock: Callable[[], float] = time.time,
    monotonic: Callable[[], float] = time.monotonic,
) -> None:
    """A pass every ``interval_seconds`` on a fixed grid (on ``monotonic``), skipping the slots an
    overrunning pass missed; returns when ``stop`` is set."""
    retention = RetentionPass(store)
    next_run = monotonic()
    while not stop.is_set():
        pass_once(fetch, store, recorder, clock(), interval_seconds)
        retention(clock())
        next_run += interval_seconds
        late = monotonic() - next_run
        if late > 0:
            next_run += math.ceil(late / interval_seconds) * interval_seconds
        stop.wait(max(0.0, next_run - monotonic()))


def ec2_fetch(main: MainConfig, region: str | None) -> Fetch:
    """DescribeSpotPriceHistory in ``region`` (default ``aws.region``). A page of a thousand prices
    may take seconds, so one attempt may use a call's whole budget (three quarters of a pass); a
    failed pass is tried again by the next, so a call is tried twice at most."""
    budget = main.batches.spot_prices.run_interval_seconds * 0.75
    settings = AwsSettings.from_config(main.aws, region)
    ec2 = client(
        settings,
        "ec2",
        call_budget_seconds=budget,
        retries={"max_attempts": 2, "mode": "standard"},
        connect_timeout=min(budget / 3, 10.0),
        read_timeout=budget,
    )
    return lambda start, end: describe_spot_prices(ec2, start, end)


def writable_store(main: MainConfig) -> MetricsStore:
    if main.metrics.backend is MetricsBackend.PROMETHEUS:
        raise ConfigError("metrics.backend", "prometheus", "read only: spot prices need sqlite or dynamodb")
    return open_store(main, timeout_seconds=metrics_timeout(main.batches.spot_prices.run_interval_seconds))


def run(args: argparse.Namespace) -> int:
    main = load_main_config(args.env_config_path)
    batch = main.batches.spot_prices
    fetch = ec2_fetch(main, args.aws_region)
    store = writable_store(main)
    now = time.time()
    recorder = PriceRecorder(batch.dedupe_interval_seconds, args.start_time if args.start_time is not None else now)
    try:
        if args.once:
            return 0 if pass_once(fetch, store, recorder, now, batch.run_interval_seconds) else 1
        stop = stop_on_signals(log, "stopping after this pass")
        run_forever(fetch, store, recorder, batch.run_interval_seconds, stop)
        return 0
    finally:
        store.close()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m clusterman.batch.spot_price_collector", description=__doc__)
    add_program_arguments(parser, pool_files=False)
    parser.add_argument("--aws-region", default=None, help="the region whose prices to collect (default: aws.region)")
    parser.add_argument(
        "--start-time",
        type=time_argument,
        default=None,
        help="collect from this time (Unix seconds or ISO 8601; default: now; EC2 keeps 90 days)",
    )
    parser.add_argument("--once", action="store_true", help="one pass, then exit (status 1 if it failed)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        return run(args)
    except (ConfigError, MetricsError, OSError, ValueError) as e:
        print(f"spot_price_collector: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

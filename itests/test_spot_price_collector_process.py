"""``python -m clusterman.batch.spot_price_collector`` as a real process against EC2 on moto's
server (through a proxy that throttles or holds calls): its points, in Clusterman's keys, in a
real SQLite store; EC2 refusing, hung or throttled costs a pass and never the period it covered."""

from __future__ import annotations

import queue
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from clusterman.core.config import MetricType
from clusterman.datastore.sqlite import SqliteStore
from clusterman.local.moto_server import free_port
from itests.aws_proxy import Fault
from itests.aws_proxy import FaultyProxy

KEY = "spot_prices|aws_availability_zone=us-west-2a,aws_instance_type=m5.large"
ACTION = "DescribeSpotPriceHistory"


def write_config(tmp_path: Path, endpoint: str, interval: float = 60) -> Path:
    config = tmp_path / "clusterman.yaml"
    config.write_text(
        f"aws: {{region: us-west-2, endpoint_url: '{endpoint}'}}\n"
        f"metrics: {{sqlite_path: {tmp_path / 'metrics.sqlite3'}}}\n"
        f"batches: {{spot_prices: {{run_interval_seconds: {interval}, dedupe_interval_seconds: 60}}}}\n"
    )
    return config


def collector(config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "clusterman.batch.spot_price_collector", "--env-config-path", str(config), *args]


def stored(tmp_path: Path) -> dict[str, list[tuple[int, object]]]:
    store = SqliteStore(tmp_path / "metrics.sqlite3")
    try:
        keys = store.keys(MetricType.METADATA, prefix="spot_prices|")
        return store.read_many(MetricType.METADATA, keys, 0, 2**40)
    finally:
        store.close()


def test_once_writes_every_markets_price_in_clustermans_keys(tmp_path, moto_server):
    before = int(time.time())
    done = subprocess.run(
        collector(write_config(tmp_path, moto_server.url), "--once"), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    prices = stored(tmp_path)
    assert len(prices) > 1000  # every instance type and zone of the region
    [(stamp, value)] = prices[KEY]  # moto's one price, in effect since 2006: written at the pass's start
    assert value == 0.00001 and before <= stamp <= time.time()


def test_ec2_refused_or_hung_is_one_line_and_exit_1(tmp_path, moto_server):
    refused = subprocess.run(
        collector(write_config(tmp_path, f"http://127.0.0.1:{free_port()}", interval=4), "--once"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    with FaultyProxy(moto_server.url) as proxy:
        proxy.add(Fault(action=ACTION, slow_seconds=30, times=None))
        started = time.monotonic()
        hung = subprocess.run(
            collector(write_config(tmp_path, proxy.url, interval=4), "--once"),
            capture_output=True,
            text=True,
            timeout=60,
        )
        waited = time.monotonic() - started
    for done in (refused, hung):
        assert done.returncode == 1 and "Traceback" not in done.stderr
        [line] = [x for x in done.stderr.splitlines() if "no spot prices this pass" in x]
        assert "ERROR" in line
    assert waited < 15  # the call's budget (3 s), not the 30 s EC2 holds it
    assert not (tmp_path / "metrics.sqlite3").exists()


def test_the_loop_outlasts_throttling_and_the_next_pass_covers_the_failed_one(tmp_path, moto_server):
    with FaultyProxy(moto_server.url) as proxy:
        throttled = proxy.add(Fault(action=ACTION, code="RequestLimitExceeded", times=None))
        proc = subprocess.Popen(
            collector(write_config(tmp_path, proxy.url, interval=6)), stderr=subprocess.PIPE, text=True
        )
        lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=lambda: [lines.put(x) for x in proc.stderr], daemon=True).start()  # type: ignore[union-attr]

        def next_line(wanted: str, timeout: float = 30) -> str:
            end = time.monotonic() + timeout
            while time.monotonic() < end:
                try:
                    line = lines.get(timeout=0.5)
                except queue.Empty:
                    continue
                if wanted in line:
                    return line
            raise AssertionError(f"no {wanted!r} line within {timeout} s")

        try:
            failed = next_line("no spot prices this pass")
            throttled.times = 0  # EC2 answers again
            wrote = next_line("wrote ")
        finally:
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(timeout=30) == 0
    since = failed.split("reads again from ")[1].split(")")[0]
    assert f" of {since} to " in wrote  # the pass that worked began where the failed one did
    assert stored(tmp_path)[KEY][0][1] == 0.00001

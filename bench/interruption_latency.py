"""From a Spot interruption warning put on the bus to the node tainted and its replacement asked,
on the local stack (``make run``): median and max over 20 warnings.

The whole chain runs as deployed: moto's EventBridge routes the event to the warning queue, the
tree's drainer files it into the pool's inbox, the autoscaler (which looks every second between
runs) runs at once, taints the node, evicts its pods and raises its group's target; the figure
ends when that run's line reaches the stack's output. Baseline: the stack autoscaler's period
(5 s), half of which a loop that waited for its next run would add on average.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from typing import Any

import boto3

from clusterman.local.moto_server import FAKE_CREDENTIALS
from clusterman.local.stack import AUTOSCALER_ARGS
from clusterman.local.stack import REGION
from clusterman.notices.events import SPOT_WARNING

MOTO = re.compile(r"embedded AWS \(moto\) on (http://\S+?):? ")
STAMP = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ) demand ")


def run(quick: bool = False) -> dict[str, Any]:
    count = 3 if quick else 20
    lines: list[tuple[float, str]] = []
    with tempfile.TemporaryDirectory(prefix="bench-latency-") as tmp:
        stack = subprocess.Popen(
            [sys.executable, "-m", "clusterman.local.stack", "--duration", str(60 + 10 * count), "--base-dir", tmp],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

        def read() -> None:
            assert stack.stdout is not None
            for line in stack.stdout:
                lines.append((time.monotonic(), line.rstrip("\n")))

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        try:
            url = _wait(lines, lambda line: MOTO.search(line) is not None, 120)
            moto = MOTO.search(url[1])
            assert moto is not None
            keys = {"aws_access_key_id": FAKE_CREDENTIALS["AWS_ACCESS_KEY_ID"],
                    "aws_secret_access_key": FAKE_CREDENTIALS["AWS_SECRET_ACCESS_KEY"]}  # fmt: skip
            events = boto3.client("events", endpoint_url=moto.group(1), region_name=REGION, **keys)
            scaling = boto3.client("autoscaling", endpoint_url=moto.group(1), region_name=REGION, **keys)
            for _ in range(4):  # the pool scaled and its nodes joined
                _wait(lines, lambda line: STAMP.match(line) is not None, 120, after=time.monotonic())
            latencies: list[float] = []
            interrupted: set[str] = set()
            for _ in range(count):
                instance = _oldest(scaling, interrupted)
                interrupted.add(instance)
                detail = json.dumps({"instance-id": instance, "instance-action": "terminate"})
                sent = time.monotonic()
                events.put_events(Entries=[{"Source": "aws.ec2", "DetailType": SPOT_WARNING, "Detail": detail}])
                at, line = _wait(lines, lambda line, i=instance: f"{i} spot_interruption: noticed, tainted" in line,
                                 30, after=sent)  # fmt: skip
                if "replacing" not in line:
                    raise AssertionError(f"no replacement asked: {line}")
                latencies.append(at - sent)
                time.sleep(4)
        finally:
            stack.terminate()
            stack.wait(timeout=120)
    period = float(AUTOSCALER_ARGS.split("--period-seconds")[1].split()[0])
    median = statistics.median(latencies)
    return {
        "warnings": count,
        "latency_median_seconds": round(median, 2),
        "latency_max_seconds": round(max(latencies), 2),
        "latencies": [round(x, 2) for x in latencies],
        "period_seconds": period,
        "median_vs_half_a_period": round(median / (period / 2), 2),
    }


def _wait(lines: list[tuple[float, str]], test: Any, timeout: float, after: float = 0.0) -> tuple[float, str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for at, line in list(lines):
            if at >= after and test(line):
                return at, line
        time.sleep(0.02)
    raise AssertionError(f"no such line within {timeout} s; the last: {[line for _, line in lines[-5:]]}")


def _oldest(scaling: Any, skip: set[str]) -> str:
    """The pool's oldest instance not yet interrupted (surely a node by now)."""
    groups = scaling.describe_auto_scaling_groups()["AutoScalingGroups"]
    instances = [i["InstanceId"] for g in groups for i in g["Instances"] if i["InstanceId"] not in skip]
    if not instances:
        raise AssertionError("no instance left to interrupt")
    return instances[0]


if __name__ == "__main__":
    print(json.dumps(run(quick="--quick" in sys.argv), indent=1))

"""``clusterman signal evaluate`` with a bad metrics file, against a real runner it starts itself."""

from __future__ import annotations

import json
import subprocess
import sys

from itests.conftest import unique_app


def evaluate(metrics_path, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "clusterman.cli.main", "signal", "evaluate", "--start", "--namespace", "clusterman",
         "--name", "MostRecentResources", "--app", unique_app(), "--metrics", str(metrics_path), *extra],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_points_out_of_time_order_answer_from_the_newest(tmp_path):
    """Issue 12: the newest point is 5 cpus; unsorted, the signal used to answer 50."""
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"metrics": {"cpus_allocated": [[120, 5.0], [60, 50.0]]}, "timestamp": 120}))
    out = evaluate(path, "--param", "lookahead_minutes=0")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["cpus"] == 5.0
    assert f"{path}: metric 'cpus_allocated' was not in time order; sorted it" in out.stderr


def test_nan_in_the_file_is_reported_naming_it(tmp_path):
    path = tmp_path / "m.json"
    path.write_text('{"metrics": {"cpus_allocated": [[60, 5.0], [120, NaN]]}, "timestamp": 120}')
    out = evaluate(path)
    assert out.returncode == 1
    assert out.stdout == ""
    assert f"{path}: line 1 column " in out.stderr
    assert "NaN is not a number JSON allows" in out.stderr
    assert "Traceback" not in out.stderr

"""Bad inputs to the metrics tools get one line naming the file and what is wrong (issue 12):
a design too big for memory, a non-finite or negative time in a metrics file. Real CLI processes,
each under a 1 GiB address-space limit so a regression fails here rather than swapping the host."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

LIMIT = 1024**3


def limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (LIMIT, LIMIT))


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "clusterman.cli.main", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, preexec_fn=limited)


def test_a_design_too_big_for_memory_is_refused_with_the_size_it_needs(tmp_path):
    design = tmp_path / "huge.yaml"
    design.write_text(
        "start: 0\nduration: 1000000000d\ninterval: 1m\n"
        "series: [{name: cpus_allocated, shape: [{steady: {value: 4}}]}]\n"
    )
    done = cli("generate-data", "--design", str(design), "--output", str(tmp_path / "out.json.gz"))
    assert done.returncode == 1
    assert done.stderr.startswith(f"clusterman generate-data: {design}: duration: 86,400,000,000,000 s"), done.stderr
    assert "1,440,000,000,000 points per series" in done.stderr and "TiB of memory" in done.stderr
    assert len(done.stderr.splitlines()) == 1 and "MemoryError" not in done.stderr
    assert not (tmp_path / "out.json.gz").exists()


def test_a_non_finite_or_negative_time_in_a_metrics_file_names_the_file(tmp_path):
    key = "cpus_allocated|cluster=c,pool=p.simulated"
    for name, point in [("nan.json", "[NaN, 1]"), ("neg.json", "[-60, 1]")]:
        path = tmp_path / name
        path.write_text('{"system_metrics": {"' + key + '": [[60, 1], ' + point + "]}}")
        done = cli("metrics", "load", "--sqlite", str(tmp_path / "m.sqlite3"), "--input", str(path))
        assert done.returncode == 1
        assert f"{path}: system_metrics: {key}[1]: timestamp must be Unix seconds" in done.stderr, done.stderr
        assert len(done.stderr.splitlines()) == 1
    nan_value = tmp_path / "nan-value.json"
    nan_value.write_text(json.dumps({"metadata": {key: [[60, {"<m5.large, a>": float("nan")}]]}}))
    done = cli("metrics", "load", "--sqlite", str(tmp_path / "m.sqlite3"), "--input", str(nan_value))
    assert done.returncode == 1
    assert f"{nan_value}: metadata: {key}[0][<m5.large, a>]: metric value must be finite, got nan" in done.stderr
    assert not Path(tmp_path / "m.sqlite3").exists(), "nothing was written"

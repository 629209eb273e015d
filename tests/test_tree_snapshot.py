from pathlib import Path

import yaml

from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.tree.snapshot import take_snapshot


def test_the_snapshot_means_the_same_as_the_live_files(tmp_path):
    live = tmp_path / "srv"
    (live / "clusters" / "c1").mkdir(parents=True)
    key = live / "key.json"
    key.write_text('{"accessKeyId": "a", "secretAccessKey": "b"}')
    main_path = live / "clusterman.yaml"
    main_path.write_text(
        yaml.safe_dump(
            {
                "cluster_config_directory": "clusters",
                "state_directory": "../state",
                "aws": {"region": "us-west-2", "access_key_file": str(key)},
            }
        )
    )
    pool_path = live / "clusters" / "c1" / "p1.simulated"
    limits = {"min_capacity": 1, "max_capacity": 3, "max_weight_to_add": 1, "max_weight_to_remove": 1}
    pool_path.write_text(yaml.safe_dump({"scaling_limits": limits, "simulation": {"trace": {"file": "t.yaml"}}}))
    identity = PoolIdentity("c1", "p1", Scheduler.SIMULATED)
    main = load_main_config(main_path)

    copy = take_snapshot(main, main_path, pool_path, identity, tmp_path / "snap")
    key.write_text("{rotated")  # later edits do not reach the copy
    pool_path.write_text("not: [valid")

    copied = load_main_config(copy)
    assert Path(copied.state_directory).resolve() == tmp_path / "state"  # the real state, not a copy
    assert copied.aws.access_key_file != str(key) and "rotated" not in Path(copied.aws.access_key_file).read_text()
    pool = load_pool_config(copied, identity)
    assert pool.scaling_limits.max_capacity == 3
    assert pool.simulation.trace.file == str(live / "clusters" / "c1" / "t.yaml")
    assert (tmp_path / "snap").stat().st_mode & 0o777 == 0o700

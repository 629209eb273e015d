from pathlib import Path

import pytest
import yaml

from clusterman.config.loader import load_main_config
from clusterman.config.loader import load_pool_config
from clusterman.core.config import PoolIdentity
from clusterman.core.config import Scheduler
from clusterman.core.config_schema import ConfigError
from clusterman.tree.snapshot import LastGoodError
from clusterman.tree.snapshot import keep_last_good
from clusterman.tree.snapshot import last_good_home
from clusterman.tree.snapshot import read_last_good
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


def _live(tmp_path: Path) -> tuple[Path, Path, PoolIdentity]:
    live = tmp_path / "srv"
    (live / "clusters" / "c1").mkdir(parents=True)
    main_path = live / "clusterman.yaml"
    main_path.write_text(yaml.safe_dump({"cluster_config_directory": "clusters", "state_directory": "../state"}))
    pool_path = live / "clusters" / "c1" / "p1.simulated"
    limits = {"min_capacity": 1, "max_capacity": 3, "max_weight_to_add": 1, "max_weight_to_remove": 1}
    pool_path.write_text(yaml.safe_dump({"scaling_limits": limits}))
    return main_path, pool_path, PoolIdentity("c1", "p1", Scheduler.SIMULATED)


def test_the_kept_configuration_survives_its_source_and_the_newest_wins(tmp_path):
    main_path, pool_path, identity = _live(tmp_path)
    home = last_good_home(tmp_path / "kept", main_path, identity)
    assert read_last_good(home) is None
    baseline = (("a", "1"),)
    for capacity, at in ((3, 100.0), (4, 200.0)):
        pool_path.write_text(
            pool_path.read_text().replace(f"max_capacity: {capacity - 1}", f"max_capacity: {capacity}")
        )
        main = load_main_config(main_path)
        keep_last_good(main, main_path, pool_path, identity, baseline, at, home)
    pool_path.write_text("not: [valid")  # the live file goes bad: the kept copy does not

    kept = read_last_good(home)
    assert kept is not None and kept.accepted_at == 200.0 and kept.baseline == baseline
    assert load_pool_config(load_main_config(kept.main_path), identity).scaling_limits.max_capacity == 4
    assert len(list(home.glob("snap-*"))) == 1  # older copies removed
    assert last_good_home(tmp_path / "kept", tmp_path / "other.yaml", identity) != home  # per main file


def test_a_kept_directory_others_can_write_is_not_used(tmp_path):
    main_path, pool_path, identity = _live(tmp_path)
    home = last_good_home(tmp_path / "kept", main_path, identity)
    keep_last_good(load_main_config(main_path), main_path, pool_path, identity, (), 1.0, home)
    home.chmod(0o777)
    with pytest.raises(LastGoodError, match="writable by others"):
        read_last_good(home)


def test_the_snapshot_reads_as_strictly_as_the_validation(tmp_path):
    """A key written twice is refused, not copied with the last value kept."""
    main_path, pool_path, identity = _live(tmp_path)
    main = load_main_config(main_path)
    pool_path.write_text(pool_path.read_text() + "scaling_limits: {}\n")
    with pytest.raises(ConfigError, match="scaling_limits: given twice"):
        take_snapshot(main, main_path, pool_path, identity, tmp_path / "snap")

"""The kinds of resource group and the schedulers are tables: every kind has its row, and no row
names what does not exist (docs/architecture.md, "Adding a scheduler or a cloud kind")."""

from dataclasses import fields
from pathlib import Path

import pytest

from clusterman.cloud.kinds import KINDS
from clusterman.cloud.kinds import Clouds
from clusterman.cloud.kinds import clouds_needed
from clusterman.config.loader import list_pools
from clusterman.core.config import SCHEDULER_TRAITS
from clusterman.core.config import GroupKind
from clusterman.core.config import PoolIdentity
from clusterman.core.config import ResourceGroupConfig
from clusterman.core.config import Scheduler
from clusterman.core.config import parse_resource_groups
from clusterman.core.config import split_scheduler
from clusterman.wiring.schedulers import SCHEDULERS


def test_every_kind_of_resource_group_has_its_row() -> None:
    assert set(KINDS) == set(GroupKind)
    for kind, row in KINDS.items():
        assert row.kind is kind
        assert row.adapter.kind == kind  # the groups it finds say they are of this kind
        assert row.cloud in {f.name for f in fields(Clouds)}


def test_a_kind_with_no_row_is_refused_where_the_config_is_read() -> None:
    with pytest.raises(ValueError, match=r"unknown group kind 'mig' \(known: asg, sfr, simulated\)"):
        parse_resource_groups([{"mig": {"tag": "k"}}])
    with pytest.raises(ValueError):
        ResourceGroupConfig("mig")


def test_only_groups_outside_the_process_need_a_connection() -> None:
    entries = [ResourceGroupConfig(k) for k in ("asg", "sfr", "simulated")]
    assert clouds_needed(entries) == {"aws"}
    assert clouds_needed(entries[2:]) == frozenset()


def test_every_scheduler_has_its_rows() -> None:
    assert set(SCHEDULERS) == set(Scheduler) == set(SCHEDULER_TRAITS)
    for scheduler, row in SCHEDULERS.items():
        assert row.scheduler is scheduler


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("web.kubernetes", ("web", Scheduler.KUBERNETES)),
        ("web.v2.mesos", ("web.v2", Scheduler.MESOS)),
        ("web.simulated", ("web", Scheduler.SIMULATED)),
        ("web.yaml", ("web.yaml", None)),
        (".mesos", (".mesos", None)),
        ("web", ("web", None)),
    ],
)
def test_a_pool_name_ends_in_its_scheduler(name: str, expected: tuple[str, Scheduler | None]) -> None:
    assert split_scheduler(name) == expected


def test_pool_files_are_the_files_named_for_a_scheduler(tmp_path: Path) -> None:
    (tmp_path / "c1").mkdir()
    for name in ("web.kubernetes", "db.mesos", "README.md", ".mesos", "batch.simulated"):
        (tmp_path / "c1" / name).write_text("")
    (tmp_path / "c1" / "old.kubernetes").mkdir()
    assert list_pools(str(tmp_path), "c1") == [
        PoolIdentity("c1", "batch", Scheduler.SIMULATED),
        PoolIdentity("c1", "db", Scheduler.MESOS),
        PoolIdentity("c1", "web", Scheduler.KUBERNETES),
    ]

"""The kinds of resource group and the schedulers are tables: every kind has its row, and no row
names what does not exist (docs/architecture.md, "Adding a scheduler or a cloud kind")."""

from dataclasses import fields

import pytest

from clusterman.cloud.kinds import KINDS
from clusterman.cloud.kinds import Clouds
from clusterman.cloud.kinds import clouds_needed
from clusterman.core.config import GroupKind
from clusterman.core.config import ResourceGroupConfig
from clusterman.core.config import parse_resource_groups


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

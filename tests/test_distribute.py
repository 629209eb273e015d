"""Spreading the pool's target over its resource groups (Clusterman's rule)."""

from fractions import Fraction

import pytest

from clusterman.decision.distribute import distribute
from tests.scaling_builders import group
from tests.scaling_builders import nodes
from tests.scaling_builders import request
from tests.scaling_builders import run
from tests.scaling_builders import snapshot


@pytest.mark.parametrize(
    ("groups", "total", "expected"),
    [
        ([group("a", 2), group("b", 5), group("c", 2)], 12, {"a": 4, "b": 5, "c": 3}),  # lowest first, ties by id
        ([group("a", 2, hi=2), group("b", 5), group("c", 2)], 12, {"a": 2, "b": 5, "c": 5}),
        ([group("a", 5), group("b", 5), group("c", 1)], 8, {"a": 3, "b": 4, "c": 1}),  # highest first
        ([group("a", 5, lo=5), group("b", 5), group("c", 1)], 8, {"a": 5, "b": 2, "c": 1}),
        ([group("a", 3), group("old", 4, stale=True)], Fraction(36, 5), {"a": 8, "old": 0}),  # ceil(7.2)
        ([group("a", 3, hi=4), group("b", 1, hi=2)], 10, {"a": 4, "b": 2}),  # every group at its max
        ([group("a", 10, hi=12), group("b", 10)], 26, {"a": 12, "b": 14}),  # docs/scaling.md
    ],
)
def test_distribution(groups, total, expected):
    assert distribute(groups, Fraction(total)) == expected


def test_decision_reports_what_the_groups_allow():
    d = run(snapshot(nodes(2), [group("g1", 2, hi=5)]), request(5))
    assert d.target_capacity == 5 and d.group_targets == {"g1": 5}
    assert "the groups' own bounds allow 5" in d.explanation


def test_all_groups_stale_holds():
    d = run(snapshot(nodes(2), [group("g1", 2, stale=True)]), request(0.1))
    assert d.taint == () and d.terminate == () and d.group_targets == {"g1": 2}
    assert d.explanation.startswith("no resource group to scale")

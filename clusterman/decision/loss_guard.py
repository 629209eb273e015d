"""Clusterman's capacity-loss guard (``prevent_scale_down_after_capacity_loss``).

When more than ``instance_loss_threshold`` joined nodes vanished since the previous run without the
autoscaler terminating them (spot reclaims, a zone outage), this run may not scale down nor kill
anything: the pool has just lost capacity it did not choose to lose. The memory of the previous
run is a value carried between decisions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class NodeMemory:
    joined: frozenset[str] = frozenset()  # joined node ids the previous run saw
    terminating: frozenset[str] = frozenset()  # ids the autoscaler chose to terminate, not yet gone

    def lost(self, joined_now: frozenset[str]) -> int:
        """Nodes that were joined last run, are gone now, and were not terminated by us."""
        return len(self.joined - joined_now - self.terminating)

    def remember(self, joined_now: frozenset[str], all_ids: Iterable[str], terminated: Iterable[str]) -> NodeMemory:
        present = set(all_ids)
        still_terminating = frozenset(i for i in (*self.terminating, *terminated) if i in present)
        return NodeMemory(joined_now, still_terminating)

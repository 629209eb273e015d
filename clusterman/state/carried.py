"""The autoscaler's carried-over state (scale lock, breaker, capacity-loss memory), kept across restarts.

One item per pool in the state store: state ``autoscaler_state``, entity
``<cluster>.<pool>.<scheduler>`` (as a pause), its payload ``AutoscalerState.as_json()``. Without
it, a restart would forget a scale lock it holds (and ask for capacity again before the last
request joined) or a capacity loss it just saw (and shrink the pool right after losing nodes).

A second item, state ``group_targets``, keeps each resource group's target as last read: a group
that cannot be read counts at it within the pool's bounds, so after a restart the other groups
may still grow within what ``max_capacity`` leaves (without it the pool does not grow).
"""

from __future__ import annotations

from collections.abc import Mapping

from clusterman.core.config import PoolIdentity
from clusterman.core.stored import is_amount
from clusterman.decision.autoscaler_state import AutoscalerState
from clusterman.state.pause import entity
from clusterman.state.store import DamagedItem
from clusterman.state.store import StateError
from clusterman.state.store import StateItem
from clusterman.state.store import StateStore

AUTOSCALER_STATE = "autoscaler_state"
GROUP_TARGETS = "group_targets"


class CorruptState(StateError):
    """The stored state is there but is not one the autoscaler wrote; the message names the field."""


class StoredState:
    """Loads and saves one pool's ``AutoscalerState``; nothing is read until ``load``."""

    def __init__(self, store: StateStore, identity: PoolIdentity) -> None:
        self.store = store
        self.entity = entity(identity)

    def load(self) -> AutoscalerState:
        """The saved state, or a fresh one when none was saved. StateError when unreadable,
        CorruptState when the item is not one ``save`` wrote."""
        try:
            item = self.store.get(AUTOSCALER_STATE, self.entity)
        except DamagedItem as e:
            raise CorruptState(str(e)) from e
        if item is None:
            return AutoscalerState()
        try:
            return AutoscalerState.from_json(item.payload)
        except ValueError as e:
            raise CorruptState(f"state {AUTOSCALER_STATE} of {self.entity}: {e}") from e

    def save(self, state: AutoscalerState, now: float) -> None:
        self.store.put(StateItem(AUTOSCALER_STATE, self.entity, int(now), payload=state.as_json()))

    def load_targets(self) -> dict[str, float]:
        """Each group's target as last read, by group id; empty when none was saved. StateError
        when unreadable, CorruptState when the item is not one ``save_targets`` wrote."""
        try:
            item = self.store.get(GROUP_TARGETS, self.entity)
        except DamagedItem as e:
            raise CorruptState(str(e)) from e
        if item is None:
            return {}
        targets = item.payload.get("targets") if isinstance(item.payload, dict) else None
        if not isinstance(targets, dict) or not all(isinstance(k, str) and is_amount(v) for k, v in targets.items()):
            raise CorruptState(f"state {GROUP_TARGETS} of {self.entity}: expected {{group id: capacity}}")
        return {k: float(v) for k, v in targets.items()}

    def save_targets(self, targets: Mapping[str, float], now: float) -> None:
        self.store.put(StateItem(GROUP_TARGETS, self.entity, int(now), payload={"targets": dict(targets)}))

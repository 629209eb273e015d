"""A pool's node migration record, kept in the state store (``decision/migration.py: MigrationRecord``).

One item per pool: state ``node_migration``, entity ``<cluster>.<pool>.<scheduler>`` (as a pause),
its payload the record's JSON. Written before the run acts whenever it changes, and read at every
run (not once per process): a standby that takes the pool's lease, or a restarted process, goes
on from the last step written, and a node already replaced is gone from the pool, so no step is
done twice.
"""

from __future__ import annotations

from clusterman.core.config import PoolIdentity
from clusterman.decision.migration import MigrationRecord
from clusterman.state.carried import CorruptState
from clusterman.state.pause import entity
from clusterman.state.store import DamagedItem
from clusterman.state.store import StateItem
from clusterman.state.store import StateStore

NODE_MIGRATION = "node_migration"


class StoredMigration:
    def __init__(self, store: StateStore, identity: PoolIdentity) -> None:
        self.store = store
        self.entity = entity(identity)

    def load(self) -> MigrationRecord:
        """The record, or an empty one when none was kept. StateError when it cannot be read,
        CorruptState (naming the field) when the item is not one ``save`` wrote."""
        try:
            item = self.store.get(NODE_MIGRATION, self.entity)
        except DamagedItem as e:
            raise CorruptState(str(e)) from e
        if item is None:
            return MigrationRecord()
        try:
            return MigrationRecord.from_json(item.payload)
        except ValueError as e:
            raise CorruptState(f"state {NODE_MIGRATION} of {self.entity}: {e}") from e

    def save(self, record: MigrationRecord, now: float) -> None:
        self.store.put(StateItem(NODE_MIGRATION, self.entity, int(now), payload=record.as_json()))

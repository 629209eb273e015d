"""The disruption budget consolidation spends, and what it remembers from run to run
(docs/consolidation.md).

Remembered in the ``AutoscalerState`` (and so in the state store: a restart keeps it):
  since      per node, when it became a candidate (its pods fit elsewhere): it is drained only
             once it has been one in every run for ``consolidate_after``
  evictions  (time, node, pods) for each node consolidation drained, over the last hour (the
             node "" in an entry kept by a version that did not name it)
  keeping    per node drained to be kept, when: it is untainted once its pods are gone
  given_up   per node whose drain to keep was given up (its pods would not leave, or a reload
             stopped it), when: it is not drained again for ``REST_SECONDS``, so that a pod a
             disruption budget protects for good does not keep its node tainted most of the time
  grew_at    when a decision last raised the pool's target: nothing is drained for
             ``consolidate_after`` after it (demand that rose may go on rising)
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import replace
from typing import Any

from clusterman.core.model import NO_TIME

HOUR = 3600.0
REST_SECONDS = HOUR  # a node given up on is not looked at again for this long


@dataclass(frozen=True)
class DisruptionState:
    since: tuple[tuple[str, float], ...] = ()
    evictions: tuple[tuple[float, str, int], ...] = ()
    keeping: tuple[tuple[str, float], ...] = ()
    grew_at: float = NO_TIME
    given_up: tuple[tuple[str, float], ...] = ()

    def evicted(self, now: float) -> int:
        """Pods consolidation evicted within the last hour."""
        return sum(pods for at, _, pods in self.evictions if now - at < HOUR)

    def candidate_since(self, node_id: str) -> float | None:
        return dict(self.since).get(node_id)

    def resting(self, now: float) -> frozenset[str]:
        """Nodes given up on within ``REST_SECONDS``: not candidates now."""
        return frozenset(self.rest_ends(now))

    def rest_ends(self, now: float) -> dict[str, float]:
        """Per node resting now, when its rest ends."""
        return {n: at + REST_SECONDS for n, at in self._given_up_since(now).items()}

    def _given_up_since(self, now: float) -> dict[str, float]:
        """Per node still resting at ``now``, when it was given up on."""
        return {n: at for n, at in self.given_up if now - at < REST_SECONDS}

    @property
    def kept(self) -> dict[str, float]:
        return dict(self.keeping)

    def after(
        self,
        now: float,
        candidates: Iterable[str],
        drained: Mapping[str, int],
        kept: Iterable[str],
    ) -> DisruptionState:
        """The state for the next run: ``candidates`` qualify now (each keeps its first time),
        ``drained`` nodes (and their pods) were chosen now, ``kept`` of them to be kept."""
        since = dict(self.since)
        fresh = tuple((n, since.get(n, now)) for n in candidates if n not in drained)
        evictions = tuple(e for e in self.evictions if now - e[0] < HOUR)
        evictions += tuple((now, n, pods) for n, pods in drained.items() if pods)
        keeping = dict(self.keeping)
        keeping.update((n, now) for n in kept)
        resting = tuple(self._given_up_since(now).items())
        return replace(self, since=fresh, evictions=evictions, keeping=tuple(sorted(keeping.items())), given_up=resting)

    def untaken(self, nodes: Iterable[str], now: float) -> DisruptionState:
        """The same, without what choosing ``nodes`` at ``now`` spent: they were never tainted (the
        run stopped before changing taints, or their taint failed), so none of their pods are
        evicted for that choice and the next run may choose them again."""
        untainted = set(nodes)
        evictions = tuple(e for e in self.evictions if not (e[0] == now and e[1] in untainted))
        keeping = tuple((n, t) for n, t in self.keeping if not (t == now and n in untainted))
        return replace(self, evictions=evictions, keeping=keeping)

    def after_release(self, released: Iterable[str], given_up: Iterable[str], now: float) -> DisruptionState:
        """The same, without the kept nodes ``released`` (untainted, terminated or gone), those
        ``given_up`` on (untainted with their pods) resting from ``now``."""
        gone = set(released)
        keeping = tuple((n, t) for n, t in self.keeping if n not in gone)
        resting = self._given_up_since(now)
        resting.update((n, now) for n in given_up)
        return replace(self, keeping=keeping, given_up=tuple(sorted(resting.items())))

    def as_json(self) -> dict[str, Any]:
        return {
            "since": {n: t for n, t in self.since},
            "evictions": [[at, node, pods] for at, node, pods in self.evictions],
            "keeping": {n: t for n, t in self.keeping},
            "grew_at": None if self.grew_at == NO_TIME else self.grew_at,
            "given_up": {n: t for n, t in self.given_up},
        }

    @staticmethod
    def from_json(data: Any) -> DisruptionState:
        """The inverse of ``as_json``; an absent part (state kept before consolidation) is empty.
        ValueError naming the bad field."""
        if data is None:
            return DisruptionState()
        if not isinstance(data, Mapping):
            raise ValueError(f"disruption: expected an object, got {data!r}")
        evictions = data.get("evictions") or []
        if not isinstance(evictions, list) or not all(_eviction(e) for e in evictions):
            raise ValueError(f"disruption.evictions: expected a list of [time, node, pods], got {evictions!r}")
        grew = data.get("grew_at")
        if grew is not None and not _number(grew):
            raise ValueError(f"disruption.grew_at: expected a time or null, got {grew!r}")
        return DisruptionState(
            _times(data, "since"),
            tuple((float(e[0]), "" if len(e) == 2 else e[1], int(e[-1])) for e in evictions),
            _times(data, "keeping"),
            NO_TIME if grew is None else float(grew),
            _times(data, "given_up"),
        )


def _number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and math.isfinite(value) and value >= 0


def _eviction(entry: Any) -> bool:
    """[time, node, pods], or [time, pods] as kept by a version that did not name the node."""
    if not isinstance(entry, list) or len(entry) not in (2, 3) or not _number(entry[0]) or not _number(entry[-1]):
        return False
    return len(entry) == 2 or isinstance(entry[1], str)


def _times(data: Mapping[str, Any], name: str) -> tuple[tuple[str, float], ...]:
    value = data.get(name) or {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and _number(t) for k, t in value.items()):
        raise ValueError(f"disruption.{name}: expected an object of node id -> time, got {value!r}")
    return tuple(sorted((k, float(t)) for k, t in value.items()))

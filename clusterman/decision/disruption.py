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
  unknown    per node chosen whose taint's outcome is not known, (when chosen, since when it was
             a candidate): the state is kept before the run acts, so every choice is one until the
             run learns its taint's result; a taint not answered (a timeout, a lost connection, a
             server error) may have been applied or not, and a run killed before learning it left
             it so: the next run settles it from its snapshot (``settled``)
"""

from __future__ import annotations

from collections.abc import Collection
from collections.abc import Iterable
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import replace
from typing import Any

from clusterman.core.model import NO_TIME
from clusterman.core.stored import is_amount

HOUR = 3600.0
REST_SECONDS = HOUR  # a node given up on is not looked at again for this long


@dataclass(frozen=True)
class DisruptionState:
    since: tuple[tuple[str, float], ...] = ()
    evictions: tuple[tuple[float, str, int], ...] = ()
    keeping: tuple[tuple[str, float], ...] = ()
    grew_at: float = NO_TIME
    given_up: tuple[tuple[str, float], ...] = ()
    unknown: tuple[tuple[str, float, float], ...] = ()  # (node, chosen at, candidate since)

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
        ``drained`` nodes (and their pods) were chosen now, ``kept`` of them to be kept. Each
        drained node's outcome is unknown until the run learns its taint's result; one left
        unknown for an hour no longer matters (its evictions have left the hour) and is dropped."""
        since = dict(self.since)
        fresh = tuple((n, since.get(n, now)) for n in candidates if n not in drained)
        evictions = tuple(e for e in self.evictions if now - e[0] < HOUR)
        evictions += tuple((now, n, pods) for n, pods in drained.items() if pods)
        keeping = dict(self.keeping)
        keeping.update((n, now) for n in kept)
        resting = tuple(self._given_up_since(now).items())
        unknown = {n: (at, t) for n, at, t in self.unknown if now - at < HOUR}
        unknown.update((n, (now, since.get(n, now))) for n in drained)
        return replace(
            self,
            since=fresh,
            evictions=evictions,
            keeping=tuple(sorted(keeping.items())),
            given_up=resting,
            unknown=tuple(sorted((n, at, t) for n, (at, t) in unknown.items())),
        )

    def untaken(self, nodes: Iterable[str], now: float) -> DisruptionState:
        """The same, without what choosing ``nodes`` at ``now`` spent: they were never tainted (the
        run stopped before changing taints, or their taint failed), so none of their pods are
        evicted for that choice and the next run may choose them again, as candidates since
        when they were ones before (they never stopped being: no new ``consolidate_after`` wait)."""
        back = set(nodes)
        return self._back({n: now for n in back}, {n: t for n, at, t in self.unknown if at == now and n in back})

    def confirmed(self, nodes: Iterable[str]) -> DisruptionState:
        """The same, with the taint of ``nodes`` known done: what choosing them spent stands."""
        done = set(nodes)
        if not any(n in done for n, _, _ in self.unknown):
            return self
        return replace(self, unknown=tuple(e for e in self.unknown if e[0] not in done))

    def settled(self, tainted: Collection[str], present: Collection[str]) -> tuple[DisruptionState, dict[str, str]]:
        """The same with each choice whose taint's outcome was unknown settled by a snapshot read
        since (``tainted``: the nodes tainted for scale-down in it, ``present``: every node in
        it): a node found tainted was tainted by it, and its spend stands (a node to remove goes on
        as one, a node to keep as one); a node found untainted was not, and its spend is taken back
        (its candidate time restored, as ``untaken``); a node gone evicted nothing for it: its
        spend is taken back. Also, per node settled, how: "tainted", "untainted" or "gone"."""
        if not self.unknown:
            return self, {}
        found: dict[str, str] = {}
        chosen_at: dict[str, float] = {}
        since: dict[str, float] = {}
        for node, at, candidate in self.unknown:
            if node in tainted:
                found[node] = "tainted"
                continue
            found[node] = "untainted" if node in present else "gone"
            chosen_at[node] = at
            if node in present:
                since[node] = candidate
        state = self._back(chosen_at, since)
        return replace(state, unknown=()), found

    def _back(self, chosen_at: Mapping[str, float], since: Mapping[str, float]) -> DisruptionState:
        """Without what choosing each node at its time spent (its evictions, its place among the
        nodes kept, its unknown outcome), each of ``since`` a candidate again since that time."""
        evictions = tuple(e for e in self.evictions if chosen_at.get(e[1]) != e[0])
        keeping = tuple((n, t) for n, t in self.keeping if chosen_at.get(n) != t)
        unknown = tuple(e for e in self.unknown if chosen_at.get(e[0]) != e[1])
        candidates = dict(self.since)
        restored = {n: t for n, t in since.items() if n not in candidates}
        return replace(
            self,
            since=tuple(sorted({**candidates, **restored}.items())) if restored else self.since,
            evictions=evictions,
            keeping=keeping,
            unknown=unknown,
        )

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
            "unknown": {n: [at, since] for n, at, since in self.unknown},
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
        if grew is not None and not is_amount(grew):
            raise ValueError(f"disruption.grew_at: expected a time or null, got {grew!r}")
        return DisruptionState(
            _times(data, "since"),
            tuple((float(e[0]), "" if len(e) == 2 else e[1], int(e[-1])) for e in evictions),
            _times(data, "keeping"),
            NO_TIME if grew is None else float(grew),
            _times(data, "given_up"),
            _unknown(data.get("unknown") or {}),
        )


def _eviction(entry: Any) -> bool:
    """[time, node, pods], or [time, pods] as kept by a version that did not name the node."""
    if not isinstance(entry, list) or len(entry) not in (2, 3) or not is_amount(entry[0]) or not is_amount(entry[-1]):
        return False
    return len(entry) == 2 or isinstance(entry[1], str)


def _unknown(value: Any) -> tuple[tuple[str, float, float], ...]:
    """{node: [chosen at, candidate since]}."""
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, list) and len(v) == 2 and all(is_amount(t) for t in v)
        for k, v in value.items()
    ):
        raise ValueError(f"disruption.unknown: expected an object of node id -> [time, time], got {value!r}")
    return tuple(sorted((k, float(v[0]), float(v[1])) for k, v in value.items()))


def _times(data: Mapping[str, Any], name: str) -> tuple[tuple[str, float], ...]:
    value = data.get(name) or {}
    if not isinstance(value, Mapping) or not all(isinstance(k, str) and is_amount(t) for k, t in value.items()):
        raise ValueError(f"disruption.{name}: expected an object of node id -> time, got {value!r}")
    return tuple(sorted((k, float(t)) for k, t in value.items()))

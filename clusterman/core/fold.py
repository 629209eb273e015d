"""Sums over a snapshot's nodes that cost what changed since the last snapshot, not the whole pool.

The autoscaler reads every node several times a run (the decision's node sets and totals, the
collector's figures); the simulator does that every simulated minute, while only a few nodes
change from one minute to the next. A ``NodeFold`` cuts the node sequence into fixed chunks of
``CHUNK`` positions and summarizes each chunk; a chunk equal to the one at the same position in
one of the last few snapshots reuses that chunk's summary. The result is a function of the
nodes alone, memo or not: the same chunks, summarized the same way, in the same order; so a
caller that combines the summaries in order gets exactly what one fresh pass gives (floats
included: each chunk is summed in order, then the chunks in order).

Chunks are matched by value (``Node`` equality, identity first) once per snapshot
(``chunk_tokens``). Summaries must be immutable values computed from the nodes' values alone (a
summary that keeps nodes may hold nodes equal to the snapshot's rather than the very same
objects). The memo is module state shared by every caller; it only ever returns what summarizing
the chunk again would. Folds live in the core only (tests/test_layers.py checks it): readers outside
take per-snapshot values (``PoolSnapshot.figures``, ``node_sets``, ``member_weights``,
``account_snapshot``), all from one fold that sums up each chunk in one pass (``model.ChunkFigures``).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Hashable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Generic
from typing import TypeVar

if TYPE_CHECKING:  # model.py folds its own snapshot counts with this module
    from clusterman.core.model import Node

CHUNK = 32
GENERATIONS = 3  # node tuples (and calls) remembered: callers alternating over two node sets still hit

S = TypeVar("S")
Chunk = tuple["Node", ...]


class ChunkToken:
    """One chunk's nodes, shared by every fold: a chunk equal to the chunk at the same position of a
    recent snapshot gets that chunk's token, so folds find their summaries by the token's identity
    (cheap), and chunks are compared once per snapshot, not once per fold."""

    __slots__ = ("nodes",)

    def __init__(self, nodes: Chunk) -> None:
        self.nodes = nodes


_recent: list[tuple[Chunk, list[ChunkToken]]] = []


def chunk_tokens(nodes: Chunk) -> list[ChunkToken]:
    """The tokens of ``nodes``' chunks, worked out once per node tuple.

    Chunks are compared with ``==``, which for tuples checks identity first: unchanged nodes cost a
    pointer comparison, and a node rebuilt with equal values (a summary only reads values) matches
    too. A node added or removed in the middle shifts the later chunks; they are summarized anew.
    """
    recent = _recent
    for seen, tokens in recent:
        if seen is nodes:
            return tokens
    tokens = []
    for k, i in enumerate(range(0, len(nodes), CHUNK)):
        chunk = nodes[i : i + CHUNK]
        for _, seen_tokens in recent:
            if k < len(seen_tokens) and seen_tokens[k].nodes == chunk:
                token = seen_tokens[k]
                token.nodes = chunk  # equal values: hold the newest objects, so next time identity decides
                tokens.append(token)
                break
        else:
            tokens.append(ChunkToken(chunk))
    _recent[:] = [(nodes, tokens), *recent[: GENERATIONS - 1]]
    return tokens


class NodeFold(Generic[S]):
    """``summaries(nodes, context)`` = ``[summarize(chunk, context) for each chunk]``, remembered."""

    def __init__(self, summarize: Callable[[Chunk, Hashable], S]) -> None:
        self.summarize = summarize
        self._context: Hashable = None
        self._memo: list[dict[ChunkToken, S]] = []  # newest first, for ``_context``

    def summaries(self, nodes: Sequence[Node], context: Hashable = None) -> list[S]:
        """``context``: whatever else the summary depends on (e.g. the pool's group ids); when it
        changes, nothing remembered is used."""
        if context != self._context:
            self._context, self._memo = context, []
        older = self._memo
        latest = older[0] if older else {}
        fresh: dict[ChunkToken, S] = {}
        out: list[S] = []
        for token in chunk_tokens(nodes if isinstance(nodes, tuple) else tuple(nodes)):
            if token in latest:
                summary = latest[token]
            else:
                for generation in older[1:]:
                    if token in generation:
                        summary = generation[token]
                        break
                else:
                    summary = self.summarize(token.nodes, context)
            fresh[token] = summary
            out.append(summary)
        self._memo = [fresh, *older[: GENERATIONS - 1]]
        return out

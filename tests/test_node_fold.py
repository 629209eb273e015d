"""Folds over a snapshot's nodes that reuse unchanged chunks: always what a fresh pass gives."""

from __future__ import annotations

import dataclasses
import functools

from hypothesis import given
from hypothesis import settings
from hypothesis import strategies as st

from clusterman.core import fold
from clusterman.core.accounting import account_nodes
from clusterman.core.fold import CHUNK
from clusterman.core.fold import NodeFold
from clusterman.core.model import Node
from clusterman.core.model import NodeState
from clusterman.core.model import PoolSnapshot
from clusterman.core.model import ResourceGroup
from clusterman.core.model import Task
from clusterman.core.resources import Resources
from clusterman.decision.demand import demand_from_snapshot
from clusterman.decision.pool_view import view_of

STATES = [NodeState.READY, NodeState.TAINTED, NodeState.ORPHAN, NodeState.CORDONED, NodeState.UNKNOWN]


def node(i: int, state: NodeState = NodeState.READY, tasks: int = 0, group: str = "g1") -> Node:
    work = tuple(Task(f"t{i}-{k}", Resources(cpus=0.3, mem=100.5)) for k in range(tasks))
    return Node(f"n{i}", state, Resources(cpus=4, mem=16000.1), group_id=group, weight=1.5, tasks=work)


def forget() -> None:
    """Drop every memo, so the next call is a fresh pass."""
    fold._recent.clear()
    for module_fold in module_folds():
        module_fold._memo = []


@functools.cache
def module_folds() -> list[NodeFold]:
    """The folds the modules made at import, found once: a scan of the heap per step took most of
    the property's time in a full run, where the heap holds every test's objects."""
    import gc

    return [o for o in gc.get_objects() if isinstance(o, NodeFold)]


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("change"), st.integers(0, 10**6), st.sampled_from(STATES), st.integers(0, 3)),
        st.tuples(st.just("add"), st.integers(0, 10**6), st.sampled_from(STATES), st.integers(0, 3)),
        st.tuples(st.just("remove"), st.integers(0, 10**6), st.just(NodeState.READY), st.just(0)),
        st.tuples(st.just("same"), st.just(0), st.just(NodeState.READY), st.just(0)),
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 3 * CHUNK), OPS)
def test_summaries_always_equal_a_fresh_pass(size, ops):
    count = NodeFold(lambda chunk, context: (context, tuple(n.id for n in chunk), sum(len(n.tasks) for n in chunk)))
    nodes = [node(i, STATES[i % 5], i % 3, group="g1" if i % 4 else "g2") for i in range(size)]
    made = size
    groups = (ResourceGroup("g1", 10, 10), ResourceGroup("g2", 5, 5))
    for op, where, state, tasks in ops:
        if op == "change" and nodes:
            k = where % len(nodes)
            nodes[k] = dataclasses.replace(nodes[k], state=state, tasks=node(k, tasks=tasks).tasks)
        elif op == "add":
            made += 1
            nodes.insert(where % (len(nodes) + 1), node(made, state, tasks))
        elif op == "remove" and nodes:
            del nodes[where % len(nodes)]
        snapshot = PoolSnapshot(0.0, tuple(nodes), groups)
        chunks = [tuple(nodes[i : i + CHUNK]) for i in range(0, len(nodes), CHUNK)]
        assert count.summaries(snapshot.nodes, "ctx") == [count.summarize(c, "ctx") for c in chunks]
        remembered = (view_of(snapshot), account_nodes(snapshot.nodes), demand_from_snapshot(snapshot),
                      dict(snapshot.counts_by_state))  # fmt: skip
        forget()
        fresh_snapshot = PoolSnapshot(0.0, tuple(nodes), groups)
        fresh = (view_of(fresh_snapshot), account_nodes(fresh_snapshot.nodes), demand_from_snapshot(fresh_snapshot),
                 dict(fresh_snapshot.counts_by_state))  # fmt: skip
        assert remembered == fresh


def test_an_unchanged_chunk_is_not_summarized_again():
    calls = []
    fold_ = NodeFold(lambda chunk, _: calls.append(chunk[0].id) or len(chunk))
    nodes = [node(i) for i in range(3 * CHUNK)]
    fold_.summaries(tuple(nodes))
    assert calls == ["n0", f"n{CHUNK}", f"n{2 * CHUNK}"]
    nodes[CHUNK + 1] = node(CHUNK + 1, tasks=2)
    assert fold_.summaries(tuple(nodes)) == [CHUNK] * 3
    assert calls[3:] == [f"n{CHUNK}"]  # only the chunk that changed
    fold_.summaries(tuple(node(i) if i == 5 else n for i, n in enumerate(nodes)))  # rebuilt, equal values
    assert calls[4:] == []


def test_a_chunk_rebuilt_with_equal_values_keeps_its_token_and_holds_the_new_nodes():
    nodes = tuple(node(i) for i in range(CHUNK))
    (first,) = fold.chunk_tokens(nodes)
    rebuilt = tuple(node(i) for i in range(CHUNK))  # equal values, new objects (a connector reading its API)
    (again,) = fold.chunk_tokens(rebuilt)
    assert again is first and all(a is b for a, b in zip(again.nodes, rebuilt, strict=True))
    changed = (*rebuilt[:-1], node(CHUNK - 1, tasks=1))
    (other,) = fold.chunk_tokens(changed)
    assert other is not first

"""CP-SAT sees only the nodes a better plan could use (``search._exact_slots``).

Without failure domains a node matters to the model only through its CPU, so a plan
on ``k`` nodes maps onto the ``k`` largest; the model keeps those and the incumbent's.
These tests compare with a brute force over heterogeneous pools and with the same
topology on a pool of exactly the nodes the plan needs: never with the code's own output.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planners import TaskGraph
from planners.evaluate import check_plan, node_failure_latency
from planners.placement import Node, NodePool, plan_joint

SLOW = settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _partitions(items: Sequence[int]) -> Iterator[list[list[int]]]:
    if not items:
        yield []
        return
    first, rest = items[0], items[1:]
    for part in _partitions(rest):
        for k in range(len(part)):
            yield [*part[:k], [first, *part[k]], *part[k + 1 :]]
        yield [[first], *part]


def _fits(loads: list[float], sizes: list[float]) -> bool:
    """Whether groups of these loads go on distinct nodes: largest group on the largest
    node, and so on (Hall's condition for nested sets of admissible nodes)."""
    big = sorted(sizes, reverse=True)
    return len(loads) <= len(big) and all(
        w <= c + 1e-9 for w, c in zip(sorted(loads, reverse=True), big, strict=False)
    )


def _brute_force(graph: TaskGraph, sizes: list[float], bound: float) -> tuple[int, int]:
    """(fewest nodes, then fewest backups) over every grouping, node choice and backup set."""
    n = len(graph)
    inner = [u for u in range(n) if graph.succs[u]]
    best = (n + 1, n + 1)
    for part in _partitions(list(range(n))):
        if len(part) > best[0] or not _fits([sum(graph.weight[i] for i in p) for p in part], sizes):
            continue
        for r in range(len(inner) + 1):
            for combo in itertools.combinations(inner, r):
                b = [graph.tasks[u] for u in combo]
                if all(node_failure_latency(graph, b, graph.ids(p)) <= bound + 1e-9 for p in part):
                    best = min(best, (len(part), len(b)))
    return best


@st.composite
def instances(draw: st.DrawFn) -> tuple[TaskGraph, float, list[float]]:
    n = draw(st.integers(2, 5))
    tasks = [f"t-{i}" for i in range(n)]
    edges = {(tasks[u], tasks[v]) for v in range(1, n) for u in draw(
        st.lists(st.integers(0, v - 1), max_size=2, unique=True))}  # fmt: skip
    tenths = st.integers(1, 10)
    graph = TaskGraph.build(
        tasks,
        sorted(edges),
        latency={t: draw(tenths) / 10 for t in tasks},
        weight={t: draw(tenths) / 10 for t in tasks},
    )
    bound = draw(st.sampled_from([max(graph.latency), max(graph.latency) + 0.3, 10.0]))
    sizes = draw(st.lists(st.sampled_from([1.0, 1.5, 2.0, 4.0]), min_size=n, max_size=12))
    return graph, bound, sizes


@SLOW
@given(inst=instances())
def test_joint_exact_on_a_mixed_pool_matches_brute_force(
    inst: tuple[TaskGraph, float, list[float]],
) -> None:
    graph, bound, sizes = inst
    nodes = [Node(f"n{j:02d}", c) for j, c in enumerate(sizes)]
    plan = plan_joint(graph, NodePool.of(nodes), bound=bound, algorithm="exact", time_limit=5)
    assert plan.backups is not None
    capacity = {n.name: n.cpu for n in nodes}
    assert not check_plan(
        graph, bound=bound, backups=list(plan.backups), assignment=plan.assignment,
        capacity=capacity,
    )  # fmt: skip
    assert plan.optimal is True
    assert (plan.nodes_used, len(plan.backups)) == _brute_force(graph, sizes, bound)


def _fleet_chain() -> TaskGraph:
    """The operator bench's fleet topology: ``5 → 20 → 20 → 5`` (shuffle, forward,
    shuffle), 0.5 s reprocessing and 0.1 CPU per task."""
    ops = {"src": 5, "map": 20, "agg": 20, "sink": 5}
    tasks = [f"{o}-{i}" for o, p in ops.items() for i in range(p)]
    edges = [(f"src-{a}", f"map-{b}") for a in range(5) for b in range(20)]
    edges += [(f"map-{i}", f"agg-{i}") for i in range(20)]
    edges += [(f"agg-{a}", f"sink-{b}") for a in range(20) for b in range(5)]
    return TaskGraph.build(
        tasks, edges, latency=dict.fromkeys(tasks, 0.5), weight=dict.fromkeys(tasks, 0.1)
    )


def test_a_large_pool_of_equal_nodes_plans_as_the_nodes_it_needs() -> None:
    """100 empty 8-CPU nodes: the same optimum as a pool of just the nodes used, proven.

    Why: given all 100 nodes, CP-SAT runs out of its budget without a proof."""
    graph = _fleet_chain()
    # one node cannot keep 1.5 s: the chain of four 0.5 s tasks takes 2 s to replay
    big = plan_joint(graph, NodePool.of(Node(f"n{j:03d}", 8.0) for j in range(100)), bound=1.5)
    assert big.backups is not None and big.nodes_used >= 2
    small = plan_joint(
        graph, NodePool.of(Node(f"n{j:03d}", 8.0) for j in range(big.nodes_used)), bound=1.5
    )
    assert small.optimal is True and small.backups is not None
    assert big.optimal is True
    assert (big.nodes_used, len(big.backups)) == (small.nodes_used, len(small.backups))
    assert not check_plan(
        graph, bound=1.5, backups=list(big.backups), assignment=big.assignment,
        capacity={f"n{j:03d}": 8.0 for j in range(100)},
    )  # fmt: skip

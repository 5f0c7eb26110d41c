"""Hypothesis strategies shared by the planner tests (one generator, not a copy per file)."""

from __future__ import annotations

from hypothesis import strategies as st

from planners import TaskGraph


@st.composite
def task_dags(
    draw: st.DrawFn,
    min_tasks: int = 2,
    max_tasks: int = 10,
    latencies: tuple[float, ...] = (0.5, 1.0, 1.5),
) -> TaskGraph:
    """A random task DAG ``t-0 … t-n`` (each task fed by up to two earlier ones).

    Latencies and CPU weights come from small fixed sets, so that ties (equal
    latencies, equal weights) are common: they are where planners diverge.
    A finer set of ``latencies`` makes sums near a bound common instead.
    """
    n = draw(st.integers(min_tasks, max_tasks))
    tasks = [f"t-{i}" for i in range(n)]
    edges = [
        (tasks[u], tasks[v])
        for v in range(1, n)
        for u in draw(st.sets(st.integers(0, v - 1), max_size=2))
    ]
    return TaskGraph.build(
        tasks,
        edges,
        latency={t: draw(st.sampled_from(latencies)) for t in tasks},
        weight={t: draw(st.sampled_from([0.25, 0.5, 1.0])) for t in tasks},
    )

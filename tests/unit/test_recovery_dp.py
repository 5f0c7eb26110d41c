"""The seed's DP (Algorithm 4) finishes exactly on the seed's own instances, and says when not.

Asserted facts: on the 18-query instances of the seed's Section 7.3 (the
recovery bench's generator, one resource pool) the DP proves its plan within
its default budget at every resource level, with the optimum CP-SAT proves; on
small instances it equals a brute force over every set of failed queries;
with a budget too small to finish it says ``optimal=False`` and gives no bound;
``auto`` only calls a plan optimal when it has the independent optimum.
"""

from __future__ import annotations

import importlib.util
import itertools
import math
import random
import sys
from pathlib import Path
from types import ModuleType

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planners.graph import TaskGraph
from planners.recovery import (
    check_recovery,
    failed_queries,
    recover_auto,
    recover_dp,
    recover_exact,
)

ROOT = Path(__file__).resolve().parents[2]


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "bench_recovery_seed", ROOT / "bench" / "bench_recovery_seed.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


BENCH = _bench()


def _instances(per_setting: int) -> list[tuple[TaskGraph, list[str], dict[str, float]]]:
    """The bench's topologies (every partition failed) at every resource level."""
    out = []
    for _, label, max_share, skew, prio in BENCH.SETTINGS:
        rng = random.Random(f"0:{label}")
        for _ in range(per_setting):
            g = BENCH.seed_topology(rng, 18, max_share, skew, prio)
            need = sum(g.weight)
            for level in BENCH.LEVELS:
                out.append((g, list(g.tasks), {"pool": need * level / 100}))
    return out


def test_dp_proves_the_optimum_on_the_seeds_18_query_instances() -> None:
    for g, failed, pool in _instances(1):
        assert len(failed_queries(g, failed)) == 18
        dp = recover_dp(g, failed, pool)  # the default budget
        ex = recover_exact(g, failed, pool, time_limit=30.0)
        assert ex.optimal
        assert check_recovery(g, failed, pool, dp) == []
        assert dp.optimal, (pool, dp.recovered_priority, ex.recovered_priority)
        assert math.isclose(dp.recovered_priority, ex.recovered_priority)
        assert dp.upper_bound is not None
        assert math.isclose(dp.upper_bound, ex.recovered_priority)


def test_a_budget_too_small_leaves_the_plan_unproven() -> None:
    g, failed, pool = _instances(1)[3]  # 70 % of the need
    dp = recover_dp(g, failed, pool, time_limit=1e-6)
    assert check_recovery(g, failed, pool, dp) == []
    assert dp.optimal is False and dp.upper_bound is None


def test_auto_calls_a_plan_optimal_only_at_the_optimum() -> None:
    for g, failed, pool in _instances(1)[:10]:
        ex = recover_exact(g, failed, pool, time_limit=30.0)
        for limit in (1e-6, 1e-3, 5.0):
            auto = recover_auto(g, failed, pool, time_limit=limit)
            assert check_recovery(g, failed, pool, auto) == []
            if auto.optimal:
                assert math.isclose(auto.recovered_priority, ex.recovered_priority)
            assert auto.upper_bound is None or auto.upper_bound >= ex.recovered_priority - 1e-9


def _brute_force(g: TaskGraph, failed: list[str], total: float) -> float:
    """The best summed priority of any set of failed queries whose tasks fit in ``total``."""
    fq = failed_queries(g, failed)
    names = sorted(fq)
    best = 0.0
    for r in range(len(names) + 1):
        for chosen in itertools.combinations(names, r):
            tasks = set().union(*(fq[q] for q in chosen)) if chosen else set()
            if sum(g.weight[g.index(t)] for t in tasks) <= total + 1e-9:
                done = [q for q in names if fq[q] <= tasks]
                best = max(best, sum(g.priority[g.index(q)] for q in done))
    return best


@st.composite
def shared(draw: st.DrawFn) -> tuple[TaskGraph, list[str], float]:
    """Up to 4 sources shared by up to 7 queries, all failed, and one pool."""
    srcs = [f"s-{i}" for i in range(draw(st.integers(1, 4)))]
    outs = [f"q-{i}" for i in range(draw(st.integers(1, 7)))]
    edges = [
        (s, q)
        for q in outs
        for s in draw(st.sets(st.sampled_from(srcs), min_size=1, max_size=min(3, len(srcs))))
    ]
    tasks = srcs + outs
    g = TaskGraph.build(
        tasks,
        edges,
        latency=dict.fromkeys(tasks, 1.0),
        weight={t: draw(st.sampled_from([0.5, 1.0, 1.5, 2.0, 3.0])) for t in tasks},
        outputs=outs,
        priority={q: float(draw(st.integers(1, 10))) for q in outs},
    )
    return g, tasks, draw(st.sampled_from([0.5, 2.0, 4.0, 7.0, 12.0]))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(shared())
def test_dp_equals_a_brute_force_on_one_pool(case: tuple[TaskGraph, list[str], float]) -> None:
    g, failed, total = case
    dp = recover_dp(g, failed, {"pool": total})
    assert check_recovery(g, failed, {"pool": total}, dp) == []
    assert dp.optimal
    assert math.isclose(dp.recovered_priority, _brute_force(g, failed, total))

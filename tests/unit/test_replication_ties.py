"""Which tasks get a replica when importance ranks nothing: the word count's chain.

The word count (``source`` 2 → ``tokenize`` 2 → ``count`` 2 → ``sink`` 1, 200m each) has
one query, so every task's QOD is 1, and equal weights, so every LU (``1 - w / max w``)
is 0: under the default ``qod-lu`` every task is worth 0. The knapsack then chose nothing
by value and the leftover fill went by task id, sources first: with room off the
primaries' node for 5 replicas of 7, ``count-1`` and ``sink-0`` went without, the sink
whose loss stops the output at once. Ties now go to the tasks nearer an output.
"""

from __future__ import annotations

import pytest

from backstop.domain.planning import plan_replicas
from backstop.domain.spec import expand, parse_spec
from planners.placement import Node
from planners.replication import check_replication, select_replicas

OP = {"resources": {"cpu": "200m"}, "reprocessingLatency": 0.5}
SPEC = parse_spec(
    {
        "image": "i",
        "recoveryLatencyBound": 38.0,
        "replication": {"spareCpu": "4"},
        "operators": [
            {"name": "source", "parallelism": 2, **OP},
            {"name": "tokenize", "parallelism": 2, "inputs": [{"operator": "source"}], **OP},
            {"name": "count", "parallelism": 2,
             "inputs": [{"operator": "tokenize", "grouping": "key"}], **OP},
            {"name": "sink", "parallelism": 1,
             "inputs": [{"operator": "count", "grouping": "global"}], **OP},
        ],
    }
)  # fmt: skip
GRAPH = expand(SPEC)
ON_A = dict.fromkeys(GRAPH.tasks, "a")  # the real-node runs: every primary on one node


def test_with_ample_spare_every_task_the_sink_included_gets_a_replica_off_its_node() -> None:
    """Three nodes of 2 CPU under the 0.8 cap (1.6 each): 1.4 CPU of primaries on ``a``
    leave 1.6 + 1.6 elsewhere, room for all 7 replicas."""
    nodes = [Node(n, 1.6) for n in "abc"]
    replicas, _ = plan_replicas(SPEC, GRAPH, ON_A, nodes)
    assert replicas is not None and set(replicas) == set(GRAPH.tasks)
    assert all(len(ns) == 1 and ns[0] != "a" for ns in replicas.values()), replicas


@pytest.mark.parametrize("selection", ["knapsack", "sort-fill", "best"])
def test_with_room_for_five_the_replicas_go_to_the_tasks_nearest_the_output(
    selection: str,
) -> None:
    """Room for 5 replicas off ``a`` (0.4 on ``b``, 0.6 on ``c``): the sink, both counts
    and both tokenizers get them, the sources (re-read from their input) do not."""
    spare = {"a": 0.6, "b": 0.4, "c": 0.6}
    plan = select_replicas(GRAPH, ON_A, spare, budget=4.0, selection=selection)
    assert check_replication(GRAPH, ON_A, spare, plan, budget=4.0) == []
    assert set(plan.replicas) == {"sink-0", "count-0", "count-1", "tokenize-0", "tokenize-1"}

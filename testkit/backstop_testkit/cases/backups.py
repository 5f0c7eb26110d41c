"""The FTC seed's minimum-backup cases (its Table III), rebuilt at the benchmark's bounds.

Lines, a tree, SignalGuru and Twitter Sentiment (560 and 1,050 edges), each with uniform
and non-uniform reprocessing latencies (:mod:`backstop_testkit.cases.topologies`).
``bench/bench_backups.py`` prints the table on them, the backup tests assert the seed's
gap to the optimum on the same cases.
"""

from __future__ import annotations

from collections.abc import Callable

from backstop_testkit.cases.topologies import lines, signalguru, tree, twitter_sentiment
from planners.graph import TaskGraph

__all__ = ["cases"]


def cases() -> list[tuple[str, Callable[[bool], TaskGraph], tuple[float, ...], tuple[float, ...]]]:
    """(name, builder(uniform), uniform bounds, non-uniform bounds)."""
    return [
        ("Line", lambda u: lines(4, 8, uniform=u, seed=1), (2, 3, 5), (10, 15, 25)),
        ("Tree", lambda u: tree(5, 2, uniform=u, seed=2), (2, 3, 5), (10, 15, 25)),
        ("Guru", lambda u: signalguru(uniform=u, seed=3), (2, 3, 5), (10, 15, 25)),
        ("Senti-560", lambda u: twitter_sentiment(50, 20, 20, uniform=u, seed=4), (2, 3, 5),
         (10, 15, 25)),
        ("Senti-1050", lambda u: twitter_sentiment(30, 30, 30, uniform=u, seed=5), (2, 3, 5),
         (10, 15, 25)),
    ]  # fmt: skip

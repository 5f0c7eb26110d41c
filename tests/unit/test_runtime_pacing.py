"""Paced sources (``config.maxRecordsPerSecond``) cut their rounds on one shared clock.

A downstream round waits for every source's batch of that round. Two sources paced from
their own starts stay apart by whatever separated their starts, and a source restarted
after a node loss comes back out of phase: its consumers then lag by up to a whole period
more than before, for the rest of the run. On the shared clock
(:func:`backstop_runtime.task.until_paced`) both cut at the same moments.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from backstop_runtime.task import until_paced


def cuts(start: float, period: float, rounds: int, work: float = 0.01) -> list[float]:
    """When a paced source that starts at ``start`` cuts each of ``rounds`` full rounds
    (each taking ``work`` seconds before its wait)."""
    out, now = [], start
    for _ in range(rounds):
        out.append(now)
        now += work
        now += until_paced(period, now)
    return out


@given(st.floats(0.0, 1000.0), st.floats(0.0, 5.0), st.floats(0.2, 2.0))
def test_two_sources_started_apart_cut_together_after_their_first_round(
    start: float, apart: float, period: float
) -> None:
    """Every cut after a source's first is on the shared grid (a multiple of the period),
    so two sources cut their common rounds at the same moments whenever they started."""
    for first in (start, start + apart):
        for t in cuts(first, period, 6)[1:]:
            off = t % period
            assert min(off, period - off) == pytest.approx(0.0, abs=1e-6), (t, period)


@given(st.floats(0.0, 1000.0), st.floats(0.2, 2.0), st.floats(0.0, 0.15))
def test_the_rate_holds_one_full_round_per_period_at_most(
    start: float, period: float, work: float
) -> None:
    times = cuts(start, period, 8, work)
    for x, y in itertools.pairwise(times[1:]):
        assert y - x == pytest.approx(period, abs=1e-6)

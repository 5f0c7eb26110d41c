"""Scheduled full collections: frozen objects are skipped, and their garbage still goes."""

from __future__ import annotations

import gc
import weakref

from backstop.controller import gckeeper


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_garbage_of_frozen_objects_goes_at_the_next_round() -> None:
    try:
        kept = Node()  # alive: survives and is frozen
        dropped = cycle()  # already garbage: collected by the round itself
        gckeeper.collect_and_freeze()
        assert dropped() is None
        assert gc.get_freeze_count() > 0
        kept.other = kept  # a cycle among frozen objects, then dropped
        ref = weakref.ref(kept)
        del kept
        gc.collect()  # an ordinary full collection skips the frozen generation
        assert ref() is not None
        gckeeper.collect_and_freeze()  # the next scheduled round unfreezes first
        assert ref() is None
    finally:
        gc.unfreeze()


def test_the_keeper_runs_at_once_and_stops() -> None:
    try:
        gc.unfreeze()
        stop = gckeeper.start(period=60.0)
        for _ in range(200):
            if gc.get_freeze_count() > 0:
                break
            stop.wait(0.01)
        assert gc.get_freeze_count() > 0
        stop.set()
    finally:
        gc.unfreeze()

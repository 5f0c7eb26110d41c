"""The groupings: how an operator's input is partitioned across its tasks.

Named as Storm and Flink users expect: ``key`` (alias ``fields``) hashes the record key,
``rebalance`` spreads evenly not by key. ``shuffle`` means the key hash in this API version,
as the topologies stored with it use it (another meaning would send a running topology's
keys away from the tasks that hold their state), and is answered with a Warning naming the
field.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from enum import StrEnum


class Grouping(StrEnum):
    """How an operator's input is partitioned across its tasks (docs/streamtopology.md,
    "Groupings").

    ``key`` (Storm's fields grouping, Flink's ``keyBy``; alias ``fields``) sends each record
    to the task its key hashes to; ``rebalance`` (Flink's name) spreads records evenly, not by
    key, round-robin in an order fixed by the producer task and the record's place in its
    output, so a replay routes every record as the original did. ``shuffle`` is the key
    hash in this API version, accepted with a Warning (:func:`grouping_warnings`).
    """

    forward = "forward"
    key = "key"
    fields = "fields"
    shuffle = "shuffle"
    rebalance = "rebalance"
    broadcast = "broadcast"
    global_ = "global"

    @property
    def wire(self) -> str:
        """The grouping's name in a task's ``BACKSTOP_DOWNSTREAM``: ``shuffle`` for every
        name of the key hash, the name every version of the task runtime reads as the
        hash, so a task image of any version routes by key and a rename changes no pod spec."""
        return "shuffle" if self in KEY_GROUPINGS else self.value


KEY_GROUPINGS = frozenset({Grouping.key, Grouping.fields, Grouping.shuffle})
"""The names of the hash of the record key."""


def grouping_warnings(inputs: Iterable[Sequence[Grouping]]) -> list[str]:
    """One Warning per input named ``shuffle``, naming the field (``inputs``: the groupings
    of each operator's inputs, in order): it hashes by key, as it always has here, but
    Storm and Flink users read ``shuffle`` as an even spread.

    >>> grouping_warnings([[], [Grouping.key, Grouping.shuffle]])  # doctest: +ELLIPSIS
    ['spec.operators[1].inputs[1].grouping: shuffle hashes by the record key ...']
    """
    return [
        f"spec.operators[{i}].inputs[{j}].grouping: shuffle hashes by the record key (the key "
        "grouping); write key (or fields) to keep that, or rebalance for an even spread not "
        "by key: a later API version reads shuffle as rebalance"
        for i, groupings in enumerate(inputs)
        for j, grouping in enumerate(groupings)
        if grouping is Grouping.shuffle
    ]

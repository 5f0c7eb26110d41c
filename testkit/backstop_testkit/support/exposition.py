"""Prometheus' text exposition format read back into samples, for tests that check what a
``/metrics`` endpoint serves (its names, its labels, its values) rather than its text.

Only what the project's endpoints write is read: ``# HELP``/``# TYPE`` comments, and
sample lines ``name{label="value",...} number`` without timestamps.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
_LABEL = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"\s*,?')


@dataclass(frozen=True)
class Sample:
    """One sample line: the series' name, its labels and its value."""

    name: str
    labels: dict[str, str]
    value: float


def parse(text: str) -> list[Sample]:
    """The samples of ``text``, in order; comments and blank lines are skipped.

    >>> parse('# TYPE a counter\\na{task="s-0",x="1"} 2.0\\nb NaN\\n')  # doctest: +ELLIPSIS
    [Sample(name='a', labels={'task': 's-0', 'x': '1'}, value=2.0), Sample(name='b', ...)]
    >>> parse("a{task=oops} 1")
    Traceback (most recent call last):
    ValueError: not a sample line: 'a{task=oops} 1'
    """
    out = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        body = m.group(2) or "" if m else ""
        if not m or _LABEL.sub("", body).strip():
            raise ValueError(f"not a sample line: {line!r}")
        labels = dict(_LABEL.findall(body))
        out.append(Sample(m.group(1), labels, float(m.group(3))))
    return out


def values(text: str) -> dict[str, float]:
    """``{name: value}`` of an endpoint that writes each name once (a task's /metrics).

    >>> import math
    >>> values('a{task="s-0"} 2.0\\nb NaN\\n')["a"], math.isnan(values("b NaN")["b"])
    (2.0, True)
    """
    samples = parse(text)
    names = [s.name for s in samples]
    if len(names) != len(set(names)):
        raise ValueError("a name written more than once")
    return {s.name: s.value for s in samples}


__all__ = ["Sample", "parse", "values"]

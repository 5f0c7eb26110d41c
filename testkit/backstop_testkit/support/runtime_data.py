"""Input and expectations for the runtime tests, computed without the runtime's code."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from backstop.domain.spec import StreamTopologySpec
from backstop_runtime.blobs import open_blobs
from backstop_runtime.output import committed, read_lines

ROOT = Path(__file__).resolve().parents[3]
WORDCOUNT = ROOT / "examples" / "wordcount.yaml"
VOCAB = ["Alpha", "beta", "GAMMA", "délta", "x1y", "foo_bar", "it's", "naïve", "a-b", "42"]


def write_input(folder: Path, files: int, per_file: int, seed: int = 7) -> None:
    """JSONL segments ``{"id", "ts", "text"}`` with event time increasing within a file."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        ts = rng.random()
        with (folder / f"part-{f:02d}.jsonl").open("w") as out:
            for i in range(per_file):
                ts += rng.random() * 0.1
                text = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(0, 7)))
                out.write(json.dumps({"id": f"{f}-{i}", "ts": ts, "text": text}) + "\n")


def expected_counts(folder: Path, window: int = 10) -> Counter[tuple[int, str]]:
    """(window start, word) → count, splitting on every character that is not a letter."""
    counts: Counter[tuple[int, str]] = Counter()
    for path in sorted(folder.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            start = int(doc["ts"] // window) * window
            word = ""
            for ch in doc["text"].lower() + " ":
                if ch.isalpha():
                    word += ch
                elif word:
                    counts[(start, word)] += 1
                    word = ""
    return counts


def output_lines(location: str | Path, env: Mapping[str, str] | None = None) -> list[str]:
    """A sink's committed output lines at ``location`` (its ``config.path``), sorted: every
    test reads the sink's output through this (:func:`backstop_runtime.output.read_lines`)."""
    return sorted(read_lines(location, env=env))


def output_objects(
    location: str | Path, env: Mapping[str, str] | None = None
) -> list[tuple[str, int]]:
    """(task, round) of the output objects a sink committed at ``location``, in order."""
    return committed(open_blobs(location, env))


def counts_of(lines: list[str]) -> dict[tuple[int, str], int]:
    docs = [json.loads(line) for line in lines]
    return {(d["window"], d["word"]): d["count"] for d in docs}


def wordcount_spec(
    inp: str | Path,
    out: str | Path,
    *,
    rate: float,
    batch: int,
    parallelism: int | None = None,
    **source: Any,
) -> StreamTopologySpec:
    """``examples/wordcount.yaml`` on local folders or ``s3://`` locations, with a bounded
    (unless ``source`` says otherwise), rate-limited source."""
    spec = yaml.safe_load(WORDCOUNT.read_text())["spec"]
    spec.pop("store")
    for op in spec["operators"]:
        if parallelism is not None and op["name"] != "sink":
            op["parallelism"] = parallelism
        if op["name"] == "source":
            op["config"].update(
                {
                    "path": str(inp),
                    "bounded": True,
                    "maxRecordsPerSecond": rate,
                    "maxRecordsPerBatch": batch,
                    **source,  # may override the above (bounded=False: an endless stream)
                }
            )
        if op["name"] == "sink":
            op["config"]["path"] = str(out)
    return StreamTopologySpec.model_validate(spec)

"""Input and expectations for the runtime tests, computed without the runtime's code."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections import Counter
from collections.abc import Mapping, Sequence
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
    write_segments(folder, [per_file] * files, seed)


def write_segments(folder: Path, sizes: Sequence[int], seed: int = 7) -> float:
    """One JSONL segment ``part-NN.jsonl`` of ``sizes[NN]`` records ``{"id", "ts", "text"}``
    each, event time increasing within a file; the largest event time written."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    newest = 0.0
    for f, size in enumerate(sizes):
        ts = rng.random()
        with (folder / f"part-{f:02d}.jsonl").open("w") as out:
            for i in range(size):
                ts += rng.random() * 0.1
                text = " ".join(rng.choice(VOCAB) for _ in range(rng.randint(0, 7)))
                out.write(json.dumps({"id": f"{f}-{i}", "ts": ts, "text": text}) + "\n")
        if size:  # ts starts at a draw even for a file left empty
            newest = max(newest, ts)
    return newest


def expected_counts(folder: Path, window: int = 10) -> Counter[tuple[int, str]]:
    """(window start, word) → count, splitting on every character that is not a letter."""
    counts: Counter[tuple[int, str]] = Counter()
    for path in sorted(folder.glob("*.jsonl")):
        with path.open() as lines:  # line by line: an input may be larger than memory
            for line in lines:
                _count_words(json.loads(line), window, counts)
    return counts


def _count_words(doc: dict[str, Any], window: int, counts: Counter[tuple[int, str]]) -> None:
    start = int(doc["ts"] // window) * window
    word = ""
    for ch in doc["text"].lower() + " ":
        if ch.isalpha():
            word += ch
        elif word:
            counts[(start, word)] += 1
            word = ""


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


def local_manifest(example: Path, inp: Path, out: Path, name: str = "wordcount") -> dict[str, Any]:
    """``example`` (a StreamTopology manifest) run on local directories: every source (an
    operator without inputs) reads the bounded input ``inp`` in byte ranges, every sink (an
    operator nobody reads) writes under ``out/<its name>``; no object store, since the
    local run (``backstop run``) keeps its state in a directory."""
    doc: dict[str, Any] = yaml.safe_load(example.read_text())
    doc["metadata"] = {"name": name}
    spec = doc["spec"]
    spec.pop("store", None)
    ops = spec["operators"]
    read = {i["operator"] for op in ops for i in op.get("inputs", [])}
    for op in ops:
        config = op.setdefault("config", {})
        if not op.get("inputs"):
            config.update(path=str(inp), bounded=True, splits="ranges")
        if op["name"] not in read:
            config["path"] = str(out / op["name"])
    return doc


def bucket_manifest(
    example: Path, name: str, bucket: str, store: tuple[str, str], selector: Mapping[str, str]
) -> dict[str, Any]:
    """``example`` (a StreamTopology manifest) as ``name`` with everything in the S3 bucket
    ``bucket``: the tasks' state (``spec.store``; ``store``: its key prefix and the Secret
    with the endpoint and credentials) and each operator's ``config.path`` (input, output)
    under ``<name>/``; on the nodes ``selector`` picks, with a 2 s grace period."""
    doc: dict[str, Any] = yaml.safe_load(example.read_text())
    doc["metadata"] = {"name": name}
    spec = doc["spec"]
    prefix, secret = store
    spec["store"] = {
        "objectStore": {
            "bucket": bucket,
            "prefix": prefix,
            "secretRef": {"name": secret},  # the endpoint too, under its key "endpoint"
        }
    }
    spec["nodeSelector"] = dict(selector)
    spec.setdefault("recovery", {})["gracePeriodSeconds"] = 2
    for op in spec["operators"]:
        cfg = op.get("config") or {}
        if "path" in cfg:
            leaf = str(cfg["path"]).rstrip("/").rpartition("/")[2]  # input, output, trending
            cfg["path"] = f"s3://{bucket}/{name}/{leaf}"
    return doc


def follow_tweets(
    location: str, s3: Mapping[str, str], rate: float, seconds: float, errors: Path
) -> subprocess.Popen[bytes]:
    """A tweet log appended at ``location`` as the examples' input: one new segment per
    partition each second, ``rate`` tweets a second in all, for ``seconds``
    (``python -m backstop_runtime.examples.tweets ... --follow``; ``s3``: the store's
    settings; its errors appended to ``errors``). The caller stops it."""
    with errors.open("ab") as err:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "backstop_runtime.examples.tweets",
                location,
                "--follow",
                "--rate",
                str(rate),
                "--seconds",
                str(seconds),
            ],
            env={**os.environ, **s3, "PYTHONPATH": str(ROOT / "runtime")},
            stdout=subprocess.DEVNULL,
            stderr=err,
        )


def sink_paths(doc: dict[str, Any]) -> list[Path]:
    """Where the sinks of a :func:`local_manifest` write."""
    ops = doc["spec"]["operators"]
    read = {i["operator"] for op in ops for i in op.get("inputs", [])}
    return [Path(op["config"]["path"]) for op in ops if op["name"] not in read]

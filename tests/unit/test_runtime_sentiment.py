"""The twitter-sentiment example on the runtime: a real scorer, two queries, failures.

The topology of ``examples/twitter-sentiment.yaml`` runs as processes on a tweet log made
by its generator command. The hot topics per window are checked against counts computed
here from the log; both queries' outputs must not change when tasks of every operator are
SIGKILLed mid-stream.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import yaml

from backstop.domain.spec import StreamTopologySpec
from backstop_testkit.support.runtime_data import output_lines
from backstop_testkit.support.runtime_harness import ROOT, LocalTopology

pytestmark = pytest.mark.timeout(240)
EXAMPLE = ROOT / "examples" / "twitter-sentiment.yaml"


@pytest.fixture(scope="module")
def tweets(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("tweets")
    cmd = [sys.executable, "-m", "backstop_runtime.examples.tweets", str(out)]
    subprocess.run(
        [*cmd, "--seconds", "50", "--rate", "200", "--seed", "4"],
        check=True,
        env={"PYTHONPATH": str(ROOT / "runtime")},
    )
    return out


def run(base: Path, tweets: Path, kills: list[list[str]]) -> dict[str, list[str]]:
    spec = yaml.safe_load(EXAMPLE.read_text())["spec"]
    spec.pop("store")
    for op in spec["operators"]:
        config = op["config"]
        if op["name"] == "source":
            config.update(
                path=str(tweets), bounded=True, maxRecordsPerSecond=1500, maxRecordsPerBatch=30
            )
        elif "path" in config:
            config["path"] = str(base / op["name"])
    topo = LocalTopology("tw", StreamTopologySpec.model_validate(spec), base / "store")
    topo.start_all()
    try:
        for group in kills:
            done: int = topo.status("sink-0").get("round", 0)

            def under_way(d: int = done) -> bool:
                progress: int = topo.status("sink-0").get("round", 0)
                return progress >= d + 25

            topo.wait("the stream to be under way", under_way)
            assert not topo.status("sink-0").get("eos")
            for t in group:
                topo.kill(t)
            for t in group:
                topo.start(t)
        topo.wait(
            "the end of both queries",
            lambda: all(topo.status(t).get("eos") is True for t in ("sink-0", "trending-0")),
        )
        assert topo.crashed() == {}
    finally:
        topo.stop_all()
    return {q: output_lines(base / q) for q in ("sink", "trending")}


@pytest.fixture(scope="module")
def reference(tweets: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[str]]:
    return run(tmp_path_factory.mktemp("reference"), tweets, [])


def test_hot_topics_match_the_log(reference: dict[str, list[str]], tweets: Path) -> None:
    counts: defaultdict[int, Counter[str]] = defaultdict(Counter)
    for path in sorted(tweets.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            doc = json.loads(line)
            counts[int(doc["ts"] // 10) * 10].update(set(re.findall(r"#(\w+)", doc["text"])))
    expected = {
        w: [t for t, _ in sorted(c.items(), key=lambda kv: (-kv[1], kv[0]))[:3]]
        for w, c in counts.items()
    }
    got = {d["window"]: d["top"] for d in map(json.loads, reference["trending"])}
    assert got == expected
    scored = [json.loads(x) for x in reference["sink"]]
    assert scored and all(-1 <= d["sentiment"] <= 1 and d["tweets"] > 0 for d in scored)
    assert {d["topic"] for d in scored} <= {t for top in expected.values() for t in top}


def test_failures_of_every_operator_change_no_output(
    reference: dict[str, list[str]], tweets: Path, tmp_path: Path
) -> None:
    kills = [["filter-1", "sentiment-0", "merge-0"], ["hot-topics-2", "sink-0", "source-1"]]
    got = run(tmp_path, tweets, kills)
    assert got == reference
    assert all(len(lines) == len(set(lines)) for lines in got.values())

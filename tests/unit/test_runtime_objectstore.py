"""The word count as OS processes with its input segments and its output in a bucket
(SeaweedFS through the S3 API): nothing of the data passes through a host directory.

The expected counts are computed here from the local copies of the input
(``runtime_data.expected_counts``), not with the runtime's code.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from backstop_runtime.sources import owner
from backstop_testkit.support.runtime_data import (
    counts_of,
    expected_counts,
    output_lines,
    output_objects,
    wordcount_spec,
    write_input,
)
from backstop_testkit.support.runtime_harness import LocalTopology

pytestmark = pytest.mark.timeout(240)


def put(location: str, env: dict[str, str], *files: Path) -> None:
    """Upload ``files`` as segments with the input command."""
    cmd = [sys.executable, "-m", "backstop_runtime.input", "put", location, *map(str, files)]
    subprocess.run(cmd, env={**os.environ, **env}, check=True, capture_output=True)


def test_word_count_with_input_and_output_in_a_bucket(
    tmp_path: Path, object_store_env: dict[str, str]
) -> None:
    """Three segments at the start; a fourth, whose name sorts between two of them,
    appears while the stream runs; the sink is SIGKILLed and restarted once. Every word
    is counted once, the output is what the input gives, and the sink's objects are
    one per checkpoint round."""
    env = object_store_env
    base = f"s3://{env['BACKSTOP_S3_BUCKET']}/wc-{uuid.uuid4().hex[:8]}"
    inp, out = f"{base}/input", f"{base}/output"
    assert {owner(f"part-{k:02d}.jsonl", 2) for k in (0, 2, 3)} == {0, 1}
    local = tmp_path / "input"
    write_input(local, files=4, per_file=1500)
    docs = [json.loads(x) for k in (0, 2, 3) for x in (local / f"part-{k:02d}.jsonl").open()]
    end = max(d["ts"] for d in docs)  # the late segment continues the others' event time
    late = local / "part-01.jsonl"
    shifted = [json.loads(x) for x in late.open()]
    late.write_text("".join(json.dumps({**d, "ts": d["ts"] + end}) + "\n" for d in shifted))
    put(inp, env, *(local / f"part-{k:02d}.jsonl" for k in (0, 2, 3)))
    spec = wordcount_spec(inp, out, rate=1000.0, batch=20)
    topo = LocalTopology("wordcount", spec, tmp_path / "store", env=env)
    topo.start_all()
    try:
        topo.wait("the stream to be under way", lambda: topo.status("sink-0").get("round", 0) >= 3)
        assert not any(topo.status(f"source-{i}").get("eos") for i in (0, 1)), "too late"
        put(inp, env, late)
        topo.wait("output committed", lambda: bool(output_objects(out, env)))
        topo.kill("sink-0")
        topo.start("sink-0")
        topo.wait("the end of the stream", lambda: topo.status("sink-0").get("eos") is True)
        assert topo.crashed() == {}
    finally:
        topo.stop_all()
    assert topo.status("sink-0")["epoch"] == 2
    lines = output_lines(out, env)
    expected = expected_counts(local)
    assert sum(expected[k] for k in expected if k[0] >= end // 10 * 10 + 10) > 0
    assert len(lines) == len(set(lines)) == len(expected)
    assert counts_of(lines) == dict(expected)
    rounds = [r for task, r in output_objects(out, env) if task == "sink-0"]
    assert rounds == sorted(set(rounds)) and len(rounds) >= 2

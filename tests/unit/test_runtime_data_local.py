"""The test kit's local word count: the manifest ``backstop run`` is given by the benches,
and the uneven input segments they read.

The manifest is built from ``examples/wordcount.yaml`` whatever its operators: it must stay
a valid StreamTopology (as ``backstop run`` loads it) whose sources read the given bounded
directory in byte ranges and whose sink writes under the given one.
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from backstop.cli._output import load_manifest
from backstop.domain.spec import expand
from backstop_testkit.support.runtime_data import (
    WORDCOUNT,
    local_manifest,
    sink_paths,
    write_segments,
)


def test_the_local_manifest_is_a_valid_topology_on_the_given_directories(
    tmp_path: Path,
) -> None:
    inp, out = tmp_path / "in", tmp_path / "out"
    path = tmp_path / "wc.yaml"
    path.write_text(yaml.safe_dump(local_manifest(WORDCOUNT, inp, out, name="wc")))

    topo = load_manifest(path)

    assert topo.metadata.name == "wc" and topo.spec.store.object_store is None
    graph = expand(topo.spec)
    roots = [t for i, t in enumerate(graph.tasks) if not graph.preds[i]]
    leaves = [t for i, t in enumerate(graph.tasks) if not graph.succs[i]]
    assert roots and leaves
    by_name = {op.name: op for op in topo.spec.operators}
    for task in roots:
        config = by_name[task.rsplit("-", 1)[0]].config
        assert config["path"] == str(inp) and config["bounded"] is True
        assert config["splits"] == "ranges"
    (sink,) = {t.rsplit("-", 1)[0] for t in leaves}
    assert by_name[sink].config["path"] == str(out / sink)
    assert sink_paths(yaml.safe_load(path.read_text())) == [out / sink]


def test_segments_have_the_sizes_asked_and_report_the_newest_event_time(
    tmp_path: Path,
) -> None:
    newest = write_segments(tmp_path / "in", [4, 2, 0])

    files = sorted((tmp_path / "in").glob("*.jsonl"))
    docs = [[json.loads(x) for x in f.read_text().splitlines()] for f in files]
    assert [len(d) for d in docs] == [4, 2, 0]
    assert newest == max(d["ts"] for f in docs for d in f)
    for f in docs:
        assert [d["ts"] for d in f] == sorted(d["ts"] for d in f)

"""Nodes started side by side on an empty cache build the kubelet once and all come up.

``hack/real-node.sh up`` builds what is missing from the cache; several nodes start at once in
``make demo`` and the benchmarks. The build step runs here with a stand-in Go toolchain (it
sleeps, so the builds overlap, then writes its ``-o`` file and counts itself), the real ``gcc``
for the pause image and the real image packer.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "hack" / "real-node.sh"

STAND_IN_GO = textwrap.dedent(
    """\
    #!/bin/sh
    # a stand-in `go build ... -o OUT ./cmd/X`: slow enough that two builds overlap
    echo "$*" >> "$GO_CALLS"
    out=""
    while [ $# -gt 0 ]; do
      if [ "$1" = "-o" ]; then out=$2; shift; fi
      shift
    done
    sleep 1
    printf '#!/bin/sh\\necho built\\n' > "$out"
    chmod +x "$out"
    """
)


@pytest.fixture
def empty_cache(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    cache = tmp_path / "cache"
    k8s = cache / "k8s"
    for cmd in ("kubelet", "kube-proxy"):
        (k8s / "gopath/src/k8s.io/kubernetes/cmd" / cmd).mkdir(parents=True)
    pause = k8s / "k8s-src/build/pause/linux"
    pause.mkdir(parents=True)
    (pause / "pause.c").write_text("int main(void) { return 0; }\n")
    goroot = tmp_path / "goroot"
    (goroot / "bin").mkdir(parents=True)
    go = goroot / "bin" / "go"
    go.write_text(STAND_IN_GO)
    go.chmod(0o755)
    env = {
        **os.environ,
        "BACKSTOP_CACHE": str(cache),
        "K8S_RUN_DIR": str(tmp_path / "run"),
        "REAL_NODE_GOROOT": str(goroot),
        "REAL_NODE_BUSYBOX": shutil.which("sh") or "/bin/sh",
        "GO_CALLS": str(tmp_path / "go-calls"),
    }
    return cache, env


Cache = tuple[Path, dict[str, str]]


def test_three_nodes_build_on_an_empty_cache_at_once(empty_cache: Cache) -> None:
    cache, env = empty_cache
    procs = [
        subprocess.Popen(
            ["bash", str(SCRIPT), "builds"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=120)[0] for p in procs]
    for p, out in zip(procs, outputs, strict=True):
        assert p.returncode == 0, out
    bin_dir = cache / "k8s" / "bin"
    assert sorted(f.name for f in bin_dir.iterdir()) == ["kube-proxy", "kubelet"]
    calls = Path(env["GO_CALLS"]).read_text().splitlines()
    assert len([c for c in calls if c.endswith("./cmd/kubelet")]) == 1, calls
    assert len([c for c in calls if c.endswith("./cmd/kube-proxy")]) == 1, calls
    assert (cache / "images/pause/pause.tar").stat().st_size > 0
    assert (cache / "images/busybox/busybox.tar").stat().st_size > 0
    assert not list(cache.rglob("*.tmp*"))

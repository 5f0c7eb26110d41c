"""Real nodes of the local cluster: kubelet + containerd on this host (``hack/real-node.sh``).

Why a shell script behind a Python facade: starting a real node means root-only plumbing
(mount namespaces, containerd, CNI bridges, iptables) that is clearer as the few shell
commands it is. ``python -m backstop_testkit nodes kill|revive|add`` must still work the
same on real and simulated nodes, so this module finds the script a cluster was started
with and runs it.

The script installs itself (and its settings) next to the cluster's kubeconfig when the
first real node starts, so the kubeconfig path alone tells where a cluster's real nodes
live; before that, a local cluster (a ``pki`` folder next to its kubeconfig) uses the source
tree's ``hack/real-node.sh``. ``BACKSTOP_REAL_NODE_SCRIPT`` overrides the script.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from backstop.domain.constants import NODE_KIND_LABEL, NODE_KIND_REAL

__all__ = ["NODE_KIND_LABEL", "NODE_KIND_REAL", "RealNodeError", "RealNodes"]

SCRIPT_NAME = "real-node.sh"


class RealNodeError(Exception):
    """A real-node command failed; the message says why and what to do."""


@dataclass(frozen=True)
class RealNodes:
    """The real nodes of the cluster whose admin kubeconfig lives in ``run_dir``."""

    run_dir: Path
    script: Path

    @classmethod
    def for_kubeconfig(cls, kubeconfig: str | None) -> RealNodes:
        """The real nodes of the local cluster behind ``kubeconfig`` (or ``$KUBECONFIG``).

        Raises
        ------
        RealNodeError
            No kubeconfig, or the cluster was not started with real nodes.
        """
        path = kubeconfig or os.environ.get("KUBECONFIG")
        if not path:
            raise RealNodeError("real nodes need the local cluster's kubeconfig: set KUBECONFIG")
        run_dir = Path(path).resolve().parent
        override = os.environ.get("BACKSTOP_REAL_NODE_SCRIPT")
        script = Path(override) if override else run_dir / SCRIPT_NAME
        if not override and not script.is_file() and (run_dir / "pki").is_dir():
            # a local cluster without real nodes yet: the source tree's script starts the first
            source = Path(__file__).resolve().parents[3] / "hack" / SCRIPT_NAME
            script = source if source.is_file() else script
        if not script.is_file():
            raise RealNodeError(
                f"no real-node support next to {path} ({script} is missing): start the cluster "
                "with real nodes, e.g. `REAL_NODES=2 make cluster-up`, or add the first one with "
                "`hack/real-node.sh up NAME`"
            )
        return cls(run_dir, script)

    def run(self, *args: str, timeout: float = 300.0) -> str:
        """Run ``real-node.sh ARGS`` for this cluster; its standard output.

        Raises
        ------
        RealNodeError
            The script failed (its last error lines), or is not executable.
        """
        env = {**os.environ, "K8S_RUN_DIR": str(self.run_dir)}
        try:
            proc = subprocess.run(
                ["bash", str(self.script), *args],
                capture_output=True,
                text=True,
                timeout=timeout,
                env=env,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise RealNodeError(f"{self.script} {' '.join(args)}: {err}") from None
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("error:")] or lines[-3:]
            raise RealNodeError("\n".join(errors) or f"{self.script} exited {proc.returncode}")
        return proc.stdout

    def kill(self, name: str) -> str:
        """SIGKILL the node's kubelet, containerd, shims and containers at once."""
        return self.run("kill", name)

    def revive(self, name: str) -> str:
        """Boot a killed node again (containers gone, images kept); waits until Ready."""
        return self.run("revive", name)

    def add(self, name: str) -> str:
        """Start a new real node; waits until it is Ready."""
        return self.run("up", name)

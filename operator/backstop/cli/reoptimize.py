"""``backstop reoptimize``: re-optimization on demand.

The operator re-optimizes on a timer, but people want to see a
recommendation before trusting it. With a
manifest file, ``reoptimize`` runs the Spark job here (``local[*]``) on a
metrics directory and prints the new estimates and plan readably (or as
JSON). With a topology name, it asks the operator instead: it changes
``spec.reoptimization.nonce`` and watches ``status.reoptimization``, printing each
phase of the run as it happens (:mod:`backstop.cli._watch`), so the policy (``apply``,
``minImprovement``) is respected; ``--approve`` applies a stored suggestion.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table

from backstop.cli._output import fail, guarded, load_manifest, print_json

__all__ = ["print_recommendation", "register"]


def _f(x: Any, digits: int = 3) -> str:
    return f"{x:.{digits}g}" if isinstance(x, (int, float)) else str(x)


def print_recommendation(rec: dict[str, Any], console: Console | None = None) -> None:
    """Print one recommendation: estimates per operator, plans, simulation, trade-off."""
    c = console or Console()
    name = rec.get("topology", "?")
    if rec.get("result") != "Recommended":
        c.print(f"[bold]{name}[/bold]: {rec.get('result')}: {rec.get('message', '')}")
        return
    c.print(_estimates_table(name, rec["operators"]))
    c.print(_plans_table(rec))
    curve = rec.get("tradeoff") or []
    if curve:
        c.print(_tradeoff_table(curve))
    c.print(
        f"[bold]predicted gain {rec['improvement']:.0%}[/bold] ({rec['reason']}); "
        f"{rec['plan'].get('moved', 0)} pods would move"
    )


def _estimates_table(name: str, operators: list[dict[str, Any]]) -> Table:
    """Per operator: the spec's latency and CPU beside the estimates from the metrics."""
    t = Table(title=f"{name}: estimates per operator (spec → estimate)")
    for col in ("operator", "t_v spec", "t_v est.", "CPU spec", "CPU p-quantile", "MTBF s",
                "ckpt now s", "ckpt Young s"):  # fmt: skip
        t.add_column(col, justify="left" if col == "operator" else "right")
    for op in operators:
        if not op.get("measured"):
            t.add_row(op["operator"], _f(op["specLatency"]), "(no metrics)", _f(op["specCpu"]),
                      "", "", "", "")  # fmt: skip
            continue
        t.add_row(
            op["operator"],
            _f(op["specLatency"]),
            _f(op["latency"]),
            _f(op["specCpu"]),
            _f(op["cpuQuantile"]),
            _f(op["mtbfSeconds"], 4),
            _f(op["checkpointInterval"]),
            _f(op["recommendedCheckpointInterval"]),
        )
    return t


def _plans_table(rec: dict[str, Any]) -> Table:
    """The current and the recommended plan under the new estimates, with their simulation."""
    cur, new = rec["current"], rec["plan"]
    sim = rec.get("simulation") or {}
    p = Table(title=f"plans under the new estimates (bound {new['bound']:g}s)")
    for col in ("plan", "nodes", "backups", "worst H s", "keeps bound", "availability",
                "P[H≤R]", "H p95 s", "H p99 s"):  # fmt: skip
        p.add_column(col, justify="left" if col == "plan" else "right")
    for label, plan, key in (("current", cur, "current"), ("recommended", new, "plan")):
        s = sim.get(key) or {}
        p.add_row(
            label,
            str(plan["nodesUsed"]),
            str(plan["backupCount"]),
            _f(plan["worstRecoveryLatency"]),
            "yes" if plan["boundSatisfied"] else "[red]NO[/red]",
            f"{s['availability']:.6f}" if s else "",
            _f(s.get("boundProbability", "")),
            _f(s.get("p95", "")),
            _f(s.get("p99", "")),
        )
    return p


def _tradeoff_table(curve: list[dict[str, Any]]) -> Table:
    """What other bounds would cost: nodes, backups and worst recovery per bound."""
    tt = Table(title="trade-off: what other bounds would cost")
    for col in ("bound s", "nodes", "backups", "worst H s"):
        tt.add_column(col, justify="right")
    for pt in curve:
        if pt.get("feasible"):
            tt.add_row(_f(pt["bound"]), str(pt["nodesUsed"]), str(pt["backupCount"]),
                       _f(pt["worstRecoveryLatency"]))  # fmt: skip
        else:
            tt.add_row(_f(pt["bound"]), "infeasible", "", "")
    return tt


@guarded
def reoptimize_command(
    topology: Annotated[
        str,
        typer.Argument(
            help="A StreamTopology manifest file (run the job here), or the name of a "
            "topology in the cluster (ask the operator to run it now).",
            show_default=False,
        ),
    ],
    metrics: Annotated[
        str | None,
        typer.Option(
            help="Metrics directory or s3://bucket/prefix (tasks.* and nodes.*; a bucket is "
            "read with BACKSTOP_S3_ENDPOINT and the AWS_* credentials)."
        ),
    ] = None,
    nodes: Annotated[
        Path | None, typer.Option(help="Node objects (YAML) the plan may use.")
    ] = None,
    node_cpu: Annotated[
        float | None, typer.Option(help="Or: identical nodes of this many cores.")
    ] = None,
    current: Annotated[
        Path | None, typer.Option(help="The current plan (status.plan or place --json).")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Keep the job's output here.")] = None,
    master: Annotated[str, typer.Option(help="Spark master.")] = "local[*]",
    time_limit: Annotated[float, typer.Option(help="Planner seconds per plan.")] = 2.0,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace (cluster mode).")
    ] = "default",
    timeout: Annotated[float, typer.Option(help="Seconds to wait (cluster mode).")] = 600.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    approve: Annotated[
        bool,
        typer.Option(
            "--approve",
            help="Cluster mode: apply the stored apply: suggest recommendation (annotation "
            "backstop.dev/approve-recommendation=<id>) instead of running the job.",
        ),
    ] = False,
) -> None:
    """Re-estimate a topology's operators from metrics and recommend a better plan."""
    if Path(topology).is_file():
        _local(topology, metrics, nodes, node_cpu, current, out, master, time_limit, as_json)
    elif "/" in topology or topology.endswith((".yaml", ".yml", ".json")):
        fail(f"{topology} does not exist")
    else:
        _cluster(topology, namespace, timeout, as_json, approve)


def _local(
    topology: str,
    metrics: str | None,
    nodes: Path | None,
    node_cpu: float | None,
    current: Path | None,
    out: Path | None,
    master: str,
    time_limit: float,
    as_json: bool,
) -> None:
    load_manifest(topology)  # a clear message for a bad manifest, before Spark starts
    if metrics is None:
        fail("--metrics DIR is required with a manifest file")
    if (nodes is None) == (node_cpu is None):
        fail("pass exactly one of --nodes FILE and --node-cpu CORES")
    with tempfile.TemporaryDirectory(prefix="backstop-reopt-") as tmp:
        dest = out or Path(tmp)
        args = [sys.executable, "-m", "backstop.jobs.reoptimize", "--metrics", metrics,
                "--topologies", topology, "--out", str(dest), "--master", master,
                "--time-limit", str(time_limit)]  # fmt: skip
        args += ["--nodes", str(nodes)] if nodes else ["--node-cpu", str(node_cpu)]
        if current:
            args += ["--current", str(current)]
        returncode, stderr = _run_with_progress(args, master)
        if returncode != 0:
            lines = [ln for ln in stderr.splitlines() if ln.startswith("error:")]
            fail(lines[0].removeprefix("error: ") if lines else stderr.strip()[-600:])
        recs = [json.loads(ln) for ln in (dest / "recommendations.jsonl").open()]
    if as_json:
        print_json(recs[0] if len(recs) == 1 else recs)
        return
    for rec in recs:
        print_recommendation(rec)


def _run_with_progress(args: list[str], master: str) -> tuple[int, str]:
    """Run the job, saying on stderr that it runs and, every 10 s, for how long."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore::FutureWarning"}
    started = time.monotonic()
    typer.echo(f"running the Spark job ({master}); the JVM starts first ...", err=True)
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=err, env=env)
        while True:
            try:
                proc.wait(timeout=10)
                break
            except subprocess.TimeoutExpired:
                typer.echo(f"  ... {time.monotonic() - started:.0f}s", err=True)
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    typer.echo(f"the Spark job finished in {time.monotonic() - started:.0f}s", err=True)
    return proc.returncode, stderr


def _cluster(name: str, namespace: str, timeout: float, as_json: bool, approve: bool) -> None:
    from kubernetes.client.exceptions import ApiException

    from backstop.cli import _watch
    from backstop.k8s.cluster import ClusterUnavailable

    try:
        topo = _watch.Topology(name, namespace)
        obj = topo.get()
    except ClusterUnavailable as err:
        fail(str(err))
    except ApiException as err:
        if err.status == 404:
            fail(f"no StreamTopology {namespace}/{name} (and no file named {name!r})")
        fail(f"cannot read {namespace}/{name}: {err.reason}")
    if not (obj.get("spec") or {}).get("reoptimization"):
        fail(f"{namespace}/{name} has no spec.reoptimization; add one to re-optimize it")
    state = _watch.approve(topo, obj, timeout) if approve else _watch.run(topo, timeout)
    if as_json:
        print_json(state)
    code = _watch.exit_code(state, approve)
    if code:
        raise typer.Exit(code)


def register(app: typer.Typer) -> None:
    """Add ``reoptimize`` to the ``backstop`` app."""
    app.command("reoptimize")(reoptimize_command)

"""``python -m backstop_testkit metrics generate``: synthetic metrics for demos, tests, benches.

The re-optimization job reads task and node metrics that the task runtime writes on a
cluster; demos and tests need the same files without one. This command writes them from
the metrics generator (:mod:`backstop_testkit.sim.metricsgen`), with the ground truth the
job's estimates are checked against.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from backstop.cli._output import fail, guarded

__all__ = ["register"]

metrics_app = typer.Typer(help="Task and node metrics for re-optimization.", no_args_is_help=True)


@guarded
def generate_command(
    out: Annotated[Path, typer.Option(help="Output directory.", show_default=False)],
    topology: Annotated[
        list[Path] | None, typer.Option(help="StreamTopology manifest(s) (repeatable).")
    ] = None,
    fleet: Annotated[int, typer.Option(help="Copies of each topology (name-<i>).")] = 1,
    rows: Annotated[int, typer.Option(help="Task rows in total.")] = 100_000,
    fmt: Annotated[str, typer.Option("--format", help="parquet or jsonl.")] = "parquet",
    interval: Annotated[float, typer.Option(help="Seconds per row.")] = 60.0,
    task_mtbf: Annotated[float, typer.Option(help="Mean seconds between task failures.")] = 1800.0,
    latency_scale: Annotated[
        float, typer.Option(help="True latency / the spec's reprocessingLatency.")
    ] = 0.5,
    nodes: Annotated[int, typer.Option(help="Simulated nodes in the node metrics.")] = 6,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 1,
) -> None:
    """Write synthetic task and node metrics (and their ground truth) for demos and tests."""
    from backstop_testkit.sim.metricsgen import GeneratorParams, write_metrics

    if fmt not in ("parquet", "jsonl"):
        fail("--format must be parquet or jsonl")
    for value, flag in ((rows, "--rows"), (fleet, "--fleet"), (nodes, "--nodes")):
        if value < 1:
            fail(f"{flag} must be at least 1")
    for fvalue, flag in ((interval, "--interval"), (task_mtbf, "--task-mtbf"),
                         (latency_scale, "--latency-scale")):  # fmt: skip
        if not fvalue > 0:
            fail(f"{flag} must be positive")
    from backstop.domain.spec import load_topology

    paths = topology or [Path("examples/twitter-sentiment.yaml")]
    topos = []
    for p in paths:
        t = load_topology(p)
        for i in range(fleet):
            name = t.metadata.name if fleet == 1 else f"{t.metadata.name[:34]}-{i}"
            topos.append(t.model_copy(update={"metadata": t.metadata.model_copy(
                update={"name": name})}))  # fmt: skip
    params = GeneratorParams(rows=rows, interval_seconds=interval, task_mtbf=task_mtbf,
                             latency_scale=latency_scale, nodes=nodes, seed=seed)  # fmt: skip
    truth = write_metrics(out, topos, params, fmt)
    typer.echo(
        f"wrote {truth['rows']} task rows ({len(topos)} topologies × {truth['intervals']} "
        f"intervals) and {nodes * truth['intervals']} node rows to {out}/ ({fmt}); "
        f"ground truth in {out}/truth.json, manifests in {out}/topologies.yaml"
    )


def register(app: typer.Typer) -> None:
    """Add the ``metrics`` command group (``metrics generate``) to the test kit's CLI."""
    metrics_app.command("generate")(generate_command)
    app.add_typer(metrics_app, name="metrics")

"""``backstop nodes``: drive the node simulator from the command line.

Tests and the demo use these commands instead of kubelets: create simulated
nodes, keep them alive (``run``), kill one, and add replacements that become
Ready after a delay.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Annotated

import typer
from kubernetes.client.exceptions import ApiException

from backstop.cluster import ClusterUnavailable, api_client
from backstop.nodesim import SIM_LABEL, NodeShape, Simulator, node_is_ready

nodes_app = typer.Typer(
    help="Simulated nodes (stand-ins for kubelets): create, run heartbeats, kill, replace.",
    no_args_is_help=True,
)

Kubeconfig = Annotated[
    str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG", help="Path to a kubeconfig.")
]


def _sim(kubeconfig: str | None) -> Simulator:
    try:
        return Simulator(api_client(kubeconfig))
    except ClusterUnavailable as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def _api_error(err: ApiException) -> typer.Exit:
    typer.echo(f"error: the API server refused: {err.status} {err.reason}", err=True)
    return typer.Exit(1)


@nodes_app.command("create")
def create(
    count: Annotated[int, typer.Argument(min=1, help="How many nodes to create.")],
    prefix: Annotated[str, typer.Option(help="Node name prefix; names are PREFIX-0, …")] = "sim",
    cpu: Annotated[str, typer.Option(help="Allocatable CPU per node.")] = "4",
    memory: Annotated[str, typer.Option(help="Allocatable memory per node.")] = "16Gi",
    zones: Annotated[
        str, typer.Option(help="Comma-separated zones, assigned round robin.")
    ] = "zone-a,zone-b,zone-c",
    racks: Annotated[int, typer.Option(help="Racks per zone (label rack-<zone>-<k>).")] = 2,
    start: Annotated[int, typer.Option(help="First index.")] = 0,
    ready_after: Annotated[float, typer.Option(help="Seconds until the node turns Ready.")] = 0.0,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Create COUNT simulated nodes with allocatable CPU/memory and zone/rack labels."""
    sim = _sim(kubeconfig)
    zone_list: list[str | None] = [z for z in zones.split(",") if z] or [None]
    shape = NodeShape(cpu=cpu, memory=memory)
    for i in range(start, start + count):
        zone = zone_list[i % len(zone_list)]
        rack = f"rack-{zone}-{(i // len(zone_list)) % racks}" if zone else None
        try:
            sim.create(f"{prefix}-{i}", shape, zone=zone, rack=rack, ready_after=ready_after)
        except ApiException as err:
            raise _api_error(err) from None
        typer.echo(f"node/{prefix}-{i} created (cpu={cpu}, zone={zone}, rack={rack})")


@nodes_app.command("add")
def add(
    name: Annotated[str, typer.Argument(help="Name of the replacement node.")],
    cpu: Annotated[str, typer.Option(help="Allocatable CPU.")] = "4",
    memory: Annotated[str, typer.Option(help="Allocatable memory.")] = "16Gi",
    zone: Annotated[str | None, typer.Option(help="Zone label.")] = None,
    rack: Annotated[str | None, typer.Option(help="Rack label.")] = None,
    ready_after: Annotated[float, typer.Option(help="Seconds until it turns Ready.")] = 10.0,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Add a replacement node that becomes Ready after a delay (needs `nodes run`)."""
    try:
        _sim(kubeconfig).create(
            name, NodeShape(cpu=cpu, memory=memory), zone=zone, rack=rack, ready_after=ready_after
        )
    except ApiException as err:
        raise _api_error(err) from None
    typer.echo(f"node/{name} added; Ready in {ready_after:g}s")


@nodes_app.command("kill")
def kill(
    names: Annotated[list[str], typer.Argument(help="Nodes to kill.")],
    kubeconfig: Kubeconfig = None,
) -> None:
    """Stop heartbeats of NAMES; the node-lifecycle controller turns them NotReady."""
    sim = _sim(kubeconfig)
    for name in names:
        try:
            sim.kill(name)
        except ApiException as err:
            raise _api_error(err) from None
        typer.echo(f"node/{name} killed (heartbeats stopped)")


@nodes_app.command("revive")
def revive(
    names: Annotated[list[str], typer.Argument(help="Nodes to bring back.")],
    kubeconfig: Kubeconfig = None,
) -> None:
    """Resume heartbeats of NAMES (a lost node comes back)."""
    sim = _sim(kubeconfig)
    for name in names:
        try:
            sim.revive(name)
        except ApiException as err:
            raise _api_error(err) from None
        typer.echo(f"node/{name} revived")


@nodes_app.command("list")
def list_nodes(kubeconfig: Kubeconfig = None) -> None:
    """List simulated nodes with their state."""
    sim = _sim(kubeconfig)
    try:
        items = sim.core.list_node(label_selector=f"{SIM_LABEL}=true").items
    except ApiException as err:
        raise _api_error(err) from None
    typer.echo(f"{'NAME':<16} {'READY':<6} {'CPU':<5} {'KILLED':<6}")
    for n in items:
        ann = n.metadata.annotations or {}
        cpu = (n.status.allocatable or {}).get("cpu", "?")
        killed = "yes" if ann.get("sim.backstop.dev/killed") == "true" else "no"
        typer.echo(f"{n.metadata.name:<16} {node_is_ready(n)!s:<6} {cpu:<5} {killed:<6}")


@nodes_app.command("run")
def run(
    interval: Annotated[float, typer.Option(help="Seconds between heartbeats.")] = 2.0,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Run the simulator loop: heartbeats, Ready, pods Running (until Ctrl-C)."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s nodesim %(message)s")
    with contextlib.suppress(KeyboardInterrupt):
        _sim(kubeconfig).run(interval)


def register(app: typer.Typer) -> None:
    """Add the ``nodes`` command group to the CLI."""
    app.add_typer(nodes_app, name="nodes")

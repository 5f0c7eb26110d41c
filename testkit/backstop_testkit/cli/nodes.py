"""``python -m backstop_testkit nodes``: kill, revive and add the local cluster's nodes.

Tests and the demo use these commands on both kinds of node the local cluster has
(label ``backstop.dev/node-kind``): simulated nodes (the node simulator: create
them, keep them alive with ``run``, kill one by stopping its heartbeats) and real
nodes (a kubelet and containerd on this host, ``hack/real-node.sh``: kill means
SIGKILL of the kubelet and every container, revive boots it again with its
containers gone). ``kill`` and ``revive`` look the kind up on the Node object.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Annotated

import typer

from backstop.domain.constants import NODE_KIND_LABEL, NODE_KIND_REAL

# The Kubernetes client and the simulators are imported by the commands that use them
# (see backstop_testkit.cli): importing the client alone takes longer than `backstop --help` may.
if TYPE_CHECKING:
    from kubernetes.client.exceptions import ApiException

    from backstop_testkit.sim.nodesim import Simulator
    from backstop_testkit.sim.realnodes import RealNodes

nodes_app = typer.Typer(
    help="Nodes of the local cluster: kill, revive and add real or simulated nodes; "
    "create simulated nodes and run their heartbeats.",
    no_args_is_help=True,
)

Kubeconfig = Annotated[
    str | None, typer.Option("--kubeconfig", envvar="KUBECONFIG", help="Path to a kubeconfig.")
]


def _sim(kubeconfig: str | None) -> Simulator:
    from backstop.k8s.cluster import ClusterUnavailable, api_client
    from backstop_testkit.sim.nodesim import Simulator

    try:
        return Simulator(api_client(kubeconfig))
    except ClusterUnavailable as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def _api_error(err: ApiException) -> typer.Exit:
    typer.echo(f"error: the API server refused: {err.status} {err.reason}", err=True)
    return typer.Exit(1)


def _real(kubeconfig: str | None) -> RealNodes:
    from backstop_testkit.sim.realnodes import RealNodeError, RealNodes

    try:
        return RealNodes.for_kubeconfig(kubeconfig)
    except RealNodeError as err:
        typer.echo(f"error: {err}", err=True)
        raise typer.Exit(2) from None


def _kind_of(sim: Simulator, name: str) -> str | None:
    """The node's ``backstop.dev/node-kind``; a clear error when there is no such node."""
    from kubernetes.client.exceptions import ApiException

    from backstop.k8s.nodes import node_kind

    try:
        node = sim.core.read_node(name)
    except ApiException as err:
        if err.status == 404:
            typer.echo(f"error: node {name} not found", err=True)
            raise typer.Exit(1) from None
        raise _api_error(err) from None
    return node_kind(node.metadata.labels)


def _run_real(action: str, call: Callable[[], str]) -> None:
    from backstop_testkit.sim.realnodes import RealNodeError

    try:
        out = call()
    except RealNodeError as err:
        typer.echo(f"error: {action}: {err}", err=True)
        raise typer.Exit(1) from None
    if out.strip():
        typer.echo(out.rstrip())


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
    from kubernetes.client.exceptions import ApiException

    from backstop_testkit.sim.nodesim import NodeShape

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
    real: Annotated[
        bool,
        typer.Option(
            "--real",
            help="A real node (kubelet + containerd on this host, needs root); it reports the "
            "host's CPUs and turns Ready when its kubelet has registered.",
        ),
    ] = False,
    cpu: Annotated[str, typer.Option(help="Allocatable CPU (simulated nodes).")] = "4",
    memory: Annotated[str, typer.Option(help="Allocatable memory (simulated nodes).")] = "16Gi",
    zone: Annotated[str | None, typer.Option(help="Zone label (simulated nodes).")] = None,
    rack: Annotated[str | None, typer.Option(help="Rack label (simulated nodes).")] = None,
    ready_after: Annotated[
        float, typer.Option(help="Seconds until it turns Ready (simulated nodes).")
    ] = 10.0,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Add a replacement node: simulated (Ready after a delay; needs `nodes run`) or --real."""
    from kubernetes.client.exceptions import ApiException

    from backstop_testkit.sim.nodesim import NodeShape

    if real:
        _run_real(f"adding real node {name}", lambda: _real(kubeconfig).add(name))
        typer.echo(f"node/{name} added (real) and Ready")
        return
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
    """Kill NAMES: a real node's kubelet and containers get SIGKILL; a simulated node's
    heartbeats stop. The node-lifecycle controller then turns them NotReady."""
    from kubernetes.client.exceptions import ApiException

    sim = _sim(kubeconfig)
    for name in names:
        if _kind_of(sim, name) == NODE_KIND_REAL:
            _run_real(f"killing {name}", partial(_real(kubeconfig).kill, name))
            typer.echo(f"node/{name} killed (kubelet and containers SIGKILLed)")
            continue
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
    """Bring NAMES back: a real node boots again with its containers gone; a simulated node's
    heartbeats resume."""
    from kubernetes.client.exceptions import ApiException

    sim = _sim(kubeconfig)
    for name in names:
        if _kind_of(sim, name) == NODE_KIND_REAL:
            _run_real(f"reviving {name}", partial(_real(kubeconfig).revive, name))
            typer.echo(f"node/{name} revived (real: containers gone, Ready again)")
            continue
        try:
            sim.revive(name)
        except ApiException as err:
            raise _api_error(err) from None
        typer.echo(f"node/{name} revived")


@nodes_app.command("list")
def list_nodes(kubeconfig: Kubeconfig = None) -> None:
    """List the local cluster's nodes (real and simulated) with their state."""
    from kubernetes.client.exceptions import ApiException

    from backstop.k8s.nodes import node_is_ready, node_kind
    from backstop_testkit.sim.nodesim import KILLED, SIM_LABEL

    sim = _sim(kubeconfig)
    try:
        items = sim.core.list_node(label_selector=NODE_KIND_LABEL).items
        legacy = sim.core.list_node(label_selector=f"{SIM_LABEL}=true").items
    except ApiException as err:
        raise _api_error(err) from None
    seen = {n.metadata.name for n in items}
    items += [n for n in legacy if n.metadata.name not in seen]
    typer.echo(f"{'NAME':<16} {'KIND':<10} {'READY':<6} {'CPU':<5} {'KILLED':<6}")
    for n in sorted(items, key=lambda n: str(n.metadata.name)):
        ann = n.metadata.annotations or {}
        cpu = ((n.status and n.status.allocatable) or {}).get("cpu", "?")
        kind = node_kind(n.metadata.labels) or "simulated"
        killed = "yes" if ann.get(KILLED) == "true" else "no" if kind != NODE_KIND_REAL else "-"
        typer.echo(f"{n.metadata.name:<16} {kind:<10} {node_is_ready(n)!s:<6} {cpu:<5} {killed:<6}")


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
    """Add the ``nodes`` command group to the test kit's CLI."""
    app.add_typer(nodes_app, name="nodes")

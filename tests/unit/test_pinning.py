"""A task pod's pin names the Node, and either form of a pin reads as the same node."""

from __future__ import annotations

from backstop.domain.pinning import hashed_pod_spec, pinned, pinned_by_hostname, pinned_node
from backstop_testkit.sim.nodesim import NodeShape, build_node


def test_the_pin_matches_the_node_name_field() -> None:
    required = pinned("ip-10-0-0-7.ec2.internal")["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    assert required == {
        "nodeSelectorTerms": [
            {
                "matchFields": [
                    {
                        "key": "metadata.name",
                        "operator": "In",
                        "values": ["ip-10-0-0-7.ec2.internal"],
                    }
                ]
            }
        ]
    }


def test_either_form_reads_as_the_pinned_node_and_hashes_alike() -> None:
    by_name = {"containers": [], "affinity": pinned("n1")}
    by_label = {"containers": [], "affinity": pinned_by_hostname("n1")}
    assert pinned_node(by_name) == pinned_node(by_label) == "n1"
    assert hashed_pod_spec(by_name, "n1") == hashed_pod_spec(by_label, "n1") == by_label
    assert hashed_pod_spec(by_name, "n2") != hashed_pod_spec(by_name, "n1")
    assert pinned_node({"containers": []}) is None


def test_a_simulated_node_may_carry_a_hostname_label_other_than_its_name() -> None:
    node = build_node("sim-0", NodeShape(), hostname="sim-0-host")
    assert node["metadata"]["name"] == "sim-0"
    assert node["metadata"]["labels"]["kubernetes.io/hostname"] == "sim-0-host"
    assert (
        build_node("sim-1", NodeShape())["metadata"]["labels"]["kubernetes.io/hostname"] == "sim-1"
    )

"""Topology-aware gangs: a multi-node job on a target naming a topology level carries Kueue's annotation (or
Volcano's network topology), and the Topology Kueue needs is rendered from IT's node labels."""

from __future__ import annotations

from typing import Any

import pytest

from fabrics.base import Resources, TemplateError
from fabrics.kubernetes import render
from fabrics.kubernetes.kueue import Team
from fabrics.kubernetes.settings import KubeSettings
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.k8s_double import ApiDouble

RACK = "example.com/rack"
LEVELS = ["example.com/block", RACK, "kubernetes.io/hostname"]


def template(level: str) -> str:
    return f"metadata:\n  annotations:\n    gridlane.io/topology: '{level}'\nspec:\n  containers: [{{name: main}}]\n"


def test_a_gang_with_a_required_level_carries_kueues_annotation_and_is_accepted(
    double: ApiDouble, kubeconfig: Any
) -> None:
    settings = {"kubeconfig": str(kubeconfig), "gpu_flavor": "h100", "kueue_owned": True, "topology_levels": LEVELS,
                "node_selector": "gpu=h100"}  # fmt: skip
    fabric = connect(settings)
    gang = spec(nodes=2, template=template(f"required: {RACK}"))
    name = fabric.submit(gang)
    job = double.get("jobs", NAMESPACE, name)
    assert job is not None
    annotations = job["spec"]["template"]["metadata"]["annotations"]
    assert annotations["kueue.x-k8s.io/podset-required-topology"] == RACK
    assert "gridlane.io/topology" not in annotations
    # One node: nothing to keep together.
    single = render.render(spec(template=template(f"required: {RACK}")), fabric.settings, NAMESPACE)
    assert "annotations" not in single.job["spec"]["template"]["metadata"]
    preferred = render.render(spec(nodes=2, template=template(f"preferred: {RACK}")), fabric.settings, NAMESPACE)
    assert preferred.job["spec"]["template"]["metadata"]["annotations"] == {
        "kueue.x-k8s.io/podset-preferred-topology": RACK
    }
    # The Topology and the flavor naming it are accepted by the double under Kueue's v1beta2 CRDs.
    report = fabric.reconcile_kueue("7", [Team("vision", None, Resources(2000, 0, 0), namespaces=(NAMESPACE,))])
    assert "Topology k8s" in report.created
    flavor = double.get("resourceflavors", "", "h100")
    assert flavor is not None
    assert flavor["spec"]["topologyName"] == "k8s"


def test_on_volcano_the_podgroup_carries_its_network_topology() -> None:
    settings = KubeSettings.parse({"volcano": True, "topology_levels": LEVELS})
    made = render.render(spec(nodes=4, template=template(f"required: {RACK}")), settings, NAMESPACE)
    assert made.podgroup is not None
    assert made.podgroup["spec"]["networkTopology"] == {"mode": "hard", "highestTierAllowed": 1}


def test_a_topology_annotation_of_another_shape_is_refused() -> None:
    with pytest.raises(TemplateError, match="required: <node label>"):
        render.check_template(template("always: rack"))

"""The double decodes and validates bodies as kube-apiserver does: built-in kinds by the official client's models,
Kueue's kinds by Kueue v0.19.2's released CRDs, served in the versions its release switch names."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.fabrics.kubernetes.test_double import call
from tests.k8s_double import ApiDouble

JOBS = "/apis/batch/v1/namespaces/default/jobs"
STRICT = "?fieldValidation=Strict"


@pytest.fixture
def double() -> Iterator[ApiDouble]:
    with ApiDouble(simulate=False) as api:
        yield api


def job(**pod: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox:1.36", "command": ["true"]}
    spec = {"containers": [container], "restartPolicy": "Never"} | pod
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"}, "spec": {"template": {"spec": spec}}}


def test_an_unknown_field_is_refused_under_strict_validation_and_dropped_otherwise(double: ApiDouble) -> None:
    body = job(hostNetwrok=True)  # a typo a real server would not silently take as hostNetwork
    code, refused = call(double, "POST", JOBS + STRICT, body)
    assert (code, refused["reason"]) == (400, "BadRequest")
    assert refused["message"] == 'strict decoding error: unknown field "spec.template.spec.hostNetwrok"'
    code, created = call(double, "POST", JOBS, body)
    assert code == 201
    assert "hostNetwrok" not in created["spec"]["template"]["spec"]


def test_a_wrong_type_is_a_decode_error_and_a_missing_required_field_is_invalid(double: ApiDouble) -> None:
    code, refused = call(double, "POST", JOBS + STRICT, job(hostNetwork="yes"))
    assert code == 400
    assert (
        "cannot unmarshal string into Go struct field Job.spec.template.spec.hostNetwork of type bool"
        in (refused["message"])
    )
    nameless = job()
    del nameless["spec"]["template"]["spec"]["containers"][0]["name"]
    code, refused = call(double, "POST", JOBS + STRICT, nameless)
    assert (code, refused["reason"]) == (422, "Invalid")
    assert refused["details"]["causes"][0]["field"] == "spec.template.spec.containers[0].name"
    # Quantities take numbers as well as text, as resource.Quantity's JSON does.
    numbers = job()
    numbers["spec"]["template"]["spec"]["containers"][0]["resources"] = {"limits": {"cpu": 2, "memory": "1Gi"}}
    assert call(double, "POST", JOBS + STRICT, numbers)[0] == 201


@pytest.mark.parametrize(
    ("release", "served"),
    [("v0.19", ["v1beta2", "v1beta1"]), ("v0.20", ["v1beta2"]), ("v1beta1-only", ["v1beta1"]), ("none", [])],
)
def test_kueue_is_served_in_the_versions_its_release_serves(release: str, served: list[str]) -> None:
    with ApiDouble(simulate=False, kueue=release) as double:
        code, groups = call(double, "GET", "/apis")
        kueue = [g for g in groups["groups"] if g["name"] == "kueue.x-k8s.io"]
        assert [v["version"] for g in kueue for v in g["versions"]] == served
        for version in ("v1beta1", "v1beta2"):
            code, _ = call(double, "GET", f"/apis/kueue.x-k8s.io/{version}/clusterqueues")
            assert code == (200 if version in served else 404)


def test_a_cluster_queue_written_as_v1beta1_reads_as_v1beta2_and_back() -> None:
    with ApiDouble(simulate=False) as double:
        old = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "q"}}
        code, created = call(
            double, "POST", "/apis/kueue.x-k8s.io/v1beta1/clusterqueues", old | {"spec": {"cohort": "c"}}
        )
        assert (code, created["spec"]["cohort"]) == (201, "c")
        code, read = call(double, "GET", "/apis/kueue.x-k8s.io/v1beta2/clusterqueues/q")
        assert (read["apiVersion"], read["spec"]["cohortName"]) == ("kueue.x-k8s.io/v1beta2", "c")
        assert "cohort" not in read["spec"]
        # Defaults come from the CRD: the queueing strategy, the preemption policies.
        assert read["spec"]["queueingStrategy"] == "BestEffortFIFO"
        assert read["spec"]["preemption"]["borrowWithinCohort"] == {"policy": "Never"}


def test_a_flavor_naming_a_topology_keeps_its_node_labels_as_kueues_transition_rule_says() -> None:
    with ApiDouble(simulate=False) as double:
        path = "/apis/kueue.x-k8s.io/v1beta2/resourceflavors"
        body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "f"}}
        assert call(double, "POST", path, body | {"spec": {"topologyName": "t"}})[0] == 422  # needs node labels
        spec = {"topologyName": "t", "nodeLabels": {"gpu": "h100"}, "tolerations": [{"key": "k", "value": "v"}]}
        assert call(double, "POST", path, body | {"spec": spec})[0] == 201
        code, refused = call(double, "PATCH", f"{path}/f", {"spec": {"nodeLabels": {"gpu": "a100"}}})
        assert code == 422
        assert "nodeLabels are immutable when topologyName is set" in refused["message"]
        bad = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "g"}}
        tolerations = [{"key": "k", "operator": "Exists", "value": "v"}]
        code, refused = call(double, "POST", path, bad | {"spec": {"tolerations": tolerations}})
        assert code == 422
        assert "a value must be empty when 'operator' is 'Exists'" in refused["message"]

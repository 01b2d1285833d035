"""The Kueue objects Gridlane owns: rendered (pure, whole dicts compared) and reconciled against the API double."""

from __future__ import annotations

from typing import Any

import pytest

from fabrics.base import Resources
from fabrics.kubernetes.fabric import KubernetesFabric
from fabrics.kubernetes.kueue import Department, Limits, Site, Team, render
from fabrics.kubernetes.kueue_reconcile import BY_HAND, EDITED, GRIDLANE
from fabrics.kubernetes.settings import GpuResource, KubeSettings
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect
from tests.k8s_double import ApiDouble

LABELS = {"app.kubernetes.io/managed-by": "gridlane", "gridlane.io/fabric": "7"}
H100 = GpuResource()
CAPACITY = Resources(16000, 64000, 512 * 1024)  # 16 GPUs, 64 CPUs, 512 GiB


def site(*teams: Team, departments: tuple[Department, ...] = (), gpu: GpuResource = H100, flavor: str = "h100") -> Site:
    return Site("7", "k8s", flavor, gpu, CAPACITY, teams, departments)


def team(slug: str, gpus: int, limit: int | None = None, department: str | None = None, **more: Any) -> Team:
    """A team reserving `gpus` milli-GPUs (and 8 CPUs, 64 GiB), capped at `limit` milli-GPUs."""
    reservation = Resources(gpus, more.pop("cpus", 8000), more.pop("memory", 65536))
    return Team(slug, department, reservation, Limits(gpus_milli=limit), namespaces=("gridlane",))


def by_name(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == name)


def resources(queue: dict[str, Any]) -> list[dict[str, Any]]:
    return list(queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"])


# -- rendering ------------------------------------------------------------------------------------


def test_a_team_without_a_department_gets_a_whole_cluster_queue_in_the_fabrics_cohort() -> None:
    rendered = render(site(team("vision", 2000, limit=4000)))
    assert by_name(rendered.objects, "ClusterQueue", "k8s-vision") == {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ClusterQueue",
        "metadata": {"name": "k8s-vision", "labels": LABELS | {"gridlane.io/team": "vision"}},
        "spec": {
            "cohort": "k8s",
            "namespaceSelector": {
                "matchExpressions": [{"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["gridlane"]}]
            },
            "resourceGroups": [
                {
                    "coveredResources": ["cpu", "memory", "nvidia.com/gpu"],
                    "flavors": [
                        {
                            "name": "h100",
                            "resources": [
                                {"name": "cpu", "nominalQuota": "8"},
                                {"name": "memory", "nominalQuota": "64Gi"},
                                {"name": "nvidia.com/gpu", "nominalQuota": 2, "borrowingLimit": 2},
                            ],
                        }
                    ],
                }
            ],
            "preemption": {"reclaimWithinCohort": "Any", "withinClusterQueue": "LowerPriority"},
        },
    }
    assert by_name(rendered.objects, "LocalQueue", "gl-vision") == {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "gl-vision", "namespace": "gridlane", "labels": LABELS | {"gridlane.io/team": "vision"}},
        "spec": {"clusterQueue": "k8s-vision"},
    }
    assert by_name(rendered.objects, "ResourceFlavor", "h100") == {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h100", "labels": LABELS},
        "spec": {},
    }
    # What nobody reserves (16 - 2 GPUs, 64 - 8 CPUs, 512 - 64 GiB) lends to the cohort; nobody submits to it.
    pool = by_name(rendered.objects, "ClusterQueue", "k8s")
    assert pool["spec"]["cohort"] == "k8s"
    assert "namespaceSelector" not in pool["spec"]
    assert resources(pool) == [
        {"name": "cpu", "nominalQuota": "56"},
        {"name": "memory", "nominalQuota": "448Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": 14},
    ]
    assert rendered.notes == []


def test_no_limit_means_no_borrowing_limit() -> None:
    queue = by_name(render(site(team("vision", 2000))).objects, "ClusterQueue", "k8s-vision")
    assert resources(queue)[2] == {"name": "nvidia.com/gpu", "nominalQuota": 2}


def test_a_team_in_a_department_borrows_within_its_department_held_under_the_departments_limit() -> None:
    research = Department("research", Resources(6000, 0, 0), Limits(gpus_milli=8000))
    rendered = render(
        site(team("vision", 2000, 4000, "research"), team("nlp", 1000, None, "research"), departments=(research,))
    )
    assert by_name(rendered.objects, "ClusterQueue", "k8s-vision")["spec"]["cohort"] == "research"
    pool = by_name(rendered.objects, "ClusterQueue", "k8s-research")
    assert pool["spec"]["cohort"] == "research"
    # Its own 6 less the teams' 3, plus the 10 nobody reserves, held to 8 - 3 by the department's limit.
    assert resources(pool)[2] == {"name": "nvidia.com/gpu", "nominalQuota": 5}
    assert {o["metadata"]["name"] for o in rendered.objects if o["kind"] == "ClusterQueue"} == {
        "k8s-vision",
        "k8s-nlp",
        "k8s-research",
    }


def test_a_fractional_gpu_reservation_is_rounded_down_with_a_note() -> None:
    rendered = render(site(team("vision", 2500, limit=4000)))
    assert resources(by_name(rendered.objects, "ClusterQueue", "k8s-vision"))[2] == {
        "name": "nvidia.com/gpu",
        "nominalQuota": 2,
        "borrowingLimit": 2,
    }
    assert any("vision: the GPU reservation (2.5 GPU)" in note and "so it is 2" in note for note in rendered.notes)


def test_a_mig_flavor_counts_in_its_own_units() -> None:
    gpu = KubeSettings.parse(
        {
            "gpu_flavor": "mig-1g.10gb",
            "gpu_resources": {"mig-1g.10gb": {"resource": "nvidia.com/mig-1g.10gb", "milli_per_unit": 250}},
        }
    ).gpu
    rendered = render(site(team("vision", 500, limit=1000, cpus=500, memory=1536), gpu=gpu, flavor="mig-1g.10gb"))
    queue = by_name(rendered.objects, "ClusterQueue", "k8s-vision")
    assert queue["spec"]["resourceGroups"][0]["coveredResources"] == ["cpu", "memory", "nvidia.com/mig-1g.10gb"]
    assert queue["spec"]["resourceGroups"][0]["flavors"][0]["name"] == "mig-1g.10gb"
    assert resources(queue) == [
        {"name": "cpu", "nominalQuota": "500m"},
        {"name": "memory", "nominalQuota": "1536Mi"},
        {"name": "nvidia.com/mig-1g.10gb", "nominalQuota": 2, "borrowingLimit": 2},
    ]


def test_settings_kueue_owned_is_checked() -> None:
    assert KubeSettings.parse({"kueue_owned": True}).kueue_owned
    with pytest.raises(ValueError, match="true or false"):
        KubeSettings.parse({"kueue_owned": "yes"})
    with pytest.raises(ValueError, match="cannot both"):
        KubeSettings.parse({"kueue_owned": True, "volcano": True})


# -- reconciling against the API double -------------------------------------------------------------


@pytest.fixture
def owned(k8s_settings: dict[str, Any]) -> KubernetesFabric:
    return connect(k8s_settings | {"kueue_owned": True})


def cq(double: ApiDouble, name: str) -> dict[str, Any]:
    found = double.get("clusterqueues", "", name)
    assert found is not None
    return found


def test_the_first_run_creates_everything(double: ApiDouble, owned: KubernetesFabric) -> None:
    report = owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    assert sorted(report.created) == [
        "ClusterQueue k8s",
        "ClusterQueue k8s-vision",
        f"LocalQueue {NAMESPACE}/gl-vision",
        "ResourceFlavor h100",
    ]
    assert report.differences == []
    assert report.drifted == []
    assert resources(cq(double, "k8s-vision"))[2] == {"name": "nvidia.com/gpu", "nominalQuota": 2, "borrowingLimit": 2}
    assert cq(double, "k8s-vision")["spec"]["queueingStrategy"] == "BestEffortFIFO"  # Kueue's default, not ours
    local = double.get("localqueues", NAMESPACE, "gl-vision")
    assert local is not None
    assert local["spec"]["clusterQueue"] == "k8s-vision"
    # A second run with nothing changed writes nothing.
    double.forget_calls()
    again = owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    assert (again.created, again.updated, again.deleted, again.differences) == ([], [], [], [])
    assert [c.method for c in double.calls()] == ["GET", "GET", "GET"]


def test_a_quota_change_patches_only_that_cluster_queue(double: ApiDouble, owned: KubernetesFabric) -> None:
    owned.reconcile_kueue("7", [team("vision", 2000, 4000), team("nlp", 1000, 2000)])
    nlp_version = cq(double, "k8s-nlp")["metadata"]["resourceVersion"]
    double.forget_calls()
    report = owned.reconcile_kueue("7", [team("vision", 3000, 4000), team("nlp", 1000, 2000)])
    # vision's reservation grew; the fabric's unreserved pool shrank with it.
    assert sorted(report.updated) == ["ClusterQueue k8s", "ClusterQueue k8s-vision"]
    assert {d.cause for d in report.differences} == {GRIDLANE}
    assert report.drifted == []
    assert resources(cq(double, "k8s-vision"))[2] == {"name": "nvidia.com/gpu", "nominalQuota": 3, "borrowingLimit": 1}
    assert cq(double, "k8s-vision")["metadata"]["generation"] == 2
    assert cq(double, "k8s-nlp")["metadata"]["resourceVersion"] == nlp_version
    assert {c.path.rsplit("/", 1)[-1] for c in double.calls("PATCH")} == {"k8s", "k8s-vision"}


def test_a_hand_edit_is_reported_as_drift_and_reverted(double: ApiDouble, owned: KubernetesFabric) -> None:
    owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    edited = cq(double, "k8s-vision")
    edited["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = 8
    edited["spec"]["cohort"] = "elsewhere"
    with double.store.lock:
        double.store.get(double_kind("clusterqueues"), "", "k8s-vision")["spec"] = edited["spec"]  # type: ignore[index]
    report = owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    assert report.drifted == ["ClusterQueue k8s-vision"]
    assert {(d.field, d.cluster, d.gridlane, d.cause) for d in report.drift if d.field == "spec.cohort"} == {
        ("spec.cohort", "elsewhere", "k8s", EDITED)
    }
    assert any(d.field == "spec.resourceGroups" for d in report.drift)
    assert cq(double, "k8s-vision")["spec"]["cohort"] == "k8s"
    assert resources(cq(double, "k8s-vision"))[2]["nominalQuota"] == 2


def test_an_object_made_by_hand_with_gridlanes_labels_is_drift(double: ApiDouble, owned: KubernetesFabric) -> None:
    owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    body = {"metadata": {"name": "rogue", "labels": LABELS}, "spec": {"cohort": "k8s", "resourceGroups": []}}
    with double.store.lock:
        double.store.create(double_kind("clusterqueues"), "", body)
    report = owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    assert report.deleted == ["ClusterQueue rogue"]
    assert [(d.object, d.cause) for d in report.drift] == [("ClusterQueue rogue", BY_HAND)]


def test_a_removed_teams_objects_are_deleted(double: ApiDouble, owned: KubernetesFabric) -> None:
    owned.reconcile_kueue("7", [team("vision", 2000, 4000), team("nlp", 1000, 2000)])
    report = owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    assert report.deleted == [f"LocalQueue {NAMESPACE}/gl-nlp", "ClusterQueue k8s-nlp"]
    assert double.get("clusterqueues", "", "k8s-nlp") is None
    assert double.get("localqueues", NAMESPACE, "gl-nlp") is None


def test_an_unmanaged_object_is_left_alone(double: ApiDouble, owned: KubernetesFabric) -> None:
    theirs = {"metadata": {"name": "k8s-vision"}, "spec": {"cohort": "theirs", "resourceGroups": []}}
    other = {"metadata": {"name": "batch", "labels": {"team": "ops"}}, "spec": {"resourceGroups": []}}
    with double.store.lock:
        double.store.create(double_kind("clusterqueues"), "", theirs)
        double.store.create(double_kind("clusterqueues"), "", other)
    report = owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    assert report.not_ours == ["ClusterQueue k8s-vision"]
    assert report.drifted == ["ClusterQueue k8s-vision"]
    assert cq(double, "k8s-vision")["spec"]["cohort"] == "theirs"
    assert cq(double, "batch")["metadata"]["labels"] == {"team": "ops"}


def test_a_department_makes_a_cohort_in_the_cluster(double: ApiDouble, owned: KubernetesFabric) -> None:
    research = Department("research", Resources(4000, 0, 0), Limits(gpus_milli=8000))
    report = owned.reconcile_kueue("7", [team("vision", 2000, 4000, "research")], [research])
    assert "ClusterQueue k8s-research" in report.created
    assert cq(double, "k8s-vision")["spec"]["cohort"] == cq(double, "k8s-research")["spec"]["cohort"] == "research"


def double_kind(name: str) -> Any:
    from tests.k8s_double.objects import BY_NAME

    return BY_NAME[name]


def test_the_double_serves_kueues_kinds_as_a_cluster_does(double: ApiDouble, fabric: KubernetesFabric) -> None:
    from fabrics.kubernetes.client import KubeError

    client = fabric.client
    body = {"apiVersion": "kueue.x-k8s.io/v1beta1", "kind": "ClusterQueue", "metadata": {"name": "q"}}
    created = client.kueue_create("clusterqueues", body | {"spec": {"namespaceSelector": {}}})
    assert created["status"]["conditions"][0]["type"] == "Active"
    with pytest.raises(KubeError) as exists:
        client.kueue_create("clusterqueues", body)
    assert (exists.value.code, exists.value.reason) == (409, "AlreadyExists")
    # A write to the object leaves its status alone (the status subresource).
    patched = client.kueue_patch("clusterqueues", "", "q", {"spec": {"cohort": "c"}, "status": {"pendingWorkloads": 9}})
    assert patched["status"]["pendingWorkloads"] == 0
    assert patched["metadata"]["generation"] == 2
    # borrowingLimit needs a cohort (Kueue's CEL rule); a strategic merge patch is not for custom resources.
    group = {
        "coveredResources": ["cpu"],
        "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"}]}],
    }
    with pytest.raises(KubeError) as invalid:
        client.kueue_patch("clusterqueues", "", "q", {"spec": {"cohort": None, "resourceGroups": [group]}})
    assert invalid.value.code == 422
    assert "borrowingLimit must be nil when cohort is empty" in str(invalid.value)
    call = client.custom.patch_cluster_custom_object
    with pytest.raises(KubeError) as strategic:
        client._json(
            call,
            "kueue.x-k8s.io",
            "v1beta1",
            "clusterqueues",
            "q",
            {},
            _content_type="application/strategic-merge-patch+json",
        )
    assert strategic.value.code == 415
    # A LocalQueue's clusterQueue cannot change.
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta1",
        "kind": "LocalQueue",
        "metadata": {"name": "l", "namespace": NAMESPACE},
    }
    client.kueue_create("localqueues", local | {"spec": {"clusterQueue": "q"}})
    with pytest.raises(KubeError, match="field is immutable"):
        client.kueue_patch("localqueues", NAMESPACE, "l", {"spec": {"clusterQueue": "other"}})
    assert [o["metadata"]["name"] for o in client.kueue_list("localqueues", "")] == ["l"]
    assert client.kueue_delete("localqueues", NAMESPACE, "l")
    assert not client.kueue_delete("localqueues", NAMESPACE, "l")

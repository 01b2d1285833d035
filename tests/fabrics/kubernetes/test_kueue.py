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


def site(
    *teams: Team, departments: tuple[Department, ...] = (), gpu: GpuResource = H100, flavor: str = "h100", **more: Any
) -> Site:
    return Site("7", "k8s", flavor, gpu, CAPACITY, teams, departments, **more)


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
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ClusterQueue",
        "metadata": {"name": "k8s-vision", "labels": LABELS | {"gridlane.io/team": "vision"}},
        "spec": {
            "cohortName": "k8s",
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
            "fairSharing": {"weight": "1"},
        },
    }
    assert by_name(rendered.objects, "LocalQueue", "gl-vision") == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "gl-vision", "namespace": "gridlane", "labels": LABELS | {"gridlane.io/team": "vision"}},
        "spec": {"clusterQueue": "k8s-vision"},
    }
    assert by_name(rendered.objects, "ResourceFlavor", "h100") == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "ResourceFlavor",
        "metadata": {"name": "h100", "labels": LABELS},
        "spec": {},
    }
    # What nobody reserves (16 - 2 GPUs, 64 - 8 CPUs, 512 - 64 GiB) is the root cohort's own quota.
    root = by_name(rendered.objects, "Cohort", "k8s")
    assert "parentName" not in root["spec"]
    assert resources(root) == [
        {"name": "cpu", "nominalQuota": "56"},
        {"name": "memory", "nominalQuota": "448Gi"},
        {"name": "nvidia.com/gpu", "nominalQuota": 14},
    ]
    assert [o["kind"] for o in rendered.objects] == ["ResourceFlavor", "Cohort", "ClusterQueue", "LocalQueue"]
    assert rendered.notes == []


def test_under_v1beta1_a_lending_cluster_queue_holds_what_the_cohort_may_borrow() -> None:
    rendered = render(site(team("vision", 2000, limit=4000), version="v1beta1"))
    assert {o["apiVersion"] for o in rendered.objects} == {"kueue.x-k8s.io/v1beta1"}
    assert by_name(rendered.objects, "ClusterQueue", "k8s-vision")["spec"]["cohort"] == "k8s"
    assert not [o for o in rendered.objects if o["kind"] == "Cohort"]
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
    assert by_name(rendered.objects, "ClusterQueue", "k8s-vision")["spec"]["cohortName"] == "research"
    cohort = by_name(rendered.objects, "Cohort", "research")
    assert cohort["spec"]["parentName"] == "k8s"
    # Its own 6 less the teams' 3; it may borrow from the root what its limit of 8 leaves beyond 3 + 3.
    assert resources(cohort)[2] == {"name": "nvidia.com/gpu", "nominalQuota": 3, "borrowingLimit": 2}
    assert cohort["spec"]["fairSharing"] == {"weight": "1"}
    # The root holds what nobody reserves: 16 less the department's 6.
    assert resources(by_name(rendered.objects, "Cohort", "k8s"))[2] == {"name": "nvidia.com/gpu", "nominalQuota": 10}
    assert {o["metadata"]["name"] for o in rendered.objects if o["kind"] == "ClusterQueue"} == {"k8s-vision", "k8s-nlp"}
    # v1beta1 instead: a lending queue with its own 6 less the teams' 3, plus the 10 nobody reserves, held to 8 - 3.
    old = render(site(team("vision", 2000, 4000, "research"), team("nlp", 1000, None, "research"),
                      departments=(research,), version="v1beta1"))  # fmt: skip
    assert resources(by_name(old.objects, "ClusterQueue", "k8s-research"))[2] == {"name": "nvidia.com/gpu",
                                                                                  "nominalQuota": 5}  # fmt: skip


def test_weights_priorities_and_topology_are_rendered() -> None:
    vision = Team("vision", "research", Resources(2000, 0, 0), namespaces=("gl-vision",), weight=2.5)
    research = Department("research", weight=3)
    rendered = render(
        site(vision, departments=(research,), node_labels={"gpu": "h100"}, priorities=(("high", 1000),),
             topology=("example.com/block", "example.com/rack", "kubernetes.io/hostname"))
    )  # fmt: skip
    assert by_name(rendered.objects, "ClusterQueue", "k8s-vision")["spec"]["fairSharing"] == {"weight": "2.5"}
    assert by_name(rendered.objects, "Cohort", "research")["spec"]["fairSharing"] == {"weight": "3"}
    assert by_name(rendered.objects, "WorkloadPriorityClass", "high") == {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass",
        "metadata": {"name": "high", "labels": LABELS},
        "value": 1000,
        "description": "Gridlane priority high",
    }
    assert by_name(rendered.objects, "Topology", "k8s")["spec"] == {
        "levels": [
            {"nodeLabel": "example.com/block"},
            {"nodeLabel": "example.com/rack"},
            {"nodeLabel": "kubernetes.io/hostname"},
        ]
    }
    assert by_name(rendered.objects, "ResourceFlavor", "h100")["spec"] == {"nodeLabels": {"gpu": "h100"},
                                                                          "topologyName": "k8s"}  # fmt: skip


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
        "ClusterQueue k8s-vision",
        "Cohort k8s",
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
    assert [c.method for c in double.calls()] == ["GET"] * 6  # one LIST per kind, discovery done once


def test_a_quota_change_patches_only_that_cluster_queue(double: ApiDouble, owned: KubernetesFabric) -> None:
    owned.reconcile_kueue("7", [team("vision", 2000, 4000), team("nlp", 1000, 2000)])
    nlp_version = cq(double, "k8s-nlp")["metadata"]["resourceVersion"]
    double.forget_calls()
    report = owned.reconcile_kueue("7", [team("vision", 3000, 4000), team("nlp", 1000, 2000)])
    # vision's reservation grew; the fabric's unreserved pool shrank with it.
    assert sorted(report.updated) == ["ClusterQueue k8s-vision", "Cohort k8s"]
    assert {d.cause for d in report.differences} == {GRIDLANE}
    assert report.drifted == []
    assert resources(cq(double, "k8s-vision"))[2] == {"name": "nvidia.com/gpu", "nominalQuota": 3, "borrowingLimit": 1}
    assert cq(double, "k8s-vision")["metadata"]["generation"] == 2
    assert cq(double, "k8s-nlp")["metadata"]["resourceVersion"] == nlp_version
    assert {c.path.rsplit("/", 2)[-2] + "/" + c.path.rsplit("/", 1)[-1] for c in double.calls("PATCH")} == {
        "cohorts/k8s",
        "clusterqueues/k8s-vision",
    }


def test_a_hand_edit_is_reported_as_drift_and_reverted(double: ApiDouble, owned: KubernetesFabric) -> None:
    owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    edited = cq(double, "k8s-vision")
    edited["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2]["nominalQuota"] = 8
    edited["spec"]["cohortName"] = "elsewhere"
    with double.store.lock:
        double.store.get(double_kind("clusterqueues"), "", "k8s-vision")["spec"] = edited["spec"]  # type: ignore[index]
    report = owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    assert report.drifted == ["ClusterQueue k8s-vision"]
    assert {(d.field, d.cluster, d.gridlane, d.cause) for d in report.drift if d.field == "spec.cohortName"} == {
        ("spec.cohortName", "elsewhere", "k8s", EDITED)
    }
    assert any(d.field == "spec.resourceGroups" for d in report.drift)
    assert cq(double, "k8s-vision")["spec"]["cohortName"] == "k8s"
    assert resources(cq(double, "k8s-vision"))[2]["nominalQuota"] == 2


def test_an_object_made_by_hand_with_gridlanes_labels_is_drift(double: ApiDouble, owned: KubernetesFabric) -> None:
    owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    body = {"metadata": {"name": "rogue", "labels": LABELS}, "spec": {"cohortName": "k8s", "resourceGroups": []}}
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
    theirs = {"metadata": {"name": "k8s-vision"}, "spec": {"cohortName": "theirs", "resourceGroups": []}}
    other = {"metadata": {"name": "batch", "labels": {"team": "ops"}}, "spec": {"resourceGroups": []}}
    with double.store.lock:
        double.store.create(double_kind("clusterqueues"), "", theirs)
        double.store.create(double_kind("clusterqueues"), "", other)
    report = owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
    assert report.not_ours == ["ClusterQueue k8s-vision"]
    assert report.drifted == ["ClusterQueue k8s-vision"]
    assert cq(double, "k8s-vision")["spec"]["cohortName"] == "theirs"
    assert cq(double, "batch")["metadata"]["labels"] == {"team": "ops"}


def test_a_department_makes_a_cohort_in_the_cluster(double: ApiDouble, owned: KubernetesFabric) -> None:
    research = Department("research", Resources(4000, 0, 0), Limits(gpus_milli=8000))
    report = owned.reconcile_kueue("7", [team("vision", 2000, 4000, "research")], [research])
    assert "Cohort research" in report.created
    assert cq(double, "k8s-vision")["spec"]["cohortName"] == "research"
    cohort = double.get("cohorts", "", "research")
    assert cohort is not None
    assert cohort["spec"]["parentName"] == "k8s"


def double_kind(name: str) -> Any:
    from tests.k8s_double.objects import BY_NAME

    return BY_NAME[name]


def test_the_double_serves_kueues_kinds_as_a_cluster_does(double: ApiDouble, fabric: KubernetesFabric) -> None:
    from fabrics.kubernetes.client import KubeError

    client = fabric.client
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"}}
    created = client.kueue_create("clusterqueues", body | {"spec": {"namespaceSelector": {}}})
    assert created["status"]["conditions"][0]["type"] == "Active"
    with pytest.raises(KubeError) as exists:
        client.kueue_create("clusterqueues", body)
    assert (exists.value.code, exists.value.reason) == (409, "AlreadyExists")
    # A write to the object leaves its status alone (the status subresource).
    patched = client.kueue_patch(
        "clusterqueues", "", "q", {"spec": {"cohortName": "c"}, "status": {"pendingWorkloads": 9}}
    )
    assert patched["status"]["pendingWorkloads"] == 0
    assert patched["metadata"]["generation"] == 2
    # borrowingLimit needs a cohort (Kueue's CEL rule); a strategic merge patch is not for custom resources.
    group = {
        "coveredResources": ["cpu"],
        "flavors": [{"name": "f", "resources": [{"name": "cpu", "nominalQuota": "1", "borrowingLimit": "1"}]}],
    }
    with pytest.raises(KubeError) as invalid:
        client.kueue_patch("clusterqueues", "", "q", {"spec": {"cohortName": None, "resourceGroups": [group]}})
    assert invalid.value.code == 422
    assert "borrowingLimit must be nil when cohort is empty" in str(invalid.value)
    call = client.custom.patch_cluster_custom_object
    with pytest.raises(KubeError) as strategic:
        client._json(
            call,
            "kueue.x-k8s.io",
            "v1beta2",
            "clusterqueues",
            "q",
            {},
            _content_type="application/strategic-merge-patch+json",
        )
    assert strategic.value.code == 415
    # A LocalQueue's clusterQueue cannot change.
    local = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "LocalQueue",
        "metadata": {"name": "l", "namespace": NAMESPACE},
    }
    client.kueue_create("localqueues", local | {"spec": {"clusterQueue": "q"}})
    with pytest.raises(KubeError, match="field is immutable"):
        client.kueue_patch("localqueues", NAMESPACE, "l", {"spec": {"clusterQueue": "other"}})
    assert [o["metadata"]["name"] for o in client.kueue_list("localqueues", "")] == ["l"]
    assert client.kueue_delete("localqueues", NAMESPACE, "l")
    assert not client.kueue_delete("localqueues", NAMESPACE, "l")


# -- the Kueue API the cluster serves, read from discovery -------------------------------------------------------


@pytest.mark.parametrize(
    ("release", "version", "kinds"),
    [
        ("v0.19", "v1beta2", {"ResourceFlavor", "WorkloadPriorityClass", "Cohort", "ClusterQueue", "LocalQueue"}),
        ("v0.20", "v1beta2", {"ResourceFlavor", "WorkloadPriorityClass", "Cohort", "ClusterQueue", "LocalQueue"}),
        ("v1beta1-only", "v1beta1", {"ResourceFlavor", "WorkloadPriorityClass", "ClusterQueue", "LocalQueue"}),
    ],
)
def test_every_kueue_object_is_accepted_in_the_version_the_cluster_serves(
    tmp_path: Any, release: str, version: str, kinds: set[str]
) -> None:
    research = Department("research", Resources(4000, 0, 0), Limits(gpus_milli=8000), weight=2)
    teams = [team("vision", 2000, 4000, "research"), team("fraud", 1000, 2000)]
    with ApiDouble(namespaces=(NAMESPACE,), kueue=release) as double:
        settings = {"kubeconfig": str(double.kubeconfig(tmp_path / "k", NAMESPACE)), "gpu_flavor": "h100"}
        owned = connect(settings | {"kueue_owned": True, "kueue_priorities": {"high": 1000, "low": 10}})
        report = owned.reconcile_kueue("7", teams, [research])
        assert owned.client.kueue_version == version
        assert {name.split()[0] for name in report.created} == kinds
        assert report.not_ours == []
        paths = {c.path for c in double.calls("POST")}
        assert all(f"/apis/kueue.x-k8s.io/{version}/" in p for p in paths)
        assert all("fieldValidation=Strict" in str(c.query) or c.query.get("fieldValidation") == "Strict"
                   for c in double.calls("POST"))  # fmt: skip
        again = owned.reconcile_kueue("7", teams, [research])
        assert (again.created, again.updated, again.deleted, again.differences) == ([], [], [], [])


def test_a_cluster_without_kueue_keeps_working(tmp_path: Any) -> None:
    with ApiDouble(namespaces=(NAMESPACE,), kueue="none") as double:
        settings = {"kubeconfig": str(double.kubeconfig(tmp_path / "k", NAMESPACE)), "gpu_flavor": "h100"}
        owned = connect(settings | {"kueue_owned": True})
        report = owned.reconcile_kueue("7", [team("vision", 2000, 4000)])
        assert report.created == []
        assert "serves no Kueue API" in report.notes[0]
        assert not double.calls("POST")


def test_the_double_refuses_what_kueues_v1beta2_schema_refuses(double: ApiDouble, fabric: KubernetesFabric) -> None:
    from fabrics.kubernetes.client import KubeError

    client = fabric.client
    base = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "q"}}
    cases = [
        ({"cohort": "old-name"}, 400, 'unknown field "spec.cohort"'),  # v1beta1's name, strict
        ({"cohortName": 7}, 422, "spec.cohortName in body must be of type string"),
        ({"queueingStrategy": "Random"}, 422, 'Unsupported value: "Random"'),
        ({"cohortName": "Not_A_Name"}, 422, "spec.cohortName in body should match"),
        ({"resourceGroups": [{"coveredResources": ["cpu"]}]}, 422, "spec.resourceGroups[0].flavors: Required value"),
    ]
    for spec, code, words in cases:
        with pytest.raises(KubeError) as refused:
            client.kueue_create("clusterqueues", base | {"spec": spec})
        assert refused.value.code == code, spec
        assert words in str(refused.value), spec
    topology = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology", "metadata": {"name": "t"}}
    hostname_first = {"levels": [{"nodeLabel": "kubernetes.io/hostname"}, {"nodeLabel": "example.com/rack"}]}
    with pytest.raises(KubeError, match="can only be used at the lowest level"):
        client.kueue_create("topologies", topology | {"spec": hostname_first})
    with pytest.raises(KubeError, match=r"spec\.levels: Required value"):
        client.kueue_create("topologies", topology | {"spec": {}})

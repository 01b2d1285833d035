"""Kueue in step, end to end: the worker's step reconciles a Kueue-owned fabric against the API double, a Quota
change makes the team's ClusterQueue follow at the next step, and a hand edit shows on IT's fabric page."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, KueueSync, Quota
from portal.worker import kueue
from portal.worker.connections import forget_all
from tests.k8s_double import ApiDouble
from tests.k8s_double.objects import BY_NAME


@pytest.fixture
def double() -> Iterator[ApiDouble]:
    with ApiDouble(namespaces=("gridlane",)) as api:
        yield api
    forget_all()


@pytest.fixture
def k8s(cast: dict[str, Any], double: ApiDouble, tmp_path: Path) -> Fabric:
    kubeconfig = double.kubeconfig(tmp_path / "kubeconfig", namespace="gridlane")
    fabric = Fabric.objects.create(
        name="k8s", kind="kubernetes", gpu_flavor="h100", gpus_milli=16000, cpus_milli=64000, memory_mib=512 * 1024,
        settings={"kubeconfig": str(kubeconfig), "kueue_owned": True},
    )  # fmt: skip
    optics = ResourceGroup.objects.create(slug="optics", name="Optics")
    Quota.objects.create(group=optics, fabric=fabric, gpu_reservation_milli=2000, gpu_limit_milli=4000)
    return fabric


def gpu_quota(double: ApiDouble, name: str) -> dict[str, Any]:
    queue = double.get("clusterqueues", "", name)
    assert queue is not None
    return dict(queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"][2])


def test_a_quota_change_makes_the_cluster_queue_follow(double: ApiDouble, k8s: Fabric) -> None:
    now = timezone.now()
    assert kueue.step(now) == 1
    assert gpu_quota(double, "k8s-optics") == {"name": "nvidia.com/gpu", "nominalQuota": 2, "borrowingLimit": 2}
    local = double.get("localqueues", "gridlane", "gl-optics")
    assert local is not None
    sync = KueueSync.objects.get(fabric=k8s)
    assert (sync.due, sync.error, sync.drifted) == (False, "", [])
    assert kueue.step(now + timedelta(seconds=1)) == 0  # nothing changed, not yet time

    quota = Quota.objects.get(group__slug="optics", fabric=k8s)
    quota.gpu_reservation_milli = 3000
    quota.save()  # the signal marks the fabric due
    assert KueueSync.objects.get(fabric=k8s).due
    assert kueue.step(now + timedelta(seconds=2)) == 1
    assert gpu_quota(double, "k8s-optics") == {"name": "nvidia.com/gpu", "nominalQuota": 3, "borrowingLimit": 1}
    assert KueueSync.objects.get(fabric=k8s).drifted == []


def test_the_worker_reconciles_every_period_and_never_raises(double: ApiDouble, k8s: Fabric, settings: Any) -> None:
    now = timezone.now()
    kueue.step(now)
    double.fail("GET", r"/clusterqueues$", 503)
    assert kueue.step(now + timedelta(seconds=settings.GRIDLANE_KUEUE_SYNC_SECONDS)) == 1
    assert "503" in KueueSync.objects.get(fabric=k8s).error


def test_the_it_fabric_page_shows_drift(client: Any, it_admin: Any, double: ApiDouble, k8s: Fabric) -> None:
    now = timezone.now()
    kueue.step(now)
    client.force_login(it_admin)
    assert "in step" in client.get("/it/fabrics/").content.decode()
    with double.store.lock:
        queue = double.store.get(BY_NAME["clusterqueues"], "", "k8s-optics")
        assert queue is not None
        queue["spec"]["cohortName"] = "by-hand"
    KueueSync.objects.filter(fabric=k8s).update(due=True)
    kueue.step(now + timedelta(seconds=1))
    page = client.get("/it/fabrics/").content.decode()
    assert "1 drifted" in page
    assert "ClusterQueue k8s-optics: spec.cohortName was by-hand, Gridlane's k8s (changed in the cluster)" in page
    queue = double.get("clusterqueues", "", "k8s-optics")
    assert queue is not None
    assert queue["spec"]["cohortName"] == "k8s"


@pytest.fixture
def teams_k8s(cast: dict[str, Any], double: ApiDouble, tmp_path: Path) -> Fabric:
    """A fabric with a namespace per team and no Kueue ownership."""
    kubeconfig = double.kubeconfig(tmp_path / "kubeconfig", namespace="gridlane")
    fabric = Fabric.objects.create(
        name="k8s", kind="kubernetes", gpu_flavor="h100", gpus_milli=16000, cpus_milli=64000, memory_mib=512 * 1024,
        settings={"kubeconfig": str(kubeconfig), "namespace_pattern": "gl-{team}"},
    )  # fmt: skip
    optics = ResourceGroup.objects.create(slug="optics", name="Optics")
    Quota.objects.create(group=optics, fabric=fabric, gpu_reservation_milli=2000, gpu_limit_milli=4000)
    return fabric


def hard(double: ApiDouble) -> dict[str, str]:
    quota = double.get("resourcequotas", "gl-optics", "gridlane")
    assert quota is not None
    return dict(quota["spec"]["hard"])


def test_namespaces_and_quotas_without_kueue_follow_at_the_same_period(
    double: ApiDouble, teams_k8s: Fabric, settings: Any
) -> None:
    now = timezone.now()
    assert kueue.step(now) == 1
    assert hard(double) == {"requests.nvidia.com/gpu": "4"}
    namespace = double.get("namespaces", "", "gl-optics")
    assert namespace is not None
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert double.objects("clusterqueues", "") == []  # no Kueue objects on a fabric Gridlane does not own Kueue on
    sync = KueueSync.objects.get(fabric=teams_k8s)
    assert (sync.error, sync.report["tenancy"]) == (
        "",
        ["Namespace gl-optics", "ServiceAccount gridlane-job", "ResourceQuota gridlane"],
    )
    assert kueue.step(now + timedelta(seconds=1)) == 0  # nothing changed, not yet time

    quota = Quota.objects.get(group__slug="optics", fabric=teams_k8s)
    quota.gpu_limit_milli = 6000
    quota.save()  # the signal marks the fabric due
    assert kueue.step(now + timedelta(seconds=2)) == 1
    assert hard(double) == {"requests.nvidia.com/gpu": "6"}

    # A label taken off by hand is put back at the next period.
    with double.store.lock:
        held = double.store.get(BY_NAME["namespaces"], "", "gl-optics")
        assert held is not None
        held["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] = "privileged"
    assert kueue.step(now + timedelta(seconds=3)) == 0
    assert kueue.step(now + timedelta(seconds=2 + settings.GRIDLANE_KUEUE_SYNC_SECONDS)) == 1
    namespace = double.get("namespaces", "", "gl-optics")
    assert namespace is not None
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert KueueSync.objects.get(fabric=teams_k8s).report == {"tenancy": []}


def test_a_fabric_with_one_namespace_and_no_kueue_is_left_alone(
    double: ApiDouble, cast: dict[str, Any], tmp_path: Path
) -> None:
    kubeconfig = double.kubeconfig(tmp_path / "kubeconfig", namespace="gridlane")
    fabric = Fabric.objects.create(
        name="k8s", kind="kubernetes", gpu_flavor="h100", gpus_milli=16000, cpus_milli=64000, memory_mib=512 * 1024,
        settings={"kubeconfig": str(kubeconfig)},
    )  # fmt: skip
    optics = ResourceGroup.objects.create(slug="optics", name="Optics")
    Quota.objects.create(group=optics, fabric=fabric, gpu_reservation_milli=2000, gpu_limit_milli=4000)
    assert kueue.step(timezone.now()) == 0
    assert double.get("namespaces", "", "gl-optics") is None
    assert double.objects("resourcequotas") == []

"""A namespace per team: made and labelled by Gridlane, each team's Jobs in its own, with its LocalQueue, its quota
and a ServiceAccount without API rights; a fabric without a pattern keeps its one namespace."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import JobState, Resources
from fabrics.kubernetes.fabric import KubernetesFabric
from fabrics.kubernetes.kueue import Limits, Team
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.k8s_double import ApiDouble


@pytest.fixture
def double() -> Iterator[ApiDouble]:
    with ApiDouble(namespaces=(NAMESPACE,)) as api:
        yield api


def teams_fabric(double: ApiDouble, tmp_path: Path, **more: Any) -> KubernetesFabric:
    kubeconfig = double.kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    return connect({"kubeconfig": str(kubeconfig), "gpu_flavor": "h100", "namespace_pattern": "gl-{team}"} | more)


def test_each_teams_jobs_run_in_its_own_namespace_made_and_labelled_by_gridlane(
    double: ApiDouble, tmp_path: Path
) -> None:
    fabric = teams_fabric(double, tmp_path)
    vision = fabric.submit(spec("echo hi", group="vision"))
    fraud = fabric.submit(spec("sleep 30", group="fraud"))
    assert double.get("jobs", "gl-vision", vision) is not None
    assert double.get("jobs", "gl-fraud", fraud) is not None
    namespace = double.get("namespaces", "", "gl-vision")
    assert namespace is not None
    assert (
        namespace["metadata"]["labels"].items()
        >= {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
            "gridlane.io/team": "vision",
            "app.kubernetes.io/managed-by": "gridlane",
        }.items()
    )
    account = double.get("serviceaccounts", "gl-vision", "gridlane-job")
    assert account is not None
    assert account["automountServiceAccountToken"] is False
    assert double.objects("rolebindings", "gl-vision") == []  # no API rights
    pod = double.get("jobs", "gl-vision", vision)["spec"]["template"]["spec"]  # type: ignore[index]
    assert (pod["serviceAccountName"], pod["automountServiceAccountToken"]) == ("gridlane-job", False)
    # Found, polled, cancelled across namespaces, by a fresh process that has never seen them.
    again = teams_fabric(double, tmp_path)
    assert set(again.find_many([spec().workload_id])) == set()
    wait_until(lambda: again.poll([vision])[vision].state is JobState.SUCCEEDED, timeout=20)
    again.cancel(fraud)
    assert double.get("jobs", "gl-fraud", fraud) is None


def test_the_reconciler_keeps_each_teams_quota_local_queue_and_pod_security_level(
    double: ApiDouble, tmp_path: Path
) -> None:
    fabric = teams_fabric(double, tmp_path, kueue_owned=True, pod_security="baseline")
    vision = Team("vision", None, Resources(2000, 0, 0), Limits(gpus_milli=4000, cpus_milli=16000, memory_mib=65536))
    fabric.reconcile_kueue("7", [vision, Team("fraud", None)])
    quota = double.get("resourcequotas", "gl-vision", "gridlane")
    assert quota is not None
    assert quota["spec"]["hard"] == {
        "requests.nvidia.com/gpu": "4",
        "requests.cpu": "16000m",
        "requests.memory": "65536Mi",
    }
    assert double.get("resourcequotas", "gl-fraud", "gridlane") is None  # no limit, no quota
    local = double.get("localqueues", "gl-vision", "gl-vision")
    assert local is not None
    assert local["spec"]["clusterQueue"] == "k8s-vision"
    namespace = double.get("namespaces", "", "gl-fraud")
    assert namespace is not None
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    # Someone loosens the level by hand: the next run puts it back; a changed limit changes the quota.
    with double.store.lock:
        from tests.k8s_double.objects import BY_NAME

        double.store.get(BY_NAME["namespaces"], "", "gl-fraud")["metadata"]["labels"][  # type: ignore[index]
            "pod-security.kubernetes.io/enforce"
        ] = "privileged"
    smaller = Team("vision", None, Resources(2000, 0, 0), Limits(gpus_milli=3000))
    fabric.reconcile_kueue("7", [smaller, Team("fraud", None)])
    assert (
        double.get("namespaces", "", "gl-fraud")["metadata"]["labels"][  # type: ignore[index]
            "pod-security.kubernetes.io/enforce"
        ]
        == "baseline"
    )
    assert double.get("resourcequotas", "gl-vision", "gridlane")["spec"]["hard"] == {  # type: ignore[index]
        "requests.nvidia.com/gpu": "3"
    }


def test_a_fabric_without_a_pattern_keeps_its_one_namespace(fabric: KubernetesFabric, double: ApiDouble) -> None:
    name = fabric.submit(spec(group="vision"))
    assert double.get("jobs", NAMESPACE, name) is not None
    assert double.get("namespaces", "", "gl-vision") is None
    assert "serviceAccountName" not in double.get("jobs", NAMESPACE, name)["spec"]["template"]["spec"]  # type: ignore[index]


def test_restricted_pod_security_admits_gridlanes_pods_and_refuses_a_privileged_one(
    double: ApiDouble, tmp_path: Path
) -> None:
    fabric = teams_fabric(double, tmp_path)
    # A target that lets privileged containers through Gridlane's policy: the namespace's Pod Security still refuses.
    allow = "metadata:\n  annotations:\n    gridlane.io/allow: privileged\nspec:\n  containers: [{name: main}]\n"
    manifest = (
        '{"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "p"}, "spec": {"template": {"spec": '
        '{"restartPolicy": "Never", "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"], '
        '"securityContext": {"privileged": true}}]}}}}'
    )
    privileged = fabric.submit(spec(script=manifest, template=allow, group="vision"))
    plain = fabric.submit(spec("echo ok", group="vision"))
    wait_until(lambda: fabric.poll([plain])[plain].state is JobState.SUCCEEDED, timeout=20)
    wait_until(lambda: privileged in double.cluster.failed_creates, timeout=20)
    refusal = double.cluster.failed_creates[privileged]
    assert 'violates PodSecurity "restricted:latest": privileged (container "main"' in refusal
    assert double.objects("pods", "gl-vision", f"job-name={privileged}") == []


def test_jobs_started_before_the_switch_are_still_followed_and_cancelled(double: ApiDouble, tmp_path: Path) -> None:
    kubeconfig = double.kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)
    before = connect({"kubeconfig": str(kubeconfig), "gpu_flavor": "h100"})
    old = before.submit(spec("sleep 30", group="vision"))
    after = teams_fabric(double, tmp_path)  # IT set the pattern: a new connection, new work in gl-vision
    new = after.submit(spec("sleep 30", group="vision"))
    assert double.get("jobs", NAMESPACE, old) is not None
    assert double.get("jobs", "gl-vision", new) is not None
    wait_until(lambda: {s.state for s in after.poll([old, new]).values()} == {JobState.RUNNING}, timeout=20)
    after.cancel(old)
    assert double.get("jobs", NAMESPACE, old) is None
    assert double.get("jobs", "gl-vision", new) is not None

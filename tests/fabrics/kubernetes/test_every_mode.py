"""Every object Gridlane writes, in every mode, is accepted by the double with validation on (the client's models,
Kueue's v0.19.2 CRDs, strict field validation, restricted Pod Security), on a cluster serving Kueue v1beta2 only
(Kueue 0.20) and on one still serving v1beta1 only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fabrics.base import JobState, Resources
from fabrics.kubernetes.kueue import Department, Limits, Team
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.k8s_double import ApiDouble, node

LEVELS = ["example.com/rack", "kubernetes.io/hostname"]
GANG = "metadata:\n  annotations:\n    gridlane.io/topology: 'required: example.com/rack'\n"
GANG += "spec:\n  containers: [{name: main}]\n"


@pytest.mark.parametrize("release", ["v0.20", "v1beta1-only"])
def test_every_mode_is_accepted(tmp_path: Path, release: str) -> None:
    nodes = [node(f"gpu-node-{i}", labels={"gpu": "h100", "example.com/rack": "r1"}) for i in (1, 2)]
    with ApiDouble(namespaces=(NAMESPACE,), kueue=release, nodes=nodes) as double:
        settings = {
            "kubeconfig": str(double.kubeconfig(tmp_path / "k", NAMESPACE)), "gpu_flavor": "h100", "kueue_owned": True,
            "namespace_pattern": "gl-{team}", "home_storage_class": "standard", "topology_levels": LEVELS,
            "node_selector": "gpu=h100", "kueue_priorities": {"high": 1000},
            "posix_ids": {"alice": {"uid": 2001, "gid": 2001}},
        }  # fmt: skip
        fabric = connect(settings)
        vision = Team("vision", "research", Resources(2000, 4000, 8192), Limits(gpus_milli=8000), weight=2)
        report = fabric.reconcile_kueue("7", [vision, Team("fraud", None)], [Department("research")])
        assert report.not_ours == []
        assert "LocalQueue gl-vision/gl-vision" in report.created
        with double.store.lock:
            from tests.k8s_double.objects import BY_NAME

            labels = {"gridlane.io/team": "vision"}
            double.store.create(BY_NAME["secrets"], "gl-vision", {"metadata": {"name": "token", "labels": labels}})
        native = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {"name": "mine"},
            "spec": {
                "template": {
                    "spec": {
                        "restartPolicy": "Never",
                        "containers": [
                            {
                                "name": "main",
                                "image": "busybox:1.36",
                                "command": ["true"],
                                "envFrom": [{"secretRef": {"name": "token"}}],
                                "resources": {"limits": {"cpu": 1, "memory": "1Gi"}},
                            }
                        ],
                    }
                }
            },
        }
        jobs = [
            spec("echo train", run_as="alice"),
            spec("echo gang", nodes=2, template=GANG, run_as="alice"),
            spec("", kind="notebook", run_as="alice", image="jupyter/base-notebook:2024-06-01"),
            spec(script=json.dumps(native), run_as="alice"),
        ]  # fmt: skip
        names = [fabric.submit(job) for job in jobs]
        for name in names:
            double.kueue_admit("gl-vision", name)  # what Kueue does once the Workload fits
        wait_until(lambda: all(fabric.poll([n])[n].state in (JobState.RUNNING, JobState.SUCCEEDED) for n in names),
                   timeout=30)  # fmt: skip
        assert double.cluster.failed_creates == {}  # no pod refused by restricted Pod Security
        assert len(double.objects("workloads", "gl-vision")) == len(names)
        assert double.get("persistentvolumeclaims", "gl-vision", "gl-home-alice") is not None

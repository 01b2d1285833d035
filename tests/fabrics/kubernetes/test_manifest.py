"""A user's own Job manifest: its request, what the queue refuses in it, and the Job created on the double."""

from __future__ import annotations

import json

import pytest

from fabrics.base import Resources
from fabrics.kubernetes import manifest
from fabrics.kubernetes.manifest import ManifestError
from portal.worker import connections, tasks
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until
from tests.fabrics.kubernetes import test_worker
from tests.fabrics.kubernetes.conftest import NAMESPACE

k8s = test_worker.k8s  # the fabric on the double and its three queues (k8s-train, k8s-notebooks, k8s-kueue)

# The write-up's Kueue-labelled PyTorch Job, scaled down: two indexed pods, each with 2 GPUs.
KUEUE_JOB = """\
apiVersion: batch/v1
kind: Job
metadata:
  name: pytorch-multinode
  labels:
    kueue.x-k8s.io/queue-name: user-queue
spec:
  suspend: true
  completionMode: Indexed
  completions: 2
  parallelism: 2
  template:
    spec:
      restartPolicy: Never
      containers:
      - name: trainer
        image: registry.example.org/ml/pytorch:24.05
        command: ["/bin/sh", "-c"]
        args: ["echo rank $JOB_COMPLETION_INDEX of $WORLD; echo id=$GRIDLANE_WORKLOAD_ID"]
        env:
        - name: WORLD
          value: "2"
        resources:
          requests: {cpu: "3", memory: 8Gi, nvidia.com/gpu: 2}
          limits: {memory: 8Gi, nvidia.com/gpu: 2}
        volumeMounts:
        - {name: scratch, mountPath: /scratch}
      volumes:
      - name: scratch
        emptyDir: {}
"""


def test_the_request_is_per_pod_times_parallelism_and_indexed_completions_are_a_gang():
    read = manifest.read(KUEUE_JOB)
    assert (read.per_pod, read.pods, read.gang, read.gpu_resource) == (
        Resources(2000, 3000, 8192),
        2,
        True,
        "nvidia.com/gpu",
    )
    assert manifest.read(json.dumps(read.job)).per_pod == read.per_pod  # JSON reads the same


def test_mig_slices_and_init_containers_count_as_the_scheduler_counts_them():
    init = "      initContainers:\n      - {name: fetch, image: busybox, resources: {requests: {cpu: 8}}}\n"
    text = KUEUE_JOB.replace("nvidia.com/gpu: 2}", "nvidia.com/mig-1g.10gb: 1}").replace(
        "      volumes:", init + "      volumes:"
    )
    read = manifest.read(text)
    assert (read.per_pod.gpus_milli, read.per_pod.cpus_milli, read.gpu_resource) == (
        1000,
        8000,
        "nvidia.com/mig-1g.10gb",
    )


SCRATCH = "      - name: scratch\n        emptyDir: {}"
NEVER = "      restartPolicy: Never"


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ((SCRATCH, "      - name: h\n        hostPath: {path: /}"), "spec.template.spec.volumes[0].hostPath"),
        ((NEVER, NEVER + "\n      hostNetwork: true"), "spec.template.spec.hostNetwork"),
        (
            ("        resources:", "        securityContext: {privileged: true}\n        resources:"),
            "spec.template.spec.containers[0].securityContext.privileged",
        ),
        (("  name: pytorch-multinode", "  name: x\n  namespace: kube-system"), "metadata.namespace"),
        (("kind: Job", "kind: Pod"), "kind"),
        (('cpu: "3"', "cpu: three"), "spec.template.spec.containers[0].resources.requests.cpu"),
        (("parallelism: 2", "parallelism: 0"), "spec.parallelism"),
    ],
)
def test_what_the_queue_forbids_is_refused_naming_the_field(change, field):
    with pytest.raises(ManifestError) as caught:
        manifest.read(KUEUE_JOB.replace(*change), namespace=NAMESPACE)
    assert caught.value.field == field


def test_text_that_is_no_manifest_is_refused():
    with pytest.raises(ManifestError, match="not valid YAML"):
        manifest.read("kind: [Job")


def post(client, **body):
    data = {"queue": "k8s-kueue", "kind": "training", "manifest": KUEUE_JOB} | body
    return client.post("/api/v1/workloads/", json.dumps(data), content_type="application/json")


def test_a_kueue_labelled_job_runs_as_written_through_the_double_and_reports_its_kueue_state(
    api_as,
    alice,
    k8s,
    double,
):
    response = post(api_as(alice))
    assert response.status_code == 201, response.content
    body = response.json()
    assert (body["name"], body["resources"]) == (
        "pytorch-multinode",
        {"gpus": 2, "cpus": 3, "memory_gb": 8, "nodes": 2},
    )
    workload = Workload.objects.get(pk=body["id"])
    for _ in range(3):
        tasks.cycle()
    workload.refresh_from_db()
    assert workload.state == State.DISPATCHING  # on the cluster, held by Kueue
    (job,) = double.objects("jobs", NAMESPACE)
    assert job["metadata"]["name"] == workload.external_id == f"gl-{workload.run_id}"
    assert job["metadata"]["labels"]["gridlane.io/workload-id"] == str(workload.run_id)
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-vision"  # the queue's, over the user's
    assert job["metadata"]["annotations"]["gridlane.io/manifest-name"] == "pytorch-multinode"
    assert job["spec"]["suspend"] is True
    (container,) = job["spec"]["template"]["spec"]["containers"]
    assert (container["name"], container["image"], container["args"]) == (
        "trainer",
        "registry.example.org/ml/pytorch:24.05",
        ["echo rank $JOB_COMPLETION_INDEX of $WORLD; echo id=$GRIDLANE_WORKLOAD_ID"],
    )
    assert container["resources"]["requests"] == {"cpu": "3", "memory": "8Gi", "nvidia.com/gpu": "2"}
    assert {"name": "WORLD", "value": "2"} in container["env"]
    assert job["spec"]["template"]["spec"]["volumes"] == [{"name": "scratch", "emptyDir": {}}]
    status = connections.fabric_for(k8s).poll([workload.external_id])[workload.external_id]
    assert status.reason.startswith("waiting for Kueue to admit it from LocalQueue team-vision")
    double.kueue_admit(NAMESPACE, workload.external_id)

    def done() -> bool:
        tasks.cycle()
        workload.refresh_from_db()
        return workload.state == State.SUCCEEDED

    wait_until(done, timeout=30, every=0.05)
    assert f"id={workload.run_id}" in workload.log_tail


def test_without_kueue_the_job_is_created_unsuspended_since_gridlane_admitted_it(api_as, alice, k8s, double):
    response = post(api_as(alice), queue="k8s-train")
    assert response.status_code == 201, response.content
    for _ in range(3):
        tasks.cycle()
    (job,) = double.objects("jobs", NAMESPACE)
    assert job["spec"]["suspend"] is False
    assert "kueue.x-k8s.io/queue-name" not in job["metadata"]["labels"]


def test_a_forbidden_field_is_a_400_naming_it_and_a_manifest_needs_a_kubernetes_queue(api_as, alice, k8s):
    bad = KUEUE_JOB.replace(NEVER, NEVER + "\n      hostPID: true")
    response = post(api_as(alice), manifest=bad)
    assert response.status_code == 400
    assert response.json()["errors"]["manifest"] == [
        "spec.template.spec.hostPID: not allowed on this queue (hostPID; IT may allow it on the queue's target)."
    ]
    elsewhere = post(api_as(alice), queue="train")
    assert elsewhere.status_code == 400
    assert (
        "runs no Kubernetes Jobs; queues that take them: k8s-kueue, k8s-train"
        in elsewhere.json()["errors"]["manifest"][0]
    )
    assert not Workload.objects.exists()

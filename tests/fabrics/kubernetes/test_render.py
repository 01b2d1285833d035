"""Rendering is pure: whole manifests compared with golden files (GRIDLANE_UPDATE_GOLDEN=1 rewrites them)."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from fabrics.base import Resources, TemplateError
from fabrics.kubernetes import render
from fabrics.kubernetes.fabric import KubernetesFabric
from fabrics.kubernetes.settings import GpuResource, KubeSettings
from fabrics.registry import fabric_class
from tests.fabrics.kubernetes.conftest import spec

GOLDEN = Path(__file__).parent / "golden"
WORKLOAD = uuid.UUID("0b5e7d1c-2f4a-4c3b-9e8d-7a6b5c4d3e2f")
SETTINGS = KubeSettings.parse({"gpu_flavor": "h100"})

TRAINING_TEMPLATE = """\
metadata:
  labels:
    team-cost-centre: cv-42
spec:
  nodeSelector:
    nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3
  tolerations:
  - key: nvidia.com/gpu
    operator: Exists
    effect: NoSchedule
  containers:
  - name: main
    image: registry.example.org/nvidia/pytorch:24.05-py3
    command: ["/bin/bash", "-lc"]
    env:
    - name: NCCL_DEBUG
      value: WARN
    resources:
      limits:
        rdma/hca: "1"
  - name: metrics
    image: registry.example.org/dcgm-sidecar:3
"""
KUEUE_TEMPLATE = """\
metadata:
  labels:
    kueue.x-k8s.io/queue-name: team-vision
    kueue.x-k8s.io/priority-class: research
spec:
  containers:
  - name: main
    image: registry.example.org/nvidia/pytorch:24.05-py3
"""


def golden(name: str, manifests: render.Manifests) -> None:
    """Compare whole manifests with golden/<name>.yaml (YAML for the reviewer; compared as data)."""
    path = GOLDEN / f"{name}.yaml"
    if os.environ.get("GRIDLANE_UPDATE_GOLDEN") == "1":
        path.write_text(yaml.safe_dump_all(manifests.documents(), sort_keys=False, width=120))
    want = list(yaml.safe_load_all(path.read_text()))
    assert manifests.documents() == want
    record = json.loads(render.to_json(manifests))
    assert (record["items"] if record["kind"] == "List" else [record]) == want


def rendered(settings: KubeSettings = SETTINGS, **overrides: Any) -> render.Manifests:
    fields: dict[str, Any] = {"workload_id": WORKLOAD, "name": "llama ft #3", "image": ""}
    return render.render(spec(**(fields | overrides)), settings, "gridlane")


def test_a_training_run_from_a_queue_template(tmp_path):
    job = rendered(
        command='torchrun train.py --lr 0.1 --note "it\'s $HOME"; echo done',
        template=TRAINING_TEMPLATE,
        per_node=Resources(2000, 16000, 65536),
        runtime_limit_s=4 * 3600,
        env={"WANDB_MODE": "offline", "NCCL_DEBUG": "INFO"},
    )
    golden("training", job)


def test_a_two_node_gang_is_an_indexed_job_with_a_headless_service():
    job = rendered(
        command="torchrun --nnodes=2 --node-rank=$NODE_RANK train.py",
        nodes=2,
        image="registry.example.org/nvidia/pytorch:24.05-py3",
    )
    golden("gang-2-nodes", job)
    assert job.service is not None
    assert job.job["spec"]["template"]["spec"]["subdomain"] == job.service["metadata"]["name"]


def test_a_notebook_runs_jupyter_through_gridlanes_launcher_with_no_service():
    job = rendered(kind="notebook", command="", image="registry.example.org/jupyter/pytorch-notebook:2024-11-04")
    golden("notebook", job)


def test_kueue_mode_labels_the_job_with_the_local_queue_and_creates_it_suspended():
    job = rendered(command="python train.py", template=KUEUE_TEMPLATE)
    golden("kueue", job)
    assert job.job["spec"]["suspend"] is True
    assert "kueue.x-k8s.io/queue-name" not in job.job["spec"]["template"]["metadata"]["labels"]


def test_volcano_mode_sets_the_scheduler_and_a_podgroup_with_min_member():
    settings = KubeSettings.parse({"volcano": True, "volcano_queue": "research"})
    job = rendered(settings, command="python train.py", nodes=2, image="registry.example.org/nvidia/pytorch:24.05-py3")
    golden("volcano", job)
    assert job.podgroup is not None
    assert job.podgroup["spec"]["minMember"] == 2


def test_a_quarter_gpu_on_a_mig_flavor_that_counts_slices_as_quarters_is_one_slice():
    settings = KubeSettings.parse(
        {
            "gpu_flavor": "mig-1g.10gb",
            "gpu_resources": {"mig-1g.10gb": {"resource": "nvidia.com/mig-1g.10gb", "milli_per_unit": 250}},
        }
    )
    job = rendered(settings, command="python infer.py", per_node=Resources(250, 1000, 8192), image="python:3.12")
    golden("mig-quarter-gpu", job)


def test_a_quarter_gpu_on_whole_gpus_is_refused_with_a_clear_message():
    with pytest.raises(TemplateError, match=r"0.25 GPU cannot run here: Kubernetes hands out nvidia.com/gpu as whole"):
        rendered(command="true", per_node=Resources(250, 1000, 1024), image="busybox:1.36")
    with pytest.raises(ValueError, match="whole GPUs"):
        KubernetesFabric.check_request({"gpu_flavor": "h100"}, Resources(250, 1000, 1024))


def test_without_gpu_sharing_a_quarter_gpu_takes_the_whole_gpu_the_scheduler_counted():
    settings = KubeSettings.parse({"gpu_flavor": "h100", "gpu_sharing": False})
    job = rendered(settings, command="true", per_node=Resources(1250, 1000, 1024), image="busybox:1.36", nodes=2)
    container = job.job["spec"]["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "2"
    KubernetesFabric.check_request({"gpu_sharing": False}, Resources(250, 1000, 1024))


def test_a_shared_flavor_takes_multiples_of_its_step_and_refuses_the_rest():
    shared = GpuResource("nvidia.com/gpu.shared", 250)
    assert shared.units(250) == 1
    assert shared.units(1000) == 4
    with pytest.raises(ValueError, match=r"in steps of 0.25 GPU. Ask for a multiple of 0.25"):
        shared.units(100)


def test_mig_flavors_map_to_their_mig_resource_without_being_listed():
    assert KubeSettings.parse({"gpu_flavor": "mig-3g.40gb"}).gpu == GpuResource("nvidia.com/mig-3g.40gb", 1000)
    assert KubeSettings.parse({"gpu_flavor": "a100"}).gpu == GpuResource("nvidia.com/gpu", 1000)


@pytest.mark.parametrize(
    "command",
    ["x'; touch PWNED #", "$(touch PWNED)", "`touch PWNED`", "a\nb", "--help", "{{ .Values.x }}", "*"],
)
def test_the_users_command_is_one_argv_element_never_spliced(command):
    container = rendered(command=command, image="busybox:1.36").job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/sh", "-c"]
    assert container["args"] == [command]


def test_hostile_names_and_owners_become_annotations_and_safe_labels():
    job = rendered(
        command="true",
        name="x\n--- {a: b}",
        owner="evil@example.org",
        group="-team_a-",
        queue="q!",
        image="busybox:1.36",
    )
    meta = job.job["metadata"]
    assert meta["annotations"] == {"gridlane.io/owner": "evil@example.org", "gridlane.io/name": "x\n--- {a: b}"}
    assert meta["labels"]["gridlane.io/group"] == "team_a"
    assert meta["labels"]["gridlane.io/queue"] == "q"
    assert json.loads(render.to_json(job))["metadata"] == meta


def test_the_fabric_records_what_it_would_send_as_json(fabric):
    doc = json.loads(fabric.render(spec("echo hi", workload_id=WORKLOAD)))
    assert doc["metadata"] == {
        "name": f"gl-{WORKLOAD}",
        "namespace": "gridlane",
        "labels": render.labels(spec(workload_id=WORKLOAD)),
        "annotations": {"gridlane.io/owner": "alice", "gridlane.io/name": "probe"},
    }


def test_without_an_image_anywhere_render_says_so():
    with pytest.raises(TemplateError, match="no image"):
        rendered(command="true", image="")


@pytest.mark.parametrize(
    ("template", "message"),
    [
        ("spec: [", "not valid YAML"),
        ("- a\n- b\n", "must be a mapping"),
        ("kind: Deployment\nspec: {containers: [{name: main}]}\n", "describes a pod"),
        ("metadata: {name: mine}\nspec: {containers: [{name: main}]}\n", "Gridlane names the Job"),
        ("spec: {containers: []}\n", "at least one container"),
        ("spec: {containers: [{name: Main}]}\n", "lowercase DNS label"),
        ("spec: {containers: [{name: main, args: [x]}]}\n", "leave out args"),
        ("spec: {containers: [{name: main, command: /bin/sh}]}\n", "list of strings"),
        ("spec: {restartPolicy: OnFailure, containers: [{name: main}]}\n", "restartPolicy"),
        ("spec: {subdomain: x, containers: [{name: main}]}\n", "spec.subdomain"),
        ("metadata: {labels: {gridlane.io/queue: x}}\nspec: {containers: [{name: main}]}\n", "Gridlane's own"),
        ("metadata: {labels: {tier: 3}}\nspec: {containers: [{name: main}]}\n", "quote numbers"),
        ("spec: {containers: [{name: main}]}\nstatus: {}\n", "not status"),
    ],
)
def test_check_template_refuses_what_would_not_work(template, message):
    with pytest.raises(TemplateError, match=message):
        fabric_class("kubernetes").check_template(template)


def test_check_template_accepts_the_examples_and_the_empty_default():
    for template in (
        TRAINING_TEMPLATE,
        KUEUE_TEMPLATE,
        "",
        "apiVersion: v1\nkind: Pod\nspec: {containers: [{name: main}]}",
    ):
        fabric_class("kubernetes").check_template(template)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"namespace": "Not_A_Namespace"}, "not a Kubernetes namespace"),
        ({"kubeconfg": "kubeconfig"}, "unknown Kubernetes setting"),
        ({"gpu_resources": {"h100": "gpu"}}, "extended resource name"),
        ({"gpu_resources": {"x": {"resource": "nvidia.com/gpu", "milli_per_unit": 0}}}, "milli_per_unit"),
        ({"gpu_resources": {"x": {"resource": "nvidia.com/mig-1g.10gb", "milli_per_unit": 142}}}, "divide 1000"),
        ({"gpu_sharing": "no"}, "true or false"),
        ({"notebook_url": "https://nb.example.org/{name}/"}, "unknown Kubernetes setting"),  # the portal's path now
        ({"volcano": "yes"}, "true or false"),
        ({"capacity": "guess"}, "nodes"),
        ({"ttl_seconds_after_finished": -1}, "0 or more"),
    ],
)
def test_check_settings_names_what_is_wrong(settings, message):
    with pytest.raises(ValueError, match=message):
        fabric_class("kubernetes").check_settings(settings)

"""Code and packages on Kubernetes: an init container in the job's image fills an emptyDir the job runs in, created
through the official client against the API double (which validates init containers, mounts and volumes)."""

from __future__ import annotations

import json

import kubernetes
import pytest

from fabrics import travel
from fabrics.kubernetes import render
from tests.fabrics.kubernetes.conftest import NAMESPACE, spec

DIGEST = "d" * 64
ENV = {
    "GRIDLANE_CODE_DIGEST": DIGEST,
    "GRIDLANE_CODE_URL": "https://grid.example.org/api/v1/workloads/x/code/",
    "GRIDLANE_ENDPOINT_SECRET": "the-secret",
    "GRIDLANE_REQUIREMENTS": "numpy==2.1\n",
}


def test_the_job_gets_an_init_container_in_its_image_and_runs_in_what_it_fetched(fabric, double):
    job = spec('python -c "print(1)"', env=ENV, image="nvcr.io/nvidia/pytorch:24.01-py3")
    name = fabric.submit(job)
    (created,) = double.objects("jobs", NAMESPACE)
    assert created["metadata"]["name"] == name
    pod = created["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    (main,) = pod["containers"]
    assert init["name"] == travel.INIT_NAME
    assert init["image"] == main["image"] == "nvcr.io/nvidia/pytorch:24.01-py3"
    assert init["command"] == ["/bin/sh", "-c", travel.INIT_SCRIPT, travel.INIT_NAME, travel.PROGRAM]
    init_env = {e["name"]: e.get("value") for e in init["env"]}
    assert {k: init_env[k] for k in ENV} == ENV  # what to fetch, and the secret to fetch it with: as data
    assert pod["volumes"] == [{"name": travel.VOLUME, "emptyDir": {}}]
    mount = {"name": travel.VOLUME, "mountPath": "/gridlane"}
    assert init["volumeMounts"] == main["volumeMounts"] == [mount]
    assert main["workingDir"] == "/gridlane/work"
    assert main["command"] == ["/bin/sh", "-c"]
    assert main["args"] == [travel.ACTIVATE + job.command]  # the user's command, whole, after the venv's PATH


def test_the_record_masks_the_secret_in_the_init_container_too(fabric):
    record = json.loads(fabric.render(spec("true", env=ENV)))
    pod = record["spec"]["template"]["spec"]
    for container in [*pod["containers"], *pod["initContainers"]]:
        secrets = [e["value"] for e in container["env"] if e["name"] == "GRIDLANE_ENDPOINT_SECRET"]
        assert secrets == ["(not shown: sent to the cluster, not stored)"]


def test_a_job_that_brings_nothing_gets_no_init_container(fabric, double):
    fabric.submit(spec("true"))
    (created,) = double.objects("jobs", NAMESPACE)
    pod = created["spec"]["template"]["spec"]
    assert "initContainers" not in pod
    assert "workingDir" not in pod["containers"][0]


def test_the_double_refuses_an_init_container_that_mounts_no_volume(fabric, kubeconfig):
    """The double's check is real: what Gridlane sends would be refused, as by a real API server, were the volume
    missing or an init container named like the job's."""
    client = kubernetes.config.new_client_from_config(config_file=str(kubeconfig))
    jobs = kubernetes.client.BatchV1Api(client)
    for breaking, cause in (
        (lambda pod: pod.pop("volumes"), "initContainers[0].volumeMounts[0].name"),
        (lambda pod: pod["initContainers"][0].update(name="main"), "initContainers[0].name"),
    ):
        manifest = render.render(spec("true", env=ENV), fabric.settings, NAMESPACE).job
        breaking(manifest["spec"]["template"]["spec"])
        with pytest.raises(kubernetes.client.ApiException) as refused:
            jobs.create_namespaced_job(NAMESPACE, manifest)  # type: ignore[arg-type]  # the client takes a dict too
        assert refused.value.status == 422
        assert cause in (refused.value.body or "")

"""A notebook's home stays: the person's own claim, made on first use from IT's class and size, mounted at the home
path Slurm and agent notebooks use, kept when the notebook stops and mounted again by the next session."""

from __future__ import annotations

from pathlib import Path

from fabrics.base import JobState
from fabrics.kubernetes import render
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.k8s_double import ApiDouble

SETTINGS = {"gpu_flavor": "h100", "home_storage_class": "fast-rwo", "home_size": "20Gi", "home_path": "/home/{user}",
            "posix_ids": {"alice": {"uid": 2001, "gid": 2001}}}  # fmt: skip


def notebook_pod(double: ApiDouble, name: str) -> str:
    def running() -> str:
        pods = double.objects("pods", NAMESPACE, f"job-name={name}")
        return pods[0]["metadata"]["name"] if pods and pods[0]["status"].get("phase") == "Running" else ""

    wait_until(running, timeout=20)
    return running()


def test_a_notebooks_files_outlive_its_pod_and_the_next_session_finds_them(double: ApiDouble, kubeconfig: Path) -> None:
    fabric = connect({"kubeconfig": str(kubeconfig)} | SETTINGS)
    first = fabric.submit(spec("", kind="notebook", run_as="alice", image="jupyter/base-notebook:2024-06-01"))
    claim = double.get("persistentvolumeclaims", NAMESPACE, "gl-home-alice")
    assert claim is not None
    assert claim["spec"]["storageClassName"] == "fast-rwo"
    assert claim["spec"]["resources"]["requests"]["storage"] == "20Gi"
    assert "ownerReferences" not in claim["metadata"]  # nothing Gridlane deletes takes it along
    pod = notebook_pod(double, first)
    main = double.get("pods", NAMESPACE, pod)["spec"]["containers"][0]  # type: ignore[index]
    assert {"name": "gridlane-home", "mountPath": "/home/alice"} in main["volumeMounts"]
    assert {"name": "HOME", "value": "/home/alice"} in main["env"]
    assert main["workingDir"] == "/home/alice"
    double.write_on_claim(NAMESPACE, "gl-home-alice", "analysis.ipynb", '{"cells": []}')  # the kernel saves
    assert double.files_of(NAMESPACE, pod)["/home/alice/analysis.ipynb"] == '{"cells": []}'
    # The notebook stops: its Job and pod go, the claim stays.
    fabric.cancel(first)
    wait_until(lambda: not double.objects("pods", NAMESPACE, f"job-name={first}"), timeout=20)
    assert double.get("persistentvolumeclaims", NAMESPACE, "gl-home-alice") is not None
    # The next session mounts the same claim at the same path and finds the file.
    second = fabric.submit(spec("", kind="notebook", run_as="alice", image="jupyter/base-notebook:2024-06-01"))
    assert fabric.poll([second])[second].state in (JobState.QUEUED, JobState.RUNNING)
    again = notebook_pod(double, second)
    volumes = double.get("pods", NAMESPACE, again)["spec"]["volumes"]  # type: ignore[index]
    assert {"name": "gridlane-home", "persistentVolumeClaim": {"claimName": "gl-home-alice"}} in volumes
    assert double.files_of(NAMESPACE, again)["/home/alice/analysis.ipynb"] == '{"cells": []}'
    assert len(double.objects("persistentvolumeclaims", NAMESPACE)) == 1


def test_training_jobs_and_fabrics_without_a_storage_class_get_no_home_claim(kubeconfig: Path) -> None:
    fabric = connect({"kubeconfig": str(kubeconfig)} | SETTINGS)
    training = render.render(spec("true", run_as="alice"), fabric.settings, NAMESPACE)
    assert "volumes" not in training.job["spec"]["template"]["spec"]
    plain = connect({"kubeconfig": str(kubeconfig), "gpu_flavor": "h100"})
    notebook = render.render(spec("", kind="notebook"), plain.settings, NAMESPACE)
    assert "volumes" not in notebook.job["spec"]["template"]["spec"]

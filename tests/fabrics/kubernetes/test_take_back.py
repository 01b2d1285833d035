"""Taking a waiting Job back for a move (portal/worker/pullback.py) against the API double: a Job Kueue keeps
suspended, or whose pods no node can hold, is deleted and reads gone; a Job Kueue admits between the read and
the delete is refused by the API server (the delete's resourceVersion precondition) and runs on; a running Job
stays; an indexed Job's element is not taken back."""

from __future__ import annotations

from typing import Any

from fabrics.base import JobState, Resources
from fabrics.kubernetes.arrays import PREFIX, element_of
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.fabrics.kubernetes.test_fabric import KUEUE_TEMPLATE, status_when


def test_a_job_kueue_keeps_suspended_is_taken_back_and_reads_gone(k8s_settings: dict[str, Any], double: Any) -> None:
    fabric = connect(k8s_settings)
    name = fabric.submit(spec("echo never", template=KUEUE_TEMPLATE))
    assert fabric.poll([name])[name].state is JobState.QUEUED
    fabric.take_back(name)
    assert double.get("jobs", NAMESPACE, name) is None
    assert fabric.poll([name])[name].state is JobState.MISSING
    assert fabric.taken_back_goes


def test_kueue_admitting_it_between_the_read_and_the_delete_keeps_it(
    k8s_settings: dict[str, Any], double: Any, monkeypatch: Any
) -> None:
    fabric = connect(k8s_settings)
    name = fabric.submit(spec("echo admitted-first", template=KUEUE_TEMPLATE))
    read = fabric.client.read_job(name)  # the decision's view: suspended

    def admitted_meanwhile(job_name: str) -> dict[str, Any]:
        double.kueue_admit(NAMESPACE, job_name)  # the gate: Kueue admits it before the delete reaches the server
        return read

    monkeypatch.setattr(fabric.client, "read_job", admitted_meanwhile)
    fabric.take_back(name)
    assert double.get("jobs", NAMESPACE, name) is not None  # 409: the delete was refused
    assert status_when(fabric, name, JobState.SUCCEEDED).exit_code == 0  # it ran, once


def test_a_job_whose_pods_no_node_holds_is_taken_back(fabric: Any, double: Any) -> None:
    name = fabric.submit(spec("true", per_node=Resources(9000, 1000, 1024)))
    status_when(fabric, name, JobState.QUEUED)
    fabric.take_back(name)
    assert double.get("jobs", NAMESPACE, name) is None


def test_a_running_job_stays(fabric: Any, double: Any) -> None:
    name = fabric.submit(spec("sleep 30"))
    status_when(fabric, name, JobState.RUNNING)
    fabric.take_back(name)
    assert fabric.poll([name])[name].state is JobState.RUNNING
    assert double.get("jobs", NAMESPACE, name) is not None
    fabric.cancel(name)


def test_an_indexed_jobs_element_is_not_taken_back(fabric: Any) -> None:
    element = f"{PREFIX}0123/3"
    assert element_of(element) is not None
    assert not fabric.takes_back(element)
    assert fabric.takes_back(f"{PREFIX}0123")

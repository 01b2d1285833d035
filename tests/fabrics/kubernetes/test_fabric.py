"""The Kubernetes fabric through the official client, over HTTP, against the API double."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

import pytest

from fabrics.base import FabricError, JobState, JobStatus, Resources, find_many, submit_many
from fabrics.kubernetes.fabric import KubernetesFabric
from fabrics.registry import connect as registry_connect
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec

KUEUE_TEMPLATE = """\
metadata:
  labels:
    kueue.x-k8s.io/queue-name: team-vision
spec:
  containers:
  - name: main
    image: busybox:1.36
"""


def status_when(fabric: KubernetesFabric, external_id: str, *states: JobState, timeout: float = 10) -> JobStatus:
    def reached():
        status = fabric.poll([external_id])[external_id]
        return status if status.state in states else None

    return wait_until(reached, timeout=timeout, every=0.05)


def test_the_registry_knows_the_kind(k8s_settings):
    from fabrics.base import FabricConfig

    fabric = registry_connect(FabricConfig("k8s", "kubernetes", Resources(), k8s_settings))
    assert isinstance(fabric, KubernetesFabric)


def test_a_training_run_succeeds_with_its_log(fabric, double):
    job = spec('echo "hello from $GRIDLANE_WORKLOAD_ID"; sleep 0.2; echo bye')
    name = fabric.submit(job)
    assert name == f"gl-{job.workload_id}"
    assert status_when(fabric, name, JobState.RUNNING, JobState.SUCCEEDED).host.startswith("gpu-node-")
    done = status_when(fabric, name, JobState.SUCCEEDED)
    assert done.exit_code == 0
    assert done.started_at is not None
    assert done.finished_at is not None
    assert fabric.tail(name) == f"hello from {job.workload_id}\nbye\n"
    (created,) = double.objects("jobs", NAMESPACE)
    assert created["spec"]["template"]["spec"]["containers"][0]["args"] == [job.command]


def test_a_failing_run_fails_with_its_exit_code(fabric):
    name = fabric.submit(spec("echo trying; exit 3"))
    done = status_when(fabric, name, JobState.FAILED)
    assert done.exit_code == 3
    assert fabric.tail(name) == "trying\n"


def test_a_two_node_gang_runs_both_ranks_to_completion(fabric, double):
    job = spec('echo "rank $NODE_RANK of $GRIDLANE_NODES, master $MASTER_ADDR"; sleep 0.1', nodes=2)
    name = fabric.submit(job)
    assert status_when(fabric, name, JobState.SUCCEEDED).exit_code == 0
    pods = double.objects("pods", NAMESPACE, f"gridlane.io/workload-id={job.workload_id}")
    assert sorted(p["spec"]["hostname"] for p in pods) == [f"{name}-0", f"{name}-1"]
    (service,) = double.objects("services", NAMESPACE)
    assert service["spec"]["clusterIP"] == "None"
    assert service["metadata"]["ownerReferences"][0]["name"] == name  # it goes with the Job
    assert fabric.tail(name) == f"rank 0 of 2, master {name}-0.{name}\n"


def test_a_notebook_runs_gridlanes_launcher_and_its_report_secret_is_masked_in_the_record(fabric, double):
    job = replace(spec("", kind="notebook"), env={"GRIDLANE_ENDPOINT_SECRET": "s3cret-of-this-run"})
    record = fabric.render(job)
    name = fabric.submit(job)
    status_when(fabric, name, JobState.RUNNING)
    (created,) = double.objects("jobs", NAMESPACE)
    main = created["spec"]["template"]["spec"]["containers"][0]
    assert main["command"][:2] == ["bash", "-c"]
    assert "gridlane_notebook jupyter lab" in main["command"][2]
    env = {e["name"]: e for e in main["env"]}
    assert env["GRIDLANE_ENDPOINT_SECRET"]["value"] == "s3cret-of-this-run"  # the pod has it
    assert env["GRIDLANE_NOTEBOOK_HOST"]["valueFrom"] == {"fieldRef": {"fieldPath": "status.podIP"}}
    assert "s3cret-of-this-run" not in record  # the workload's record does not
    assert double.objects("services", NAMESPACE) == []  # the portal reaches the pod itself


def test_cancel_deletes_the_job_its_pods_and_its_service(fabric, double):
    name = fabric.submit(spec("", kind="notebook"))
    status_when(fabric, name, JobState.RUNNING)
    fabric.cancel(name)
    assert double.calls("DELETE", f"/jobs/{name}$")[0].query == {"propagationPolicy": "Background"}
    assert status_when(fabric, name, JobState.MISSING)
    wait_until(lambda: not double.objects("pods", NAMESPACE) and not double.objects("services", NAMESPACE), timeout=60)
    fabric.cancel(name)  # again: nothing left, no error


def test_kueue_mode_creates_it_suspended_and_says_why_until_admitted(k8s_settings, double):
    fabric = connect(k8s_settings)
    name = fabric.submit(spec("echo admitted", template=KUEUE_TEMPLATE))
    (job,) = double.objects("jobs", NAMESPACE)
    assert job["spec"]["suspend"] is True
    assert job["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "team-vision"
    waiting = fabric.poll([name])[name]
    assert waiting.state is JobState.QUEUED
    assert waiting.reason.startswith("waiting for Kueue to admit it from LocalQueue team-vision: couldn't assign")
    double.kueue_admit(NAMESPACE, name)
    assert status_when(fabric, name, JobState.SUCCEEDED).exit_code == 0


def test_the_runtime_limit_is_the_deadline_and_ends_timed_out(fabric):
    name = fabric.submit(spec("sleep 60", runtime_limit_s=1))
    assert status_when(fabric, name, JobState.TIMED_OUT).reason == ""


def test_an_image_that_does_not_exist_is_a_readable_reason(fabric):
    name = fabric.submit(spec("true", image="registry.example.org/team/does-not-exist:1"))
    waiting = wait_until(lambda: "cannot be pulled" in (s := fabric.poll([name])[name]).reason and s, timeout=60)
    assert waiting.state is JobState.QUEUED
    assert "registry.example.org/team/does-not-exist:1" in waiting.reason
    assert fabric.tail(name) == ""


def test_work_no_node_can_hold_waits_with_the_schedulers_words(fabric):
    name = fabric.submit(spec("true", per_node=Resources(9000, 1000, 1024)))
    waiting = wait_until(lambda: "no node" in (s := fabric.poll([name])[name]).reason and s, timeout=60)
    assert "Insufficient nvidia.com/gpu" in waiting.reason


def test_volcano_mode_gangs_through_a_podgroup_the_job_owns(k8s_settings, double):
    fabric = connect(k8s_settings | {"volcano": True})
    name = fabric.submit(spec("sleep 0.1", nodes=2))
    assert status_when(fabric, name, JobState.SUCCEEDED).exit_code == 0
    (group,) = double.objects("podgroups.scheduling.volcano.sh", NAMESPACE)
    assert group["spec"]["minMember"] == 2
    assert group["metadata"]["ownerReferences"][0]["name"] == name
    assert double.calls("PATCH", "/podgroups/")  # a merge patch: custom resources take no strategic ones
    fabric.cancel(name)
    assert double.objects("podgroups.scheduling.volcano.sh", NAMESPACE) == []
    assert double.objects("jobs", NAMESPACE) == []


def test_what_render_recorded_is_what_submit_sends(fabric, double):
    job = spec("python train.py")
    recorded = json.loads(fabric.render(job))
    fabric.submit(job)
    (sent,) = double.objects("jobs", NAMESPACE)
    assert sent["spec"]["template"]["spec"]["containers"] == [
        recorded["spec"]["template"]["spec"]["containers"][0]
        | {"imagePullPolicy": "IfNotPresent", "terminationMessagePath": "/dev/termination-log"}
        | {"terminationMessagePolicy": "File"}
    ]
    assert recorded["metadata"]["labels"].items() <= sent["metadata"]["labels"].items()


def test_a_gang_volcano_cannot_place_says_so(k8s_settings):
    fabric = connect(k8s_settings | {"volcano": True})
    name = fabric.submit(spec("true", nodes=3, per_node=Resources(8000, 1000, 1024)))  # two nodes of 8
    waiting = wait_until(lambda: "Volcano" in (s := fabric.poll([name])[name]).reason and s, timeout=60)
    assert waiting.state is JobState.QUEUED
    assert "3/3 tasks in gang unschedulable" in waiting.reason


def test_submitting_twice_is_one_job_found_by_its_label(fabric, double):
    job = spec("sleep 60", nodes=2)
    assert fabric.submit(job) == fabric.submit(job) == f"gl-{job.workload_id}"
    assert len(double.objects("jobs", NAMESPACE)) == 1
    assert [c.path for c in double.calls("POST", "/jobs$")] == [f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs"] * 2


def test_a_foreign_job_with_our_name_is_refused_not_adopted(fabric, double):
    job = spec("true")
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"gl-{job.workload_id}"},
        "spec": {"template": {"spec": {"restartPolicy": "Never", "containers": [{"name": "x", "image": "busybox"}]}}},
    }
    fabric.client.create("jobs", body)
    with pytest.raises(FabricError, match="is not workload") as raised:
        fabric.submit(job)
    assert not raised.value.retryable


def test_find_many_is_one_list_call_by_label_selector(fabric, double):
    jobs = [spec("sleep 60") for _ in range(5)]
    results = submit_many(fabric, jobs[:3])
    assert all(isinstance(v, str) for v in results.values())
    double.forget_calls()
    found = find_many(fabric, jobs_ids := [j.workload_id for j in jobs[:3]])
    assert found == {wid: f"gl-{wid}" for wid in jobs_ids}
    (listing,) = double.calls()
    assert (listing.method, listing.path) == ("GET", f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs")
    assert listing.query["labelSelector"].startswith("gridlane.io/workload-id in (")
    # Ids it does not find by their own label may be elements of an array's Job: one more LIST, of those.
    double.forget_calls()
    assert find_many(fabric, [j.workload_id for j in jobs]) == found
    assert [c.query["labelSelector"] for c in double.calls()][1:] == ["gridlane.io/array-id"]
    assert fabric.find(jobs[4].workload_id) is None


def test_poll_is_one_list_of_jobs_and_one_of_pods_for_the_whole_batch(fabric, double):
    names = [fabric.submit(spec("sleep 60")) for _ in range(4)]
    double.forget_calls()
    statuses = fabric.poll([*names, f"gl-{uuid.uuid4()}"])
    assert len(statuses) == 5
    assert [(c.method, c.path.rsplit("/", 1)[-1]) for c in double.calls()] == [("GET", "jobs"), ("GET", "pods")]
    assert list(statuses.values())[-1].state is JobState.MISSING


def test_a_job_that_cannot_be_created_is_refused_for_good(fabric, double):
    double.fail("POST", r"/jobs$", 500)
    with pytest.raises(FabricError) as transient:
        fabric.submit(spec("true"))
    assert transient.value.retryable
    template = (
        "spec:\n  containers:\n  - name: main\n    image: busybox\n    resources: {limits: {nvidia.com/gpu: '1'}}\n"
    )
    fractional = spec("true", template=template, per_node=Resources(0, 1000, 1024))
    assert isinstance(fabric.submit(fractional), str)
    with pytest.raises(FabricError, match="whole GPUs") as refused:
        fabric.submit(spec("true", per_node=Resources(250, 1000, 1024)))
    assert not refused.value.retryable


def test_an_api_that_does_not_answer_is_a_retryable_error_everywhere(k8s_settings, double):
    fabric = connect(k8s_settings)
    jobs = [spec("true") for _ in range(3)]
    double.stop()
    results = fabric.submit_many(jobs)
    assert all(isinstance(r, FabricError) and r.retryable for r in results.values())
    for call in (lambda: fabric.poll(["gl-" + str(jobs[0].workload_id)]), lambda: fabric.find(jobs[0].workload_id)):
        with pytest.raises(FabricError) as raised:
            call()
        assert raised.value.retryable
    assert not fabric.capacity().healthy


def test_credentials_that_do_not_load_fail_on_use_not_on_connect(tmp_path):
    fabric = connect({"kubeconfig": str(tmp_path / "missing")})
    with pytest.raises(FabricError, match="cannot load the Kubernetes credentials") as raised:
        fabric.find(uuid.uuid4())
    assert raised.value.retryable
    assert fabric.render(spec("true")).startswith('{\n  "apiVersion": "batch/v1",\n  "kind": "Job"')


def test_capacity_from_nodes_counts_other_peoples_pods_out(fabric, double):
    assert fabric.capacity().total == Resources(16000, 64000, 512 * 1024)
    name = fabric.submit(spec("sleep 60", per_node=Resources(2000, 4000, 8192)))
    status_when(fabric, name, JobState.RUNNING)
    assert fabric.capacity().total == Resources(16000, 64000, 512 * 1024)  # Gridlane counts its own work
    other = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "someone-else"},
        "spec": {
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "x",
                            "image": "busybox:1.36",
                            "command": ["sleep", "infinity"],
                            "resources": {"limits": {"nvidia.com/gpu": "3"}},
                        }
                    ],
                }
            }
        },
    }
    fabric.client.create("jobs", other)
    wait_until(lambda: fabric.capacity().total.gpus_milli == 13000, timeout=60)
    assert "3 held by pods outside Gridlane, 2 by Gridlane's" in fabric.capacity().detail


def test_declared_capacity_is_what_it_says_while_the_api_answers(k8s_settings):
    capacity = connect(k8s_settings | {"capacity": "declared"}).capacity()
    assert capacity.total == Resources(16000, 64000, 512 * 1024)
    assert capacity.healthy
    assert "v1.31.2" in capacity.detail


def test_a_namespace_in_the_settings_wins_over_the_kubeconfigs(k8s_settings, double):
    fabric = connect(k8s_settings | {"namespace": "default"})
    name = fabric.submit(spec("true"))
    assert [j["metadata"]["name"] for j in double.objects("jobs", "default")] == [name]

"""The portal's worker end to end on a Kubernetes fabric: services, real cycles, the official client, the double."""

from __future__ import annotations

import ipaddress
import json

import pytest
from rest_framework.test import APIClient

from fabrics.base import submit_many
from portal.accounts.models import ResourceGroup
from portal.connect import server_reach
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.worker import apply, connections, snapshot, tasks
from portal.worker.dispatch import job_spec
from portal.worker.models import PodAddresses
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import decide
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE

TRAIN_TEMPLATE = """\
spec:
  containers:
  - name: main
    image: registry.example.org/ml/pytorch:24.05
    command: ["/bin/bash", "-lc"]
"""
NOTEBOOK_TEMPLATE = """\
spec:
  containers:
  - name: main
    image: registry.example.org/jupyter/pytorch-notebook:2024-11-04
"""
KUEUE_TEMPLATE = """\
metadata:
  labels:
    kueue.x-k8s.io/queue-name: team-vision
spec:
  containers:
  - name: main
    image: registry.example.org/ml/pytorch:24.05
"""


@pytest.fixture
def k8s(cast, kubeconfig):
    """A Kubernetes fabric on the double with three queues: training, notebooks, and one through Kueue."""
    connections.forget_all()
    fabric = Fabric(
        name="k8s",
        kind="kubernetes",
        gpu_flavor="h100",
        gpus_milli=16000,
        cpus_milli=64000,
        memory_mib=512 * 1024,
        settings={"kubeconfig": str(kubeconfig), "gpu_flavor": "h100"},
    )
    fabric.full_clean()
    fabric.save()
    vision = ResourceGroup.objects.get(slug="vision")
    for slug, kinds, template in (
        ("k8s-train", ["training", "batch"], TRAIN_TEMPLATE),
        ("k8s-notebooks", ["notebook"], NOTEBOOK_TEMPLATE),
        ("k8s-kueue", ["training"], KUEUE_TEMPLATE),
    ):
        queue = Queue.objects.create(
            slug=slug, name=slug, kinds=kinds, default_runtime_minutes=30, max_runtime_minutes=8 * 60
        )
        queue.allowed_groups.add(vision)
        target = QueueTarget(queue=queue, fabric=fabric, template=template)
        target.full_clean()
        target.save()
    yield fabric
    connections.forget_all()


def run_until(workload: Workload, *states: State, timeout: float = 15) -> Workload:
    def reached():
        tasks.cycle()
        workload.refresh_from_db()
        return workload.state in states

    wait_until(reached, timeout=timeout, every=0.05)
    return workload


def test_a_training_run_succeeds_through_the_cluster(alice, submit, k8s, double):
    workload = submit(alice, queue="k8s-train", command='echo "hello from $GRIDLANE_WORKLOAD_ID"; sleep 0.2', gpus=1)
    run_until(workload, State.SUCCEEDED)
    assert workload.exit_code == 0
    assert workload.fabric.name == "k8s"
    assert workload.external_id == f"gl-{workload.pk}"
    assert json.loads(workload.rendered)["metadata"]["name"] == workload.external_id
    assert f"hello from {workload.pk}" in workload.log_tail
    assert workload.host.startswith("gpu-node-")
    steps = list(workload.events.values_list("to_state", flat=True))
    assert steps == ["pending", "admitted", "dispatching", "running", "succeeded"]
    (job,) = double.objects("jobs", NAMESPACE)
    container = job["spec"]["template"]["spec"]["containers"][0]
    assert container["command"] == ["/bin/bash", "-lc"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert job["metadata"]["labels"]["gridlane.io/group"] == "vision"


def test_a_failing_run_fails_with_its_exit_code(alice, submit, k8s):
    workload = submit(alice, queue="k8s-train", command="exit 3")
    run_until(workload, State.FAILED)
    assert workload.exit_code == 3
    assert workload.events.last().reason == "failed (exit code 3)"


def test_a_two_node_gang_runs_to_completion(alice, submit, k8s, double):
    workload = submit(alice, queue="k8s-train", command='echo "rank $NODE_RANK"; sleep 0.1', gpus=2, nodes=2)
    run_until(workload, State.SUCCEEDED)
    pods = double.objects("pods", NAMESPACE, f"gridlane.io/workload-id={workload.pk}")
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in pods) == ["0", "1"]
    assert workload.log_tail == "rank 0\n"
    assert "," in workload.host or workload.host.startswith("gpu-node-")


def test_a_notebook_reports_its_pod_and_opens_through_the_portal_and_cancel_deletes_its_job(alice, submit, k8s, double):
    from portal.workloads import notebook_endpoint

    workload = submit(alice, queue="k8s-notebooks", kind="notebook", command="", gpus=1)
    run_until(workload, State.RUNNING)
    (created,) = double.objects("jobs", NAMESPACE)
    env = {e["name"]: e.get("value") for e in created["spec"]["template"]["spec"]["containers"][0]["env"]}
    secret = env["GRIDLANE_ENDPOINT_SECRET"]
    assert env["GRIDLANE_CONNECT_PREFIX"] == f"/connect/{workload.pk}/"
    (pod,) = double.objects("pods", NAMESPACE, f"gridlane.io/workload-id={workload.pk}")
    own = pod["status"]["podIP"]
    assert PodAddresses.objects.get(workload_id=workload.pk).addresses == [own]  # the poll kept it
    # What the launcher in the pod sends once Jupyter answers: the pod's IP, the port, the token it picked.
    body = {"host": own, "port": 43121, "token": "t" * 43, "path": f"/connect/{workload.pk}/"}
    elsewhere = str(ipaddress.ip_address(own) + 1)  # another pod's address on the same pod network
    answer = APIClient().post(f"/api/v1/workloads/{workload.pk}/endpoint/", body | {"host": elsewhere},
                              format="json", HTTP_AUTHORIZATION=f"Bearer {secret}")  # fmt: skip
    assert answer.status_code == 400
    assert set(answer.json()["errors"]) == {"host"}
    answer = APIClient().post(f"/api/v1/workloads/{workload.pk}/endpoint/", body, format="json",
                              HTTP_AUTHORIZATION=f"Bearer {secret}")  # fmt: skip
    assert answer.status_code == 204
    workload.refresh_from_db()
    assert workload.connect_url.endswith(f"/connect/{workload.pk}/lab")
    server = notebook_endpoint.stored(workload)
    assert server is not None
    assert server.host == own
    assert server_reach.reach(workload, server).host == own
    services.do_cancel(alice, workload)
    run_until(workload, State.CANCELLED)
    assert double.objects("jobs", NAMESPACE) == []
    wait_until(lambda: not double.objects("pods", NAMESPACE), timeout=60)
    assert double.calls("DELETE", f"/jobs/gl-{workload.pk}$")[0].query == {"propagationPolicy": "Background"}


def test_a_notebooks_lease_extends_by_moving_its_jobs_active_deadline(alice, submit, k8s, double):
    from decimal import Decimal

    from fabrics.base import FabricError, extend

    workload = submit(alice, queue="k8s-notebooks", kind="notebook", command="", lease_hours=Decimal(1),
                      runtime_limit_minutes=60)  # fmt: skip
    run_until(workload, State.RUNNING)
    assert double.objects("jobs", NAMESPACE)[0]["spec"]["activeDeadlineSeconds"] == 3600
    services.extend(alice, workload, Decimal("1.5"))
    (job,) = double.objects("jobs", NAMESPACE)
    # From the Job's own start, which is a moment before the portal saw it running.
    assert 9000 <= job["spec"]["activeDeadlineSeconds"] <= 9000 + 15
    assert double.calls("PATCH", f"/jobs/gl-{workload.pk}$")
    workload.refresh_from_db()
    assert workload.lease_s == 9000
    assert workload.state == State.RUNNING
    services.do_cancel(alice, workload)
    run_until(workload, State.CANCELLED)
    with pytest.raises(FabricError, match="gone"):
        extend(connections.fabric_for(k8s), workload.external_id, workload.lease_ends_at)


def test_cancel_stops_a_running_training_job(alice, submit, k8s, double):
    workload = submit(alice, queue="k8s-train", command="sleep 60")
    run_until(workload, State.RUNNING)
    services.do_cancel(alice, workload)
    run_until(workload, State.CANCELLED)
    assert [e.to_state for e in workload.events.all()][-2:] == ["cancelling", "cancelled"]
    wait_until(lambda: not double.objects("pods", NAMESPACE), timeout=60)


def test_kueue_holds_it_suspended_with_a_reason_until_it_admits_it(alice, submit, k8s, double):
    workload = submit(alice, queue="k8s-kueue", command="echo ran", gpus=1)
    for _ in range(3):
        tasks.cycle()
    workload.refresh_from_db()
    assert workload.state == State.DISPATCHING  # on the cluster, held by Kueue
    (job,) = double.objects("jobs", NAMESPACE)
    assert job["spec"]["suspend"] is True
    status = connections.fabric_for(k8s).poll([workload.external_id])[workload.external_id]
    assert status.reason.startswith("waiting for Kueue to admit it from LocalQueue team-vision")
    double.kueue_admit(NAMESPACE, workload.external_id)
    run_until(workload, State.SUCCEEDED)
    assert "ran" in workload.log_tail


def test_the_runtime_limit_ends_it_expired(alice, submit, k8s):
    workload = submit(alice, queue="k8s-train", command="sleep 60")
    Workload.objects.filter(pk=workload.pk).update(runtime_limit_s=1)  # the API's floor is a minute
    run_until(workload, State.EXPIRED)
    assert "runtime limit" in workload.events.last().reason


def test_a_worker_that_died_after_create_reconciles_without_a_second_job(alice, submit, k8s, double):
    workload = submit(alice, queue="k8s-train", command="echo once")
    # A worker admits it, records its intent, creates the Job... and dies before saving the job's name.
    snap, pending = snapshot.build(workload.submitted_at)
    apply.apply(decide(snap), pending)
    workload.refresh_from_db()
    services.transition(workload, State.DISPATCHING, reason="dispatching to k8s")
    loaded = Workload.objects.select_related("owner", "group", "queue", "target").get(pk=workload.pk)
    connections.fabric_for(k8s).submit(job_spec(loaded))
    assert Workload.objects.get(pk=workload.pk).external_id == ""

    # The restarted worker finds the Job by its label and follows it.
    run_until(workload, State.SUCCEEDED)
    assert workload.external_id == f"gl-{workload.pk}"
    assert len(double.objects("jobs", NAMESPACE)) == 1
    assert len(double.calls("POST", r"/jobs$")) == 1


def test_a_quarter_gpu_on_whole_gpus_is_refused_at_submit_saying_why(alice, submit, k8s, double):
    from portal.workloads.services import SubmitRejected

    with pytest.raises(SubmitRejected) as rejected:
        submit(alice, queue="k8s-train", command="true", gpus="0.25")
    assert (
        "0.25 GPU cannot run here: Kubernetes hands out nvidia.com/gpu as whole GPUs"
        in (rejected.value.errors["resources.gpus"][0])
    )
    assert double.objects("jobs", NAMESPACE) == []


# -- arrays: the elements admitted together are one Indexed Job -------------------------------------------------


def elements_of(parent: Workload) -> list[Workload]:
    return list(Workload.objects.filter(array_parent=parent).order_by("array_index"))


def run_array_until(parent: Workload, *states: State, timeout: float = 60) -> Workload:
    def reached():
        tasks.cycle()
        parent.refresh_from_db()
        return parent.state in states

    wait_until(reached, timeout=timeout, every=0.02)
    return parent


def test_a_20_element_array_at_most_5_at_once_never_runs_more_than_5_pods_and_each_sees_its_index(
    alice, submit, k8s, double
):
    command = 'echo "element $GRIDLANE_ARRAY_INDEX at $JOB_COMPLETION_INDEX"; sleep 0.3'
    parent = submit(alice, queue="k8s-train", command=command, array="0-19%5")
    selector = f"gridlane.io/array-id={parent.pk}"
    double.watch(selector)
    run_array_until(parent, State.SUCCEEDED)
    assert double.peak(selector) == 5  # the throttle filled, and never passed, on the cluster itself
    done = elements_of(parent)
    assert [w.state for w in done] == [State.SUCCEEDED] * 20
    for w in done:
        index = w.external_id.rsplit("/", 1)[1]
        assert w.log_tail == f"element {w.array_index} at {index}\n"
    jobs = double.objects("jobs", NAMESPACE, selector)
    # Far fewer Jobs than elements: the first five admitted together share one, later ones as they were admitted.
    assert len(jobs) == len({w.external_id.split("/")[0] for w in done}) < 20
    assert max(j["spec"]["completions"] for j in jobs) == 5
    assert all(j["spec"]["parallelism"] == j["spec"]["completions"] for j in jobs)


def test_a_sparse_arrays_elements_see_their_own_indexes(alice, submit, k8s, double):
    parent = submit(alice, queue="k8s-train", command='echo "i=$GRIDLANE_ARRAY_INDEX"', array="3-11:4")
    run_array_until(parent, State.SUCCEEDED)
    assert [(w.array_index, w.log_tail) for w in elements_of(parent)] == [(3, "i=3\n"), (7, "i=7\n"), (11, "i=11\n")]
    (job,) = double.objects("jobs", NAMESPACE)
    assert job["spec"]["completions"] == 3


def test_an_elements_failure_fails_that_element_only(alice, submit, k8s, double):
    parent = submit(alice, queue="k8s-train", command="sleep 0.2; exit $GRIDLANE_ARRAY_INDEX", array="0-2")
    run_array_until(parent, State.FAILED)
    done = elements_of(parent)
    assert [(w.state, w.exit_code) for w in done] == [
        (State.SUCCEEDED, 0),
        (State.FAILED, 1),
        (State.FAILED, 2),
    ]
    assert done[1].events.last().reason == "failed (exit code 1)"


def test_cancel_of_one_element_then_of_the_array(alice, submit, k8s, double):
    parent = submit(alice, queue="k8s-train", command="sleep 60", array="0-2")
    wait_until(lambda: tasks.cycle() and all(w.state == State.RUNNING for w in elements_of(parent)), timeout=60)
    one = elements_of(parent)[1]
    # Admitted together, dispatched in their array's order: element k is the Job's completion index k.
    assert [w.external_id.rsplit("/", 1)[1] for w in elements_of(parent)] == ["0", "1", "2"]
    services.do_cancel(alice, one)
    run_until(one, State.CANCELLED, timeout=60)
    assert [w.state for w in elements_of(parent)] == [State.RUNNING, State.CANCELLED, State.RUNNING]
    live = [p for p in double.objects("pods", NAMESPACE) if not p["metadata"].get("deletionTimestamp")]
    assert sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] for p in live) == ["0", "2"]
    services.do_cancel(alice, parent)
    run_array_until(parent, State.CANCELLED)
    assert [w.state for w in elements_of(parent)] == [State.CANCELLED] * 3
    wait_until(lambda: not double.objects("pods", NAMESPACE), timeout=60)


def test_an_array_dispatch_that_died_after_create_reconciles_by_the_arrays_label(alice, submit, k8s, double):
    parent = submit(alice, queue="k8s-train", command="echo once", array="0-3")
    # A worker admits the elements, records its intent, creates their Job... and dies before saving the ids.
    snap, pending = snapshot.build(parent.submitted_at)
    apply.apply(decide(snap), pending)
    loaded = list(Workload.objects.select_related("owner", "group", "queue", "target").filter(array_parent=parent))
    assert {w.state for w in loaded} == {State.ADMITTED}
    for w in loaded:
        services.transition(w, State.DISPATCHING, reason="dispatching to k8s")
    submit_many(connections.fabric_for(k8s), [job_spec(w) for w in loaded])
    assert set(Workload.objects.filter(array_parent=parent).values_list("external_id", flat=True)) == {""}

    # The restarted worker finds them in the array's Job and follows them: nothing made twice, nothing lost.
    run_array_until(parent, State.SUCCEEDED)
    (job,) = double.objects("jobs", NAMESPACE)
    assert sorted(w.external_id for w in elements_of(parent)) == [f"{job['metadata']['name']}/{k}" for k in range(4)]
    assert len(double.calls("POST", r"/jobs$")) == 1
    assert {w.log_tail for w in elements_of(parent)} == {"once\n"}

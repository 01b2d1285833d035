"""An array's elements admitted together run as one Indexed Job: rendering, status, cancel and crash repair, through
the official client against the double."""

from __future__ import annotations

import json
import uuid
from dataclasses import replace

from fabrics.base import JobState, place_many, submit_many
from fabrics.kubernetes import arrays
from fabrics.kubernetes.settings import KubeSettings
from fabrics.ssh import notebook
from tests.conftest import wait_until
from tests.fabrics.kubernetes.conftest import NAMESPACE, spec

INDEX = "batch.kubernetes.io/job-completion-index"


def elements(command: str, indexes: list[int], array_id: str | None = None, **overrides):
    """JobSpecs of one array's elements, as dispatch makes them (their index and array in the environment)."""
    array_id = str(uuid.uuid4()) if array_id is None else array_id
    out = []
    for i in indexes:
        wid = uuid.uuid4()
        env = {
            "GRIDLANE_ARRAY_INDEX": str(i),
            "GRIDLANE_ARRAY_ID": array_id,
            notebook.ENDPOINT_SECRET_ENV: f"secret-of-{wid.hex[:8]}",
        }
        job = spec(command, workload_id=wid, name=f"sweep[{i}]", array=str(i), array_id=array_id, env=env)
        out.append(replace(job, **overrides))
    return out


def statuses_when(fabric, ids, predicate, timeout=60):
    return wait_until(lambda: (s := fabric.poll(ids)) and all(predicate(s[i]) for i in ids) and s, timeout=timeout)


def test_elements_admitted_together_are_one_indexed_job_whose_size_is_what_was_admitted():
    jobs = elements("true", [4, 5, 6])
    manifests = arrays.render_group(jobs, KubeSettings.parse({}), "gridlane")
    job = manifests.job
    assert job["metadata"]["name"] == f"gla-{jobs[0].workload_id}"
    assert job["spec"]["completionMode"] == "Indexed"
    assert (job["spec"]["completions"], job["spec"]["parallelism"], job["spec"]["backoffLimitPerIndex"]) == (3, 3, 0)
    assert "backoffLimit" not in job["spec"]  # a failed element fails alone; the Job's limit stays the default
    assert job["metadata"]["annotations"][arrays.ELEMENTS] == ",".join(str(j.workload_id) for j in jobs)
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert labels[arrays.ARRAY_LABEL] == jobs[0].array_id
    assert "gridlane.io/workload-id" not in labels  # the Job is no single workload's
    main = job["spec"]["template"]["spec"]["containers"][0]
    assert main["command"] == ["/bin/sh", "-c", arrays.WRAPPER, "gridlane-array", "/bin/sh", "-c"]
    assert main["args"] == ["true"]
    names = {e["name"] for e in main["env"]}
    assert "GRIDLANE_ARRAY_ID" in names  # the same for every element
    assert not names & {"GRIDLANE_ARRAY_INDEX", "GRIDLANE_WORKLOAD_ID", notebook.ENDPOINT_SECRET_ENV}
    files = (manifests.secret or {})["stringData"]
    assert files["1"] == (
        "export GRIDLANE_ARRAY_INDEX=5\n"
        f"export {notebook.ENDPOINT_SECRET_ENV}=secret-of-{jobs[1].workload_id.hex[:8]}\n"
        f"export GRIDLANE_WORKLOAD_ID={jobs[1].workload_id}\n"
    )


def test_the_record_of_an_element_masks_its_secret(fabric):
    (job,) = elements("true", [0])
    record = json.loads(fabric.render(job))
    secret = next(item for item in record["items"] if item["kind"] == "Secret")
    assert f"secret-of-{job.workload_id.hex[:8]}" not in json.dumps(record)
    assert notebook.ENDPOINT_SECRET_ENV in secret["stringData"]["0"]


def test_each_element_sees_its_own_array_index_and_completion_index(fabric, double):
    jobs = elements(
        'echo "array $GRIDLANE_ARRAY_INDEX index $JOB_COMPLETION_INDEX id $GRIDLANE_WORKLOAD_ID"', [1, 5, 9]
    )
    placed = place_many(fabric, jobs, fresh={j.workload_id for j in jobs})
    name = f"gla-{jobs[0].workload_id}"
    assert placed == {j.workload_id: f"{name}/{k}" for k, j in enumerate(jobs)}
    (job,) = double.objects("jobs", NAMESPACE)
    assert job["metadata"]["name"] == name
    ids = list(placed.values())
    statuses = statuses_when(fabric, ids, lambda s: s.state is JobState.SUCCEEDED)
    assert all(statuses[i].exit_code == 0 for i in ids)
    for k, j in enumerate(jobs):
        assert fabric.tail(placed[j.workload_id]) == f"array {j.array} index {k} id {j.workload_id}\n"
    # Fresh elements are not looked for: one Secret, one Job, no LIST before them.
    assert [c.method for c in double.calls(path=r"/(jobs|secrets)$")][:2] == ["POST", "POST"]


def test_an_elements_failure_is_its_own_and_its_siblings_run_on(fabric, double):
    jobs = elements("sleep 0.3; exit $GRIDLANE_ARRAY_INDEX", [0, 2, 3])
    placed = submit_many(fabric, jobs)
    ids = [placed[j.workload_id] for j in jobs]
    statuses = statuses_when(fabric, ids, lambda s: s.state.finished)
    assert [statuses[i].state for i in ids] == [JobState.SUCCEEDED, JobState.FAILED, JobState.FAILED]
    assert [statuses[i].exit_code for i in ids] == [0, 2, 3]
    (job,) = double.objects("jobs", NAMESPACE)
    assert job["status"]["completedIndexes"] == "0"
    assert job["status"]["failedIndexes"] == "1-2"  # as the Job controller writes ranges
    assert any(c["reason"] == "FailedIndexes" for c in job["status"]["conditions"] if c["type"] == "Failed")
    assert len(double.objects("pods", NAMESPACE)) == 3  # no retries


def test_cancelling_one_element_stops_its_pod_only_and_reads_as_cancelled(fabric, double):
    jobs = elements("sleep 60", [0, 1, 2])
    placed = submit_many(fabric, jobs)
    ids = [placed[j.workload_id] for j in jobs]
    statuses_when(fabric, ids, lambda s: s.state is JobState.RUNNING)
    fabric.cancel(ids[1])
    statuses = statuses_when(fabric, [ids[1]], lambda s: s.state is JobState.CANCELLED)
    assert statuses[ids[1]].state is JobState.CANCELLED
    now = fabric.poll(ids)
    assert [now[ids[0]].state, now[ids[2]].state] == [JobState.RUNNING, JobState.RUNNING]
    live = [p for p in double.objects("pods", NAMESPACE) if p["status"]["phase"] == "Running"]
    assert sorted(p["metadata"]["annotations"][INDEX] for p in live) == ["0", "2"]
    fabric.cancel(ids[1])  # again, as the next sync would: nothing more happens
    # Every element cancelled: the Job goes, with its Secret.
    fabric.cancel(ids[0])
    fabric.cancel(ids[2])
    wait_until(lambda: not double.objects("jobs", NAMESPACE) and not double.objects("pods", NAMESPACE), timeout=60)
    assert not double.objects("secrets", NAMESPACE)
    assert {s.state for s in fabric.poll(ids).values()} == {JobState.MISSING}


def test_a_dispatch_that_died_after_create_finds_its_elements_by_the_arrays_label(fabric, double, k8s_settings):
    jobs = elements("sleep 60", [0, 1])
    first = submit_many(fabric, jobs)
    # A new worker (a new adapter) retries the same elements, none of them fresh any more.
    from tests.fabrics.kubernetes.conftest import connect

    again = connect(k8s_settings)
    double.forget_calls()
    assert place_many(again, jobs, fresh=()) == first
    assert not double.calls("POST")
    (listing,) = double.calls("GET", r"/jobs$")
    assert listing.query["labelSelector"] == f"{arrays.ARRAY_LABEL} in ({jobs[0].array_id})"
    # And one cancelled before its id was recorded is found among every array's Jobs.
    assert again.find(jobs[1].workload_id) == first[jobs[1].workload_id]
    assert len(double.objects("jobs", NAMESPACE)) == 1


def test_a_secret_left_by_an_attempt_that_died_before_its_job_is_made_again(fabric, double):
    jobs = elements('echo "array $GRIDLANE_ARRAY_INDEX"', [0, 1, 2])
    stale = arrays.render_group([jobs[0], jobs[2]], fabric.settings, NAMESPACE).secret
    fabric.client.create("secrets", stale)  # index 1 there is element 2's
    placed = submit_many(fabric, jobs)
    ids = [placed[j.workload_id] for j in jobs]
    statuses_when(fabric, ids, lambda s: s.state is JobState.SUCCEEDED)
    assert [fabric.tail(i) for i in ids] == ["array 0\n", "array 1\n", "array 2\n"]


def test_other_elements_keep_a_job_each(fabric):
    settings = fabric.settings
    (gang,) = elements("true", [0], nodes=2)
    (own_manifest,) = elements("true", [0], script="apiVersion: batch/v1\nkind: Job\n")
    (alone,) = elements("true", [0], array_id="", array="")
    assert not any(arrays.eligible(j, settings) for j in (gang, own_manifest, alone))
    assert arrays.eligible(elements("true", [0])[0], settings)


def test_external_ids_and_index_ranges_read_back():
    assert arrays.element_of("gla-abc/3") == ("gla-abc", 3)
    assert arrays.element_of(f"gl-{uuid.uuid4()}") is None
    assert arrays.element_of("gla-abc/x") is None
    assert arrays.indexes("0-2,5,7-8") == {0, 1, 2, 5, 7, 8}
    assert arrays.indexes("") == set()

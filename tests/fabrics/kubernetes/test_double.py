"""The API double against example API server responses (tests/k8s_double/fixtures) and REST semantics.

The double may leave out what a cluster sends and Gridlane never reads (service-account volumes,
node images); everything it does send must have the shape a cluster sends.
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import wait_until
from tests.k8s_double import ApiDouble
from tests.k8s_double.selectors import SelectorError, label_selector

FIXTURES = Path(__file__).parents[2] / "k8s_double" / "fixtures"
DATA_MAPS = {"labels", "annotations", "allocatable", "capacity", "requests", "limits", "matchLabels"}
OPAQUE = {"fieldsV1"}  # server-side apply's field sets: their inner shape is the fields that were set
# What a cluster sends that the double does not simulate, and Gridlane does not read.
NOT_SIMULATED = (
    ".spec.volumes",
    ".spec.containers[].volumeMounts",
    ".status.images",
)
JOBS = "/apis/batch/v1/namespaces/default/jobs"
PODS = "/api/v1/namespaces/default/pods"


def fixture(name: str) -> Any:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def shape(value: Any, path: str = "") -> set[str]:
    """Every path with the JSON type found there; list items merged, keys of data maps as `*`."""
    last = path.rsplit(".", 1)[-1]
    if isinstance(value, dict) and last in OPAQUE:
        return {f"{path}:object"}
    if isinstance(value, dict):
        out = {f"{path}:object"}
        for key, item in value.items():
            out |= shape(item, f"{path}.{'*' if last in DATA_MAPS else key}")
        return out
    if isinstance(value, list):
        out = {f"{path}:list"}
        for item in value:
            out |= shape(item, f"{path}[]")
        return out
    kind = {bool: "bool", int: "int", float: "float", str: "str", type(None): "null"}[type(value)]
    return {f"{path}:{kind}"}


def assert_same_shape(double_says: Any, cluster_says: Any) -> None:
    ours, theirs = shape(double_says), shape(cluster_says)
    invented = {p for p in ours - theirs if not any(part in p for part in NOT_SIMULATED)}
    missing = {p for p in theirs - ours if not any(part in p for part in NOT_SIMULATED)}
    assert not invented, f"the double sends what a cluster does not: {sorted(invented)}"
    assert not missing, f"the double leaves out what a cluster sends: {sorted(missing)}"


def call(double: ApiDouble, method: str, path: str, body: Any = None, token: str | None = None) -> tuple[int, Any]:
    request = urllib.request.Request(
        double.url + path,
        method=method,
        data=json.dumps(body).encode() if body is not None else None,
        headers={"Authorization": f"Bearer {token or double.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            code, data = response.status, response.read()
    except urllib.error.HTTPError as error:
        code, data = error.code, error.read()
    try:
        return code, json.loads(data)
    except ValueError:
        return code, data.decode()


ONE_GPU = {
    "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "1"},
    "limits": {"memory": "1Gi", "nvidia.com/gpu": "1"},
}


def job_body(name: str, script: str, **spec: Any) -> dict[str, Any]:
    container = {"name": "main", "image": "busybox:1.36", "command": ["/bin/sh", "-c"], "args": [script]}
    container["resources"] = spec.pop("resources", ONE_GPU)
    if "image" in spec:
        container["image"] = spec.pop("image")
    labels = spec.pop("labels", {})
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "labels": labels},
        "spec": {"backoffLimit": 0, "template": {"spec": {"restartPolicy": "Never", "containers": [container]}}} | spec,
    }


PI = {
    "apiVersion": "batch/v1",
    "kind": "Job",
    "metadata": {"name": "pi", "labels": {"app": "pi"}},
    "spec": {
        "backoffLimit": 4,
        "template": {
            "spec": {
                "containers": [
                    {
                        "name": "pi",
                        "image": "perl:5.34.0",
                        "command": ["perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"],
                    }
                ],
                "restartPolicy": "Never",
            }
        },
    },
}


@pytest.fixture
def double():
    with ApiDouble() as api:
        yield api


def job_when(double: ApiDouble, name: str, predicate) -> dict[str, Any]:
    return wait_until(lambda: (j := call(double, "GET", f"{JOBS}/{name}")[1]) and predicate(j) and j, timeout=60)


def pod_of(double: ApiDouble, job: str, predicate) -> dict[str, Any]:
    def found():
        items = call(double, "GET", f"{PODS}?labelSelector=job-name%3D{job}")[1]["items"]
        found = next((p for p in items if predicate(p)), None)
        return found and call(double, "GET", f"{PODS}/{found['metadata']['name']}")[1]  # a GET carries kind

    return wait_until(found, timeout=60)


def test_version_is_what_a_cluster_says(double):
    assert call(double, "GET", "/version") == (200, fixture("version"))


def test_status_objects_for_404_409_422_and_delete_are_a_clusters(double):
    assert call(double, "GET", f"{JOBS}/nope") == (404, fixture("status-not-found"))
    assert call(double, "POST", JOBS, PI)[0] == 201
    assert call(double, "POST", JOBS, PI) == (409, fixture("status-already-exists"))
    bad = PI | {"metadata": {"name": "Bad_Name"}}
    assert call(double, "POST", JOBS, bad) == (422, fixture("status-invalid"))
    code, deleted = call(double, "DELETE", f"{JOBS}/pi?propagationPolicy=Background")
    want = fixture("status-deleted")
    want["details"]["uid"] = deleted["details"]["uid"]
    assert (code, deleted) == (200, want)


def test_a_created_job_has_a_clusters_shape(double):
    code, created = call(double, "POST", JOBS, PI)
    assert code == 201
    assert_same_shape(created, fixture("job-created"))
    assert created["spec"]["template"]["metadata"]["labels"]["job-name"] == "pi"


def test_a_complete_job_in_a_list_has_a_clusters_shape(double):
    body = json.loads(
        json.dumps(PI).replace('"perl", "-Mbignum=bpi", "-wle", "print bpi(2000)"', '"/bin/sh", "-c", "true"')
    )
    call(double, "POST", JOBS, body)
    job_when(double, "pi", lambda j: "completionTime" in j["status"])
    code, listed = call(double, "GET", f"{JOBS}?labelSelector=app%3Dpi")
    assert code == 200
    assert_same_shape(listed, fixture("job-list-complete"))


def test_a_job_past_its_deadline_has_a_clusters_shape(double):
    call(double, "POST", JOBS, job_body("sleepy", "sleep 60", activeDeadlineSeconds=1))
    running = pod_of(double, "sleepy", lambda p: p["status"]["phase"] == "Running")
    assert_same_shape(running, fixture("pod-running"))
    failed = job_when(double, "sleepy", lambda j: any(c["type"] == "Failed" for c in j["status"].get("conditions", [])))
    assert_same_shape(failed, fixture("job-failed-deadline"))
    assert failed["status"]["conditions"][-1]["reason"] == "DeadlineExceeded"


def test_a_failing_job_and_its_pod_have_a_clusters_shape(double):
    call(double, "POST", JOBS, job_body("exit3", "echo going; exit 3"))
    failed = job_when(double, "exit3", lambda j: j["status"].get("failed"))
    assert_same_shape(failed, fixture("job-failed-backoff"))
    pod = pod_of(double, "exit3", lambda p: p["status"]["phase"] == "Failed")
    assert_same_shape(pod, fixture("pod-failed"))
    assert pod["status"]["containerStatuses"][0]["state"]["terminated"]["exitCode"] == 3


def test_a_suspended_job_has_a_clusters_shape(double):
    body = job_body("queued", "sleep 1", suspend=True, labels={"kueue.x-k8s.io/queue-name": "team-vision"})
    call(double, "POST", JOBS, body)
    suspended = job_when(double, "queued", lambda j: j["status"].get("conditions"))
    assert_same_shape(suspended, fixture("job-suspended"))
    assert call(double, "GET", f"{PODS}")[1]["items"] == []


def test_pods_that_cannot_pull_or_cannot_fit_have_a_clusters_shape(double):
    call(double, "POST", JOBS, job_body("typo", "sleep 60", image="registry.example.org/team/does-not-exist:1"))
    gpus = {
        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "9"},
        "limits": {"memory": "1Gi", "nvidia.com/gpu": "9"},
    }
    call(double, "POST", JOBS, job_body("greedy", "sleep 60", resources=gpus))

    def waiting(p):
        return p["status"].get("containerStatuses", [{}])[0].get("state", {}).get("waiting", {}).get("reason")

    pulling = pod_of(double, "typo", lambda p: waiting(p) == "ImagePullBackOff")
    assert_same_shape(pulling, fixture("pod-image-pull-backoff"))
    stuck = pod_of(double, "greedy", lambda p: p["status"].get("conditions"))
    assert_same_shape(stuck, fixture("pod-unschedulable"))
    assert (
        stuck["status"]["conditions"][0]["message"]
        == fixture("pod-unschedulable")["status"]["conditions"][0]["message"]
    )


def test_a_node_has_a_clusters_shape(double):
    code, node = call(double, "GET", "/api/v1/nodes/gpu-node-1")
    assert code == 200
    assert_same_shape(node, fixture("node"))


def test_discovery_answers_api_and_apis(double):
    assert call(double, "GET", "/api")[1]["versions"] == ["v1"]
    groups = {g["name"] for g in call(double, "GET", "/apis")[1]["groups"]}
    assert {"batch", "scheduling.volcano.sh", "kueue.x-k8s.io"} <= groups
    resources = call(double, "GET", "/apis/batch/v1")[1]["resources"]
    assert [r["name"] for r in resources] == ["jobs"]
    # What deploy/kubernetes/ creates: Deployments, Ingresses, and Secrets and ConfigMaps in the core group.
    assert {"apps", "networking.k8s.io"} <= groups
    assert [r["kind"] for r in call(double, "GET", "/apis/apps/v1")[1]["resources"]] == ["Deployment"]
    assert [r["kind"] for r in call(double, "GET", "/apis/networking.k8s.io/v1")[1]["resources"]] == ["Ingress"]
    assert {"Secret", "ConfigMap"} <= {r["kind"] for r in call(double, "GET", "/api/v1")[1]["resources"]}


def test_a_wrong_token_is_401_and_an_unknown_path_404(double):
    assert call(double, "GET", "/api/v1/nodes", token="wrong")[1]["reason"] == "Unauthorized"
    assert call(double, "GET", "/apis/apps/v1/namespaces/default/statefulsets")[0] == 404


def test_creating_in_a_namespace_that_does_not_exist_is_404(double):
    code, body = call(double, "POST", "/apis/batch/v1/namespaces/elsewhere/jobs", PI)
    assert (code, body["message"]) == (404, 'namespaces "elsewhere" not found')


@pytest.mark.parametrize(
    ("selector", "want"),
    [
        ("app=a", {"a"}),
        ("app==a", {"a"}),
        ("app!=a", {"b", "c"}),
        ("app in (a, b)", {"a", "b"}),
        ("app notin (a,b)", {"c"}),
        ("tier", {"a", "b"}),
        ("!tier", {"c"}),
        ("app in (a,b),tier=gpu", {"a"}),
    ],
)
def test_label_selectors_equality_and_set_based(selector, want):
    objects = {"a": {"app": "a", "tier": "gpu"}, "b": {"app": "b", "tier": "cpu"}, "c": {"app": "c"}}
    matches = label_selector(selector)
    assert {name for name, labels in objects.items() if matches(labels)} == want


def test_a_selector_that_does_not_parse_is_400(double):
    with pytest.raises(SelectorError):
        label_selector("app in a")
    code, body = call(double, "GET", f"{JOBS}?labelSelector=app%20in%20a")
    assert (code, body["reason"]) == (400, "BadRequest")


def test_resource_versions_grow_and_a_stale_update_conflicts(double):
    _, created = call(double, "POST", JOBS, job_body("rv", "sleep 60", suspend=True))
    _, patched = call(double, "PATCH", f"{JOBS}/rv", {"metadata": {"labels": {"x": "y"}}})
    assert int(patched["metadata"]["resourceVersion"]) > int(created["metadata"]["resourceVersion"])
    stale = {"metadata": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    code, body = call(double, "PATCH", f"{JOBS}/rv", stale)
    assert (code, body["reason"]) == (409, "Conflict")
    listed = call(double, "GET", JOBS)[1]
    assert int(listed["metadata"]["resourceVersion"]) >= int(patched["metadata"]["resourceVersion"])


SECRETS = "/api/v1/namespaces/default/secrets"
CONFIGMAPS = "/api/v1/namespaces/default/configmaps"


def test_a_secrets_string_data_joins_its_data_base64_encoded_and_bad_base64_is_400(double):
    body = {"metadata": {"name": "s"}, "data": {"A": "b25l"}, "stringData": {"B": "two"}}
    code, created = call(double, "POST", SECRETS, body)
    assert code == 201
    assert (created["data"], created["type"]) == ({"A": "b25l", "B": "dHdv"}, "Opaque")
    assert "stringData" not in created
    code, refused = call(double, "POST", SECRETS, {"metadata": {"name": "t"}, "data": {"A": "not base64!"}})
    assert (code, refused["reason"]) == (400, "BadRequest")
    assert (
        refused["message"]
        == 'Secret in version "v1" cannot be handled as a Secret: illegal base64 data at input byte 3'
    )
    code, refused = call(double, "POST", SECRETS, {"metadata": {"name": "u"}, "data": {"a key": "b25l"}})
    assert (code, refused["details"]["causes"][0]["field"]) == (422, "data[a key]")


def test_a_config_maps_values_and_every_annotation_must_be_strings(double):
    assert call(double, "POST", CONFIGMAPS, {"metadata": {"name": "c"}, "data": {"N": "2"}})[0] == 201
    code, refused = call(double, "POST", CONFIGMAPS, {"metadata": {"name": "d"}, "data": {"N": 2}})
    assert (code, refused["reason"]) == (400, "BadRequest")
    assert "cannot unmarshal number into Go struct field ConfigMap.data of type string" in refused["message"]
    annotated = {"metadata": {"name": "e", "annotations": {"timeout": 75}}}
    assert call(double, "POST", CONFIGMAPS, annotated)[0] == 400


def test_invalid_gpu_quantities_are_refused_like_a_cluster_does(double):
    half = {"requests": {"nvidia.com/gpu": "500m"}, "limits": {"nvidia.com/gpu": "500m"}}
    code, body = call(double, "POST", JOBS, job_body("half", "true", resources=half))
    assert (code, body["reason"]) == (422, "Invalid")
    assert "must be an integer" in body["message"]
    no_limit = {"requests": {"nvidia.com/gpu": "1"}}
    assert call(double, "POST", JOBS, job_body("nolimit", "true", resources=no_limit))[0] == 422


def test_deleting_a_job_orphans_its_pods_by_default_and_background_takes_them(double):
    for name in ("orphaning", "background"):
        call(double, "POST", JOBS, job_body(name, "sleep 60"))
        pod_of(double, name, lambda p: p["status"]["phase"] == "Running")
    call(double, "DELETE", f"{JOBS}/orphaning")
    call(double, "DELETE", f"{JOBS}/background?propagationPolicy=Background")
    wait_until(lambda: not double.objects("pods", selector="job-name=background"), timeout=60)
    time.sleep(0.1)
    (orphan,) = double.objects("pods", selector="job-name=orphaning")
    assert "ownerReferences" not in orphan["metadata"]


def test_foreground_deletion_keeps_the_job_until_its_pods_are_gone(double):
    call(double, "POST", JOBS, job_body("fg", "sleep 60"))
    pod_of(double, "fg", lambda p: p["status"]["phase"] == "Running")
    code, body = call(double, "DELETE", f"{JOBS}/fg?propagationPolicy=Foreground")
    assert code == 200
    assert body["metadata"]["finalizers"] == ["foregroundDeletion"]
    wait_until(lambda: call(double, "GET", f"{JOBS}/fg")[0] == 404, timeout=60)
    assert not double.objects("pods", selector="job-name=fg")


def test_an_indexed_job_runs_one_pod_per_index_with_hostnames_and_rank_env(double):
    body = job_body("gang", "echo rank $JOB_COMPLETION_INDEX on $HOSTNAME", completionMode="Indexed")
    body["spec"] |= {"completions": 2, "parallelism": 2}
    body["spec"]["template"]["spec"]["subdomain"] = "gang"
    call(double, "POST", JOBS, body)
    done = job_when(double, "gang", lambda j: "completionTime" in j["status"])
    assert done["status"]["completedIndexes"] == "0-1"
    logs = sorted(
        call(double, "GET", f"{PODS}/{p['metadata']['name']}/log")[1] for p in double.objects("pods", "default")
    )
    assert logs == ["rank 0 on gang-0\n", "rank 1 on gang-1\n"]


def test_a_finished_job_goes_after_its_ttl(double):
    call(double, "POST", JOBS, job_body("brief", "true", ttlSecondsAfterFinished=0))
    wait_until(lambda: call(double, "GET", f"{JOBS}/brief")[0] == 404, timeout=60)
    wait_until(lambda: not double.objects("pods", "default"), timeout=60)


def test_kueue_admission_unsuspends_the_job_and_records_it_on_the_workload(double):
    body = job_body("kq", "true", suspend=True, labels={"kueue.x-k8s.io/queue-name": "team-vision"})
    _, job = call(double, "POST", JOBS, body)
    (workload,) = double.objects("workloads.kueue.x-k8s.io", "default")
    assert workload["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == job["metadata"]["uid"]
    assert workload["status"]["conditions"][0]["status"] == "False"
    double.kueue_admit("default", "kq")
    job_when(double, "kq", lambda j: "completionTime" in j["status"])


def test_pod_logs_honour_tail_lines_and_wait_for_the_container(double):
    call(double, "POST", JOBS, job_body("talk", "echo one; echo two; echo three; sleep 60"))
    pod = pod_of(double, "talk", lambda p: True)
    path = f"{PODS}/{pod['metadata']['name']}/log"
    early = call(double, "GET", path)
    assert early[0] in (200, 400)
    wait_until(lambda: call(double, "GET", path) == (200, "one\ntwo\nthree\n"), timeout=60)
    assert call(double, "GET", path + "?tailLines=2") == (200, "two\nthree\n")


def test_injected_faults_answer_with_a_status_then_stop(double):
    double.fail("GET", r"/jobs$", 500)
    assert call(double, "GET", JOBS)[1]["reason"] == "InternalError"
    assert call(double, "GET", JOBS)[0] == 200


def test_a_backoff_limit_per_index_fails_indexes_alone_and_the_job_with_failed_indexes(double):
    body = job_body("perindex", "sleep 0.1; exit $JOB_COMPLETION_INDEX", completionMode="Indexed")
    del body["spec"]["backoffLimit"]
    body["spec"] |= {"completions": 3, "parallelism": 3, "backoffLimitPerIndex": 1}
    code, created = call(double, "POST", JOBS, body)
    assert code == 201
    assert created["spec"]["backoffLimit"] == 2147483647  # each index has its own limit
    done = job_when(double, "perindex", lambda j: any(c["type"] == "Failed" for c in j["status"].get("conditions", [])))
    failed = next(c for c in done["status"]["conditions"] if c["type"] == "Failed")
    assert (failed["reason"], failed["message"]) == ("FailedIndexes", "Job has failed indexes")
    assert (done["status"]["completedIndexes"], done["status"]["failedIndexes"]) == ("0", "1-2")
    assert done["status"]["failed"] == 4  # indexes 1 and 2 each ran twice: once, and the one retry allowed
    retries = [p for p in double.objects("pods", "default") if p["metadata"]["annotations"][INDEX_KEY] == "1"]
    counts = sorted(p["metadata"]["annotations"]["batch.kubernetes.io/job-index-failure-count"] for p in retries)
    assert counts == ["0", "1"]


def test_fail_index_in_a_pod_failure_policy_fails_the_index_without_a_retry(double):
    body = job_body("failindex", "exit 42", completionMode="Indexed")
    body["spec"] |= {"completions": 1, "parallelism": 1, "backoffLimitPerIndex": 3}
    del body["spec"]["backoffLimit"]
    body["spec"]["podFailurePolicy"] = {
        "rules": [{"action": "FailIndex", "onExitCodes": {"containerName": "main", "operator": "In", "values": [42]}}]
    }
    assert call(double, "POST", JOBS, body)[0] == 201
    done = job_when(double, "failindex", lambda j: j["status"].get("failedIndexes") == "0")
    assert len(double.objects("pods", "default", "job-name=failindex")) == 1
    assert done["status"]["failed"] == 1


def test_a_deleted_pod_fails_its_index_when_each_index_has_a_backoff_limit(double):
    body = job_body("deleted", "sleep 60", completionMode="Indexed")
    del body["spec"]["backoffLimit"]  # a backoffLimit of 0 would fail the whole Job at the first failure
    body["spec"] |= {"completions": 2, "parallelism": 2, "backoffLimitPerIndex": 0}
    call(double, "POST", JOBS, body)
    pod = pod_of(double, "deleted", lambda p: p["metadata"]["annotations"][INDEX_KEY] == "1")
    assert call(double, "DELETE", f"{PODS}/{pod['metadata']['name']}")[0] == 200
    job = job_when(double, "deleted", lambda j: j["status"].get("failedIndexes") == "1")
    assert job["status"].get("active") == 1  # index 0 runs on; index 1 is not started again
    time.sleep(0.2)
    left = double.objects("pods", "default", "job-name=deleted")
    assert [p["metadata"]["annotations"][INDEX_KEY] for p in left] == ["0"]


def test_per_index_fields_are_validated_as_a_cluster_does(double):
    body = job_body("bad", "true", backoffLimitPerIndex=1, maxFailedIndexes=1)
    code, status = call(double, "POST", JOBS, body)
    assert code == 422
    assert {c["field"] for c in status["details"]["causes"]} == {"spec.backoffLimitPerIndex"}
    body = job_body("bad", "true", completionMode="Indexed", completions=2, maxFailedIndexes=1)
    code, status = call(double, "POST", JOBS, body)
    assert [c["field"] for c in status["details"]["causes"]] == ["spec.maxFailedIndexes"]


def test_parallelism_changes_by_patch_and_completions_only_with_it_on_an_indexed_job(double):
    body = job_body("elastic", "sleep 60", completionMode="Indexed", completions=2, parallelism=1)
    call(double, "POST", JOBS, body)
    patch = double.url + f"{JOBS}/elastic"
    code, job = _merge_patch(patch, double.token, {"spec": {"parallelism": 2}})
    assert (code, job["spec"]["parallelism"]) == (200, 2)
    wait_until(lambda: len(double.objects("pods", "default", "job-name=elastic")) == 2, timeout=60)
    code, status = _merge_patch(patch, double.token, {"spec": {"completions": 5}})
    assert code == 422
    assert status["details"]["causes"][0]["message"] == "Invalid value: 5: field is immutable"
    code, job = _merge_patch(patch, double.token, {"spec": {"completions": 3, "parallelism": 3}})
    assert (code, job["spec"]["completions"]) == (200, 3)  # elastic: both together, equal
    code, status = _merge_patch(patch, double.token, {"spec": {"template": {"metadata": {"labels": {"a": "b"}}}}})
    assert code == 422


INDEX_KEY = "batch.kubernetes.io/job-completion-index"


def _merge_patch(url: str, token: str, body: Any) -> tuple[int, Any]:
    request = urllib.request.Request(
        url,
        method="PATCH",
        data=json.dumps(body).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/merge-patch+json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())

"""The double's simulated control plane: Job controller, scheduler (default and Volcano), kubelet, GC, TTL, Kueue.

One thread steps all of them every tick over the same store the HTTP side serves.

The kubelet runs no containers: it reads a container's argv by the convention in programs.py.
Images whose name contains `does-not-exist` never pull (ErrImagePull, then ImagePullBackOff).
A pod no node has room for stays Pending with PodScheduled=False, reason Unschedulable.
"""

from __future__ import annotations

import base64
import copy
import re
import threading
import time
import uuid
from collections import defaultdict
from decimal import Decimal
from typing import Any

from tests.k8s_double import kueue
from tests.k8s_double.objects import BY_NAME, ApiError, now_rfc3339, quantity
from tests.k8s_double.pods import _condition, _live, _qos, _requests, _set_condition, _true, job_finished
from tests.k8s_double.programs import Run, Timers, program
from tests.k8s_double.selectors import label_selector
from tests.k8s_double.server import Api, Store

JOBS, PODS, NODES = BY_NAME["jobs.batch"], BY_NAME["pods"], BY_NAME["nodes"]
PODGROUPS, WORKLOADS = BY_NAME["podgroups.scheduling.volcano.sh"], BY_NAME["workloads.kueue.x-k8s.io"]
KUEUE_LABEL = "kueue.x-k8s.io/queue-name"
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
INDEX = "batch.kubernetes.io/job-completion-index"
PULL_FAILS = "does-not-exist"


class Cluster:
    """Steps the controllers over the store; `run` loops until stopped."""

    def __init__(self, store: Store, api: Api, *, start_delay_s: float = 0.05) -> None:
        self.store = store
        self.start_delay_s = start_delay_s
        self.runs: dict[str, Run] = {}
        self.timers = Timers()
        self.kueue_message = kueue.PENDING
        # Jobs with a backoff limit per index: failures per index by Job uid, and the pods already counted.
        self.index_failures: defaultdict[str, defaultdict[int, int]] = defaultdict(lambda: defaultdict(int))
        self.counted: set[str] = set()
        self.pod_failures: defaultdict[str, int] = defaultdict(int)  # by Job uid: its failed pods, counted once
        self.peaks: dict[str, int] = {}  # label selector -> most live pods at once (watch)
        self.failed_creates: dict[str, str] = {}  # Job name -> why admission refused its last pod (FailedCreate)
        api.on_create.append(self._created)
        api.pod_logs = self.logs

    # -- test controls -------------------------------------------------------------------------

    def kueue_admit(self, namespace: str, job_name: str) -> None:
        with self.store.lock:
            kueue.admit(self.store, namespace, job_name)

    def logs(self, pod: dict[str, Any]) -> str:
        run = self.runs.get(pod["metadata"]["uid"])
        if run is None:
            return ""
        elapsed = time.time() - run.started
        return "".join(f"{line}\n" for at, line in run.program.lines if at <= elapsed)

    # -- the loop ------------------------------------------------------------------------------

    def run(self, stop: threading.Event, tick_s: float) -> None:
        while not stop.wait(tick_s):
            self.step()

    def step(self) -> None:
        with self.store.lock:
            self._jobs()
            self._schedule()
            self._kubelet()
            self._collect()
            kueue.account(self.store)
            self._observe()

    def watch(self, selector: str) -> None:
        """Count, after every step, the live pods (pending or running) whose labels match; see `peak`."""
        with self.store.lock:
            self.peaks.setdefault(selector, 0)

    def peak(self, selector: str) -> int:
        """The most live pods matching a watched selector there have been at once since `watch`."""
        with self.store.lock:
            return self.peaks[selector]

    def _observe(self) -> None:
        for selector, most in self.peaks.items():
            matches = label_selector(selector)
            live = sum(
                1
                for pod in self.store.items(PODS)
                if _live(pod)
                and not pod["metadata"].get("deletionTimestamp")
                and matches(pod["metadata"].get("labels") or {})
            )
            self.peaks[selector] = max(most, live)

    # -- Kueue ---------------------------------------------------------------------------------

    def _created(self, kind: Any, obj: dict[str, Any]) -> None:
        if kind is JOBS and KUEUE_LABEL in (obj["metadata"].get("labels") or {}):
            kueue.workload_for(self.store, obj, self.kueue_message)

    # -- the Job controller --------------------------------------------------------------------

    def _jobs(self) -> None:
        pods_of: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in self.store.items(PODS):
            for ref in pod["metadata"].get("ownerReferences") or []:
                pods_of[ref["uid"]].append(pod)
        for job in self.store.items(JOBS):
            if job["metadata"].get("deletionTimestamp") or job_finished(job):
                continue
            before = copy.deepcopy(job["status"])
            self._sync_job(job, pods_of[job["metadata"]["uid"]])
            if job["status"] != before:
                self.store.touch(job)

    def _sync_job(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> None:
        spec, st, uid = job["spec"], job["status"], job["metadata"]["uid"]
        conditions = st.setdefault("conditions", [])
        active = [p for p in pods if _live(p) and not p["metadata"].get("deletionTimestamp")]
        if spec.get("suspend"):
            for pod in active:  # suspending deletes the active pods; they do not count as failures
                self.store.remove(pod)
                self.runs.pop(pod["metadata"]["uid"], None)
            _set_condition(conditions, _condition("Suspended", "True", "JobSuspended", "Job suspended"))
            st.pop("startTime", None)
            st.pop("active", None)
            self.timers.job_started.pop(uid, None)
            st |= {"ready": 0, "terminating": 0, "uncountedTerminatedPods": {}}
            return
        if _true(job, "Suspended"):
            _set_condition(conditions, _condition("Suspended", "False", "JobResumed", "Job resumed"))
        if uid not in self.timers.job_started:
            self.timers.job_started[uid] = time.time()
            st["startTime"] = now_rfc3339()
        if not conditions:
            del st["conditions"]
        indexed = spec.get("completionMode") == "Indexed"
        per_index = spec.get("backoffLimitPerIndex") if indexed else None
        succeeded = [p for p in pods if p["status"].get("phase") == "Succeeded"]
        failed = [p for p in pods if p["status"].get("phase") == "Failed"]
        completions = spec.get("completions", 1)
        done_indexes = {int(p["metadata"]["annotations"][INDEX]) for p in succeeded} if indexed else set()
        failed_indexes: set[int] = set()
        fail_job = ""
        if per_index is not None:
            fail_job = self._count_index_failures(job, pods)
            tally = self.index_failures[uid]
            failed_indexes = {i for i, n in tally.items() if n > per_index} - done_indexes
        for pod in succeeded + failed:  # accounted for: the controller lets go of the pod
            pod["metadata"].pop("finalizers", None)
        _count(st, "active", len(active))
        st["ready"] = sum(1 for p in active if _true(p, "Ready"))
        _count(st, "succeeded", len(succeeded))
        failures = self.pod_failures[uid] if per_index is not None else len(failed)
        _count(st, "failed", failures)
        st["terminating"] = 0
        st["uncountedTerminatedPods"] = {}
        if indexed and done_indexes:
            st["completedIndexes"] = _ranges(sorted(done_indexes))
        if per_index is not None:  # set, if only to "", whenever the Job has a backoff limit per index
            st["failedIndexes"] = _ranges(sorted(failed_indexes)) if failed_indexes else ""
        if fail_job:
            self._fail(job, active, "PodFailurePolicy", fail_job)
            return
        if failures > spec.get("backoffLimit", 6):
            self._fail(job, active, "BackoffLimitExceeded", "Job has reached the specified backoff limit")
            return
        most_failed = spec.get("maxFailedIndexes")
        if most_failed is not None and len(failed_indexes) > most_failed:
            message = "Job has exceeded the specified maximal number of failed indexes"
            self._fail(job, active, "MaxFailedIndexesExceeded", message)
            return
        if failed_indexes and len(done_indexes) + len(failed_indexes) >= completions:
            self._fail(job, active, "FailedIndexes", "Job has failed indexes")
            return
        deadline = spec.get("activeDeadlineSeconds")
        if deadline is not None and time.time() - self.timers.job_started[uid] >= deadline:
            self._fail(job, active, "DeadlineExceeded", "Job was active longer than specified deadline")
            return
        if (len(done_indexes) if indexed else len(succeeded)) >= completions:
            message = "Reached expected number of succeeded pods"
            st.setdefault("conditions", [])
            _set_condition(st["conditions"], _condition("SuccessCriteriaMet", "True", "CompletionsReached", message))
            _set_condition(st["conditions"], _condition("Complete", "True", "CompletionsReached", message))
            st["completionTime"] = now_rfc3339()
            self.timers.job_finished[uid] = time.time()
            return
        parallelism = spec.get("parallelism", 1)
        if indexed:
            busy = {int(p["metadata"]["annotations"][INDEX]) for p in active} | done_indexes | failed_indexes
            for index in range(completions):  # lowest index first, as the Job controller starts them
                if len(active) >= parallelism:
                    break
                if index not in busy and not self._create_pod(job, index, active):
                    break
        else:
            while len(active) < min(parallelism, completions - len(succeeded)):
                if not self._create_pod(job, None, active):
                    break
        _count(st, "active", len(active))

    def _count_index_failures(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> str:
        """Count each failed pod of a Job with a backoff limit per index once against its index. A pod being deleted
        counts as failed (podReplacementPolicy TerminatingOrFailed, the default without a pod failure policy; with
        one, only once it has failed). A podFailurePolicy rule on exit codes may fail the index at once (FailIndex),
        not count it (Ignore) or fail the Job (FailJob: its message is returned, else "")."""
        spec, uid = job["spec"], job["metadata"]["uid"]
        rules = (spec.get("podFailurePolicy") or {}).get("rules") or []
        tally = self.index_failures[uid]
        for pod in pods:
            phase, meta = pod["status"].get("phase"), pod["metadata"]
            terminating = meta.get("deletionTimestamp") and phase != "Succeeded"
            if pod["metadata"]["uid"] in self.counted or not (phase == "Failed" or terminating):
                continue
            self.counted.add(meta["uid"])
            index = int((meta.get("annotations") or {}).get(INDEX, "0"))
            action, why = _policy_action(rules, pod) if phase == "Failed" else ("Count", "")
            if action == "FailJob":
                return f"{why} for pod {meta['namespace']}/{meta['name']}"
            if action in ("FailIndex", "Count"):  # an ignored failure counts nowhere
                self.pod_failures[uid] += 1
                tally[index] += 1
            if action == "FailIndex":
                tally[index] = max(tally[index], spec["backoffLimitPerIndex"] + 1)
            if meta.get("deletionTimestamp") and not pod["spec"].get("nodeName"):
                self.store.remove(pod)  # the pod GC takes a deleted pod no node ever ran
        return ""

    def _fail(self, job: dict[str, Any], active: list[dict[str, Any]], reason: str, message: str) -> None:
        for pod in active:
            self._terminate(pod, 143, "Error")
        st = job["status"]
        st.pop("active", None)
        st["ready"] = 0
        _count(st, "failed", st.get("failed", 0) + len(active))
        st.setdefault("conditions", [])
        _set_condition(st["conditions"], _condition("FailureTarget", "True", reason, message))
        _set_condition(st["conditions"], _condition("Failed", "True", reason, message))
        self.timers.job_finished[job["metadata"]["uid"]] = time.time()

    def _create_pod(self, job: dict[str, Any], index: int | None, active: list[dict[str, Any]]) -> bool:
        """A new pod for the Job, or, when admission refuses it (Pod Security), a FailedCreate event and False."""
        try:
            active.append(self._new_pod(job, index))
        except ApiError as refused:
            self.failed_creates[job["metadata"]["name"]] = str(refused.body.get("message", ""))
            return False
        return True

    def _new_pod(self, job: dict[str, Any], index: int | None) -> dict[str, Any]:
        meta, template = job["metadata"], copy.deepcopy(job["spec"]["template"])
        tmeta, spec = template.get("metadata") or {}, template["spec"]
        labels = dict(tmeta.get("labels") or {})
        annotations = dict(tmeta.get("annotations") or {})
        prefix = f"{meta['name']}-"
        if index is not None:
            prefix = f"{meta['name']}-{index}-"
            labels[INDEX] = str(index)
            annotations[INDEX] = str(index)
            if job["spec"].get("backoffLimitPerIndex") is not None:
                failures = self.index_failures[meta["uid"]].get(index, 0)
                annotations["batch.kubernetes.io/job-index-failure-count"] = str(failures)
            spec["hostname"] = f"{meta['name']}-{index}"
            for container in spec["containers"]:
                env = container.setdefault("env", [])
                ref = {"fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{INDEX}']"}}
                env.append({"name": "JOB_COMPLETION_INDEX", "valueFrom": ref})
        body = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": prefix + uuid.uuid4().hex[:5],
                "generateName": prefix,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [_owner(job)],
                "finalizers": ["batch.kubernetes.io/job-tracking"],
            },
            "spec": spec,
        }
        if not annotations:
            del body["metadata"]["annotations"]
        pod = self.store.create(PODS, meta["namespace"], body, manager="kube-controller-manager")
        pod["status"] = {"phase": "Pending", "qosClass": _qos(pod)}
        return pod

    def _terminate(self, pod: dict[str, Any], code: int, reason: str) -> None:
        now = now_rfc3339()
        run = self.runs.get(pod["metadata"]["uid"])
        started = now_rfc3339(run.started) if run else now
        st = pod["status"]
        st["phase"] = "Succeeded" if code == 0 else "Failed"
        name = pod["spec"]["containers"][0]["name"]
        image = pod["spec"]["containers"][0]["image"]
        st["containerStatuses"] = [
            {
                "containerID": f"containerd://{uuid.uuid4().hex}",
                "image": image,
                "imageID": f"{image}@sha256:{uuid.uuid4().hex}{uuid.uuid4().hex}",
                "lastState": {},
                "name": name,
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {
                    "terminated": {
                        "containerID": f"containerd://{uuid.uuid4().hex}",
                        "exitCode": code,
                        "finishedAt": now,
                        "reason": reason,
                        "startedAt": started,
                    }
                },
            }
        ]
        conditions = st.setdefault("conditions", [])
        ended = "PodCompleted" if code == 0 else "PodFailed"
        for ctype in ("Ready", "ContainersReady"):
            _set_condition(conditions, _condition(ctype, "False", ended, probe=False) | {"lastProbeTime": None})
        _set_condition(
            conditions, _condition("PodReadyToStartContainers", "False", probe=False) | {"lastProbeTime": None}
        )
        self.store.touch(pod)

    # -- schedulers ----------------------------------------------------------------------------

    def _free(self) -> dict[str, dict[str, Decimal]]:
        """Per ready node: allocatable minus the requests of live pods bound to it."""
        free: dict[str, dict[str, Decimal]] = {}
        for n in self.store.items(NODES):
            if _true(n, "Ready") and not n["spec"].get("unschedulable"):
                free[n["metadata"]["name"]] = {r: quantity(v) for r, v in n["status"]["allocatable"].items()}
        for pod in self.store.items(PODS):
            where = pod["spec"].get("nodeName")
            if where in free and _live(pod):
                for resource, amount in _requests(pod).items():
                    free[where][resource] = free[where].get(resource, Decimal(0)) - amount
        return free

    @staticmethod
    def _fit(need: dict[str, Decimal], free: dict[str, dict[str, Decimal]]) -> tuple[str | None, dict[str, int]]:
        """The first node with room, or None and how many nodes lacked each resource."""
        short: dict[str, int] = defaultdict(int)
        for name in sorted(free):
            lacking = [r for r, amount in need.items() if amount > free[name].get(r, Decimal(0))]
            if not lacking:
                return name, {}
            short[sorted(lacking)[0]] += 1
        return None, short

    def _schedule(self) -> None:
        free = self._free()
        total_nodes = len(self.store.items(NODES))
        gangs: defaultdict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
        for pod in sorted(self.store.items(PODS), key=lambda p: p["metadata"]["creationTimestamp"]):
            if pod["spec"].get("nodeName") or pod["status"].get("phase") != "Pending":
                continue
            if pod["metadata"].get("deletionTimestamp"):
                continue
            if pod["spec"].get("schedulerName") == "volcano":
                group = (pod["metadata"].get("annotations") or {}).get(VOLCANO_GROUP, "")
                gangs[pod["metadata"]["namespace"], group].append(pod)
                continue
            need = _requests(pod)
            name, short = self._fit(need, free)
            if name is None:
                self._unschedulable(pod, total_nodes, short)
                continue
            for resource, amount in need.items():
                free[name][resource] = free[name].get(resource, Decimal(0)) - amount
            self._bind(pod, name)
        for (namespace, group), pods in gangs.items():
            self._schedule_gang(namespace, group, pods, free)

    def _schedule_gang(
        self, namespace: str, group: str, pods: list[dict[str, Any]], free: dict[str, dict[str, Decimal]]
    ) -> None:
        podgroup = self.store.get(PODGROUPS, namespace, group)
        if podgroup is None:
            return  # Volcano leaves pods of an unknown group alone
        min_member = podgroup["spec"].get("minMember", 1)
        trial = copy.deepcopy(free)
        placed: list[tuple[dict[str, Any], str]] = []
        for pod in pods:
            name, _ = self._fit(_requests(pod), trial)
            if name is None:
                break
            for resource, amount in _requests(pod).items():
                trial[name][resource] -= amount
            placed.append((pod, name))
        bound = sum(
            1
            for p in self.store.items(PODS, namespace)
            if (p["metadata"].get("annotations") or {}).get(VOLCANO_GROUP) == group and p["spec"].get("nodeName")
        )
        st = podgroup.setdefault("status", {})
        before = copy.deepcopy(st)
        if len(placed) == len(pods) and len(pods) + bound >= min_member:
            free.clear()
            free.update(trial)
            for pod, name in placed:
                self._bind(pod, name)
            st["phase"], st["running"] = "Running", len(pods) + bound
            st.pop("conditions", None)
        else:
            n = len(pods)
            message = (
                f"{n}/{n} tasks in gang unschedulable: pod group is not ready, {n} Pending, "
                f"{min_member} minAvailable; Pending: {n} Unschedulable"
            )
            st["phase"] = "Pending"
            conditions = st.setdefault("conditions", [])
            _set_condition(
                conditions,
                {"type": "Unschedulable", "status": "True", "reason": "NotEnoughResources", "message": message}
                | {"lastTransitionTime": now_rfc3339(), "transitionID": str(uuid.uuid4())},
            )
        if st != before:
            self.store.touch(podgroup)

    @staticmethod
    def _status_manager(pod: dict[str, Any], manager: str) -> None:
        """Record who last wrote the pod's status, as server-side field management does."""
        fields = pod["metadata"].setdefault("managedFields", [])
        fields[:] = [f for f in fields if f.get("subresource") != "status"]
        fields.append(
            {
                "apiVersion": "v1",
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:status": {"f:conditions": {}}},
                "manager": manager,
                "operation": "Update",
                "subresource": "status",
                "time": now_rfc3339(),
            }
        )

    def _unschedulable(self, pod: dict[str, Any], total_nodes: int, short: dict[str, int]) -> None:
        counts = " ".join(f"{k} Insufficient {r}." for r, k in sorted(short.items()))
        message = (
            f"0/{total_nodes} nodes are available: {counts} preemption: 0/{total_nodes} nodes are available: "
            f"{total_nodes} No preemption victims found for incoming pod."
        )
        conditions = pod["status"].setdefault("conditions", [])
        if not any(c["type"] == "PodScheduled" and c.get("message") == message for c in conditions):
            _set_condition(
                conditions,
                _condition("PodScheduled", "False", "Unschedulable", message) | {"lastProbeTime": None},
            )
            self._status_manager(pod, "kube-scheduler")
            self.store.touch(pod)

    def _bind(self, pod: dict[str, Any], node_name: str) -> None:
        """Bind to the node; its kubelet makes the sandbox at once and then waits to start the container."""
        pod["spec"]["nodeName"] = node_name
        conditions = pod["status"].setdefault("conditions", [])
        unready = f"containers with unready status: [{pod['spec']['containers'][0]['name']}]"
        for ctype, status, reason, message in (
            ("PodReadyToStartContainers", "True", "", ""),
            ("Initialized", "True", "", ""),
            ("Ready", "False", "ContainersNotReady", unready),
            ("ContainersReady", "False", "ContainersNotReady", unready),
            ("PodScheduled", "True", "", ""),
        ):
            _set_condition(conditions, _condition(ctype, status, reason, message) | {"lastProbeTime": None})
        pod["status"]["podIP"] = f"10.244.1.{abs(hash(pod['metadata']['uid'])) % 250 + 2}"
        pod["status"]["podIPs"] = [{"ip": pod["status"]["podIP"]}]
        node_obj = self.store.get(NODES, "", node_name) or {}
        addresses = (node_obj.get("status") or {}).get("addresses") or [{"address": "10.0.0.1"}]
        pod["status"]["hostIP"] = addresses[0]["address"]
        pod["status"]["hostIPs"] = [{"ip": addresses[0]["address"]}]
        pod["status"]["startTime"] = now_rfc3339()
        name, image = pod["spec"]["containers"][0]["name"], pod["spec"]["containers"][0]["image"]
        pod["status"]["containerStatuses"] = [
            {
                "image": image,
                "imageID": "",
                "lastState": {},
                "name": name,
                "ready": False,
                "restartCount": 0,
                "started": False,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        ]
        self.timers.bound[pod["metadata"]["uid"]] = time.time()
        self._status_manager(pod, "kubelet")
        self.store.touch(pod)

    # -- the kubelet ---------------------------------------------------------------------------

    def _kubelet(self) -> None:
        now = time.time()
        for pod in self.store.items(PODS):
            uid, st = pod["metadata"]["uid"], pod["status"]
            if not pod["spec"].get("nodeName"):
                continue
            if pod["metadata"].get("deletionTimestamp"):
                self.store.remove(pod)
                self.runs.pop(uid, None)
                continue
            if st.get("phase") == "Pending" and now - self.timers.bound.get(uid, now) >= self.start_delay_s:
                image = pod["spec"]["containers"][0]["image"]
                if PULL_FAILS in image:
                    self._pull_fails(pod, image, now)
                else:
                    self._start(pod, now)
            elif st.get("phase") == "Running":
                run = self.runs.get(uid)
                if run is not None and now - run.started >= run.program.duration:
                    code = run.program.exit_code
                    self._terminate(pod, code, "Completed" if code == 0 else "Error")

    def _pull_fails(self, pod: dict[str, Any], image: str, now: float) -> None:
        uid = pod["metadata"]["uid"]
        first = self.timers.pull_failed.setdefault(uid, now)
        if now - first < 0.1:
            reason = "ErrImagePull"
            message = (
                f'failed to pull and unpack image "{image}": failed to resolve reference "{image}": {image}: not found'
            )
        else:
            reason, message = "ImagePullBackOff", f'Back-off pulling image "{image}"'
        state = pod["status"]["containerStatuses"][0]["state"]
        if state.get("waiting", {}).get("reason") != reason:
            state["waiting"] = {"message": message, "reason": reason}
            self.store.touch(pod)

    def _start(self, pod: dict[str, Any], now: float) -> None:
        container = pod["spec"]["containers"][0]
        env = self._env(pod, container)
        argv = container.get("command", []) + container.get("args", [])
        self.runs[pod["metadata"]["uid"]] = Run(now, program(argv, env, self._files(pod, container)))
        st = pod["status"]
        st["phase"] = "Running"
        cs = st["containerStatuses"][0]
        cs.update(
            {
                "containerID": f"containerd://{uuid.uuid4().hex}",
                "imageID": f"{container['image']}@sha256:{uuid.uuid4().hex}{uuid.uuid4().hex}",
                "ready": True,
                "started": True,
                "state": {"running": {"startedAt": now_rfc3339(now)}},
            }
        )
        conditions = st.setdefault("conditions", [])
        for ctype in ("PodReadyToStartContainers", "Initialized", "Ready", "ContainersReady"):
            _set_condition(conditions, _condition(ctype, "True", probe=False) | {"lastProbeTime": None})
        self.store.touch(pod)

    def _files(self, pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        """The files the container sees from the Secrets, ConfigMaps and claims its pod mounts: path -> text. (A
        kubelet would not start the container while a Secret or claim it mounts is missing; here its files are simply
        absent.)"""
        sources = {}
        for volume in pod["spec"].get("volumes") or []:
            if "secret" in volume:
                obj = self.store.get(BY_NAME["secrets"], pod["metadata"]["namespace"], volume["secret"]["secretName"])
                data = {k: base64.b64decode(v).decode() for k, v in ((obj or {}).get("data") or {}).items()}
            elif "configMap" in volume:
                obj = self.store.get(BY_NAME["configmaps"], pod["metadata"]["namespace"], volume["configMap"]["name"])
                data = dict((obj or {}).get("data") or {})
            elif "persistentVolumeClaim" in volume:
                claim = volume["persistentVolumeClaim"]["claimName"]
                data = dict(self.store.volumes.get((pod["metadata"]["namespace"], claim), {}))
            else:
                continue
            sources[volume["name"]] = data
        files: dict[str, str] = {}
        for mount in container.get("volumeMounts") or []:
            for key, text in sources.get(mount["name"], {}).items():
                files[f"{mount['mountPath'].rstrip('/')}/{key}"] = text
        return files

    @staticmethod
    def _env(pod: dict[str, Any], container: dict[str, Any]) -> dict[str, str]:
        env: dict[str, str] = {}
        for var in container.get("env") or []:
            if "value" in var:
                env[var["name"]] = str(var["value"])
            elif path := (var.get("valueFrom") or {}).get("fieldRef", {}).get("fieldPath"):
                if m := re.fullmatch(r"metadata\.annotations\['([^']+)'\]", path):
                    env[var["name"]] = (pod["metadata"].get("annotations") or {}).get(m[1], "")
                elif path == "metadata.name":
                    env[var["name"]] = pod["metadata"]["name"]
                elif path == "spec.nodeName":
                    env[var["name"]] = pod["spec"].get("nodeName", "")
        env.setdefault("HOSTNAME", pod["spec"].get("hostname") or pod["metadata"]["name"])
        return env

    # -- garbage collection and TTL ------------------------------------------------------------

    def _collect(self) -> None:
        now = time.time()
        for job in self.store.items(JOBS):
            ttl = job["spec"].get("ttlSecondsAfterFinished")
            finished = self.timers.job_finished.get(job["metadata"]["uid"])
            if ttl is not None and finished is not None and now - finished >= ttl:
                self.store.remove(job)
        uids = self.store.by_uid()
        dependents: defaultdict[str, list[dict[str, Any]]] = defaultdict(list)
        for obj in list(self.store.objects.values()):
            refs = obj["metadata"].get("ownerReferences") or []
            if refs and not any(ref["uid"] in uids for ref in refs):
                self._delete_dependent(obj)
                continue
            for ref in refs:
                dependents[ref["uid"]].append(obj)
        for obj in list(self.store.objects.values()):
            meta = obj["metadata"]
            if meta.get("deletionTimestamp") and "foregroundDeletion" in (meta.get("finalizers") or []):
                children = dependents.get(meta["uid"], [])
                if not children:
                    self.store.remove(obj)
                for child in children:
                    self._delete_dependent(child)

    def _delete_dependent(self, obj: dict[str, Any]) -> None:
        if obj["kind"] == "Pod" and _live(obj):
            if not obj["metadata"].get("deletionTimestamp"):
                obj["metadata"]["deletionTimestamp"] = now_rfc3339(time.time() + 30)
                obj["metadata"]["deletionGracePeriodSeconds"] = 30
                self.store.touch(obj)
            if not obj["spec"].get("nodeName"):
                self.store.remove(obj)
            return
        self.store.remove(obj)
        self.runs.pop(obj["metadata"]["uid"], None)


def _count(status: dict[str, Any], key: str, value: int) -> None:
    """active, succeeded and failed are `omitempty`: a zero count is left out, as the API server does."""
    if value:
        status[key] = value
    else:
        status.pop(key, None)


def _owner(obj: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _policy_action(rules: list[dict[str, Any]], pod: dict[str, Any]) -> tuple[str, str]:
    """The action of the first podFailurePolicy rule a failed pod matches on its containers' exit codes, and the
    words the Job controller uses for it; ("Count", "") (the default) when none matches."""
    codes = [
        (cs.get("name"), ((cs.get("state") or {}).get("terminated") or {}).get("exitCode"))
        for cs in pod["status"].get("containerStatuses") or []
    ]
    for at, rule in enumerate(rules):
        on = rule.get("onExitCodes")
        if not on:
            continue
        values = set(on.get("values") or [])
        for name, code in codes:
            if not code or on.get("containerName") not in (None, name):
                continue
            if (on.get("operator") == "In") == (code in values):
                action = str(rule.get("action", "Count"))
                return action, f"Container {name} failed with exit code {code} matching {action} rule at index {at}"
    return "Count", ""


def _ranges(indexes: list[int]) -> str:
    """[0, 1, 2, 5] -> "0-2,5", as the Job controller writes completedIndexes."""
    out: list[str] = []
    start = prev = indexes[0]
    for i in [*indexes[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        out.append(f"{start}-{prev}" if prev > start else str(start))
        if i is not None:
            start = prev = i
    return ",".join(out)

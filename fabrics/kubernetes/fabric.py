"""The Kubernetes fabric: each workload is a batch/v1 Job named gl-<workload id> in the fabric's namespace.

Every object carries the label gridlane.io/workload-id, so `find_many` and `poll` are one LIST per
kind by label selector for the whole batch, never a call per job. The Job's name is fixed by the
workload id, so a second create for the same workload meets 409 AlreadyExists and is answered with
the Job found by its label: a crash anywhere leaves one Job, never two.

An array's elements admitted together run as one Indexed Job instead (fabrics/kubernetes/arrays.py): the
element's external id is <job>/<completion index>, and the Job is found by the array's label.

The official client is imported on first use, so the web process validates settings and templates
without loading it.
"""

from __future__ import annotations

import logging
import math
import re
import threading
from collections import OrderedDict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any
from uuid import UUID

from fabrics.base import (
    Batched,
    Capacity,
    FabricConfig,
    FabricError,
    JobSpec,
    JobState,
    JobStatus,
    Resources,
    TemplateError,
)
from fabrics.kubernetes import (
    arrays,
    cadvisor,
    dcgm,
    free,
    home,
    kueue,
    kueue_reconcile,
    parse,
    quota,
    render,
    teams,
    tenancy,
)
from fabrics.kubernetes.client import KubeClient, KubeError  # imports the official client on first use only
from fabrics.kubernetes.moves import take_back as take_back_job
from fabrics.kubernetes.render import Manifests
from fabrics.kubernetes.settings import KubeSettings

log = logging.getLogger("gridlane.fabrics.kubernetes")

RENDERED_KEPT = 1000  # manifests kept from render until submit
CHUNK = 100  # workload ids per label selector: keeps the request line well under the API server's limits
TAIL_LINES = 500


class KubernetesFabric(Batched):
    # What does not fit now waits in the fabric's own queue, which says why (see portal/worker/capacity.py).
    queues_work = True

    def __init__(self, config: FabricConfig) -> None:
        self.config = config
        self.settings = KubeSettings.parse(config.settings)
        self._client: KubeClient | None = None
        self._client_lock = threading.Lock()
        self._pods: dict[str, list[dict[str, Any]]] = {}  # job name -> its pods at the last poll, for tail
        # Dispatch renders each job for the record, then submits it: what was recorded is what is sent.
        self._rendered: OrderedDict[UUID, tuple[JobSpec, Manifests]] = OrderedDict()
        self._teams: set[str] = set()  # team namespaces this process has made sure of

    @classmethod
    def check_template(cls, template: str) -> None:
        """Raise TemplateError when the pod template does not parse or sets what Gridlane sets."""
        render.check_template(template)

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> None:
        KubeSettings.parse(settings)

    @classmethod
    def check_request(cls, settings: Mapping[str, Any], per_node: Resources) -> None:
        """Raise ValueError, worded for the submitter, when a request cannot run here (e.g. 0.25 of a whole GPU)."""
        parsed = KubeSettings.parse(settings)
        if per_node.gpus_milli:
            parsed.gpu.units(per_node.gpus_milli, parsed.gpu_sharing)

    @property
    def client(self) -> KubeClient:
        """The API client, made on first use; KubeError (retryable) when the credentials do not load."""
        with self._client_lock:
            if self._client is None:
                self._client = KubeClient(self.settings)
            return self._client

    @property
    def namespace(self) -> str:
        """The namespace Jobs go to; "" when neither the settings nor loadable credentials say."""
        if self.settings.namespace:
            return self.settings.namespace
        try:
            return self.client.namespace
        except FabricError:
            return ""

    # -- the Fabric protocol ---------------------------------------------------------------------

    def render(self, job: JobSpec) -> str:
        """The Job for this workload; for an array's element, the Job it would run in alone (its siblings admitted
        with it join the same Job, each at its own completion index, with the same pod template)."""
        if arrays.eligible(job, self.settings):
            return render.to_json(arrays.render_group([job], self.settings, self.namespace_of(job.group)))
        return render.to_json(self.manifests(job))

    def namespace_of(self, team: str) -> str:
        """Where a team's Jobs run: its own namespace with a namespace_pattern, else the fabric's."""
        return tenancy.namespace_for(self.settings, team, self.namespace)

    def manifests(self, job: JobSpec) -> Manifests:
        """The objects for this job; the same ones `render` recorded when the job has not changed since."""
        kept = self._rendered.get(job.workload_id)
        if kept is not None and kept[0] == job:
            return kept[1]
        manifests = render.render(job, self.settings, self.namespace_of(job.group))
        self._rendered[job.workload_id] = (job, manifests)
        while len(self._rendered) > RENDERED_KEPT:
            self._rendered.popitem(last=False)
        return manifests

    def submit(self, job: JobSpec) -> str:
        try:
            manifests = self.manifests(job)
        except TemplateError as exc:
            raise FabricError(f"the Job does not render: {exc}", retryable=False) from exc
        self._ensure_team(job.group)
        if home.wanted(job, self.settings):  # made on first use, kept across sessions
            teams.keep(self.client, home.claim(job, self.settings, manifests.job["metadata"]["namespace"]))
        if job.script:  # a user's own manifest reaches only what is labelled for its team, in its namespace
            teams.check_references(self.client, job.group, manifests.job)
        name = self._create(job.workload_id, manifests)
        self._rendered.pop(job.workload_id, None)
        return name

    def submit_many(self, jobs: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
        """Submit in order, an array's elements given together as one Job; once the API cannot be reached at all,
        the rest get that error without trying."""
        results: dict[UUID, str | FabricError] = {}
        unreachable: FabricError | None = None
        together = [job for job in jobs if arrays.eligible(job, self.settings)]
        units = [*arrays.groups(together), *([job] for job in jobs if not arrays.eligible(job, self.settings))]
        for unit in units:
            if unreachable is not None:
                results |= {job.workload_id: unreachable for job in unit}
                continue
            try:
                if unit[0] in together:
                    results |= self._submit_group(unit)
                else:
                    results[unit[0].workload_id] = self.submit(unit[0])
            except FabricError as error:
                results |= {job.workload_id: error for job in unit}
                if isinstance(error, KubeError) and error.code == 0:
                    unreachable = error  # no answer at all: the next job would only wait as long
        return results

    def place_many(self, jobs: Sequence[JobSpec], *, fresh: Collection[UUID] = ()) -> dict[UUID, str | FabricError]:
        """Each job's external id: the one a dispatch that crashed already made (one LIST by workload label, one by
        array label for elements that are not fresh), else a new one (submit_many)."""
        together = [job for job in jobs if arrays.eligible(job, self.settings)]
        alone = [job.workload_id for job in jobs if not arrays.eligible(job, self.settings)]
        placed: dict[UUID, str | FabricError] = {}
        try:
            if alone:
                placed |= self._find_alone(alone)
            retried = {job.array_id for job in together if job.workload_id not in fresh}
            if retried:
                placed |= self._find_elements(retried, {job.workload_id for job in together}, adopt=True)
        except FabricError as error:
            return {job.workload_id: error for job in jobs}
        rest = [job for job in jobs if job.workload_id not in placed]
        if rest:
            placed |= self.submit_many(rest)
        return placed

    def find_many(self, workload_ids: Sequence[UUID]) -> dict[UUID, str]:
        """By workload label; those it does not find are looked for among the array Jobs (one more LIST)."""
        found = self._find_alone(workload_ids)
        missing = set(workload_ids) - set(found)
        if missing:
            found |= self._find_elements(None, missing)
        return found

    def _find_alone(self, workload_ids: Sequence[UUID]) -> dict[UUID, str]:
        found: dict[UUID, str] = {}
        for job in self._jobs_of(list(workload_ids)):
            labels = job["metadata"].get("labels") or {}
            try:
                found[UUID(labels[render.WORKLOAD_LABEL])] = job["metadata"]["name"]
            except (KeyError, ValueError):
                continue
        return found

    def _find_elements(
        self, array_ids: Collection[str] | None, wanted: Collection[UUID], *, adopt: bool = False
    ) -> dict[UUID, str]:
        """Elements' external ids from the array Jobs that hold them (of these arrays, or of every array). adopt:
        make sure each such Job owns its Secret (a dispatch may have crashed before it did)."""
        if array_ids is None:
            jobs = self.client.list_by_label("jobs", arrays.ARRAY_LABEL)
        else:
            jobs = self._by_label("jobs", arrays.ARRAY_LABEL, sorted(array_ids))
        found: dict[UUID, str] = {}
        for job in jobs:
            name = job["metadata"]["name"]
            held = {wid: k for k, wid in enumerate(arrays.elements(job)) if wid in wanted}
            found |= {wid: arrays.external_id(name, k) for wid, k in held.items()}
            if adopt and held:
                self.client.set_owner("secrets", name, _owner(job))
        return found

    def poll(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        """One LIST of Jobs and one of pods for the batch (more only for Kueue or Volcano detail); arrays' elements
        one LIST of Jobs and one of pods for all their Jobs."""
        self._pods = {}
        statuses = self._poll_elements([i for i in ids if arrays.element_of(i) is not None])
        statuses |= self._poll_jobs([i for i in ids if arrays.element_of(i) is None])
        return self._with_utilisation(statuses)

    def _poll_elements(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        if not ids:
            return {}
        names = sorted({name for i in ids if (found := arrays.element_of(i)) is not None for name, _ in [found]})
        jobs = {job["metadata"]["name"]: job for job in self._by_label("jobs", arrays.ARRAY_JOB_LABEL, names)}
        pods: dict[str, list[dict[str, Any]]] = {}
        for pod in self._by_label("pods", arrays.ARRAY_JOB_LABEL, names):
            pods.setdefault((pod["metadata"].get("labels") or {}).get(arrays.ARRAY_JOB_LABEL, ""), []).append(pod)
        statuses: dict[str, JobStatus] = {}
        for external in ids:
            name, index = arrays.element_of(external) or ("", 0)
            job = jobs.get(name)
            if job is None:
                statuses[external] = JobStatus(JobState.MISSING)
                continue
            mine = [p for p in pods.get(name, []) if _index_of(p) == index]
            self._pods[external] = mine
            statuses[external] = arrays.element_status(job, index, mine)
        return statuses

    def _poll_jobs(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        if not ids:
            return {}
        by_id = {wid: name for name in ids if (wid := render.workload_id_of(name)) is not None}
        jobs = {job["metadata"]["name"]: job for job in self._jobs_of(list(by_id))}
        pods = self._pods_of(list(by_id))
        foreign = [name for name in ids if render.workload_id_of(name) is None]
        if foreign:
            # Not a name Gridlane gives; no job here will ever carry it.
            log.warning("%s: poll asked for ids Gridlane never made: %s", self.config.name, foreign[:5])
        kueue = self._kueue_workloads([job for job in jobs.values() if (job.get("spec") or {}).get("suspend")])
        podgroups = self._podgroups([job for job in jobs.values() if not parse.finished(job)])
        statuses: dict[str, JobStatus] = {}
        for name in ids:
            job = jobs.get(name)
            if job is None:
                statuses[name] = JobStatus(JobState.MISSING)
                continue
            mine = pods.get(name, [])
            self._pods[name] = mine
            statuses[name] = parse.job_status(
                job,
                mine,
                podgroup=podgroups.get(name),
                kueue_workload=kueue.get(job["metadata"].get("uid", "")),
            )
        return statuses

    def _with_utilisation(self, statuses: dict[str, JobStatus]) -> dict[str, JobStatus]:
        """Running jobs' GPU utilisation (DCGM) and CPU utilisation (cAdvisor) from the site's Prometheus, one
        query for all of them; as they were (no data) when the fabric names no Prometheus, or it does not answer
        in time."""
        running = [name for name, status in statuses.items() if status.state is JobState.RUNNING]
        if not self.settings.prometheus_url or not running:
            return statuses
        # The fabric's namespace and each team's that a running job's pods are in (a namespace per team).
        where = {self.namespace} | {
            str(p["metadata"].get("namespace") or self.namespace) for name in running for p in self._pods.get(name, [])
        }
        try:
            result = dcgm.ask(
                self.settings.prometheus_url,
                where,
                min(5.0, self.settings.request_timeout_s),
                also=cadvisor.query_for(where),
            )
        except dcgm.PrometheusError as error:
            log.info("%s: no GPU utilisation this time: %s", self.config.name, error)
            return statuses
        utilisation = dcgm.by_pod(result, where)
        cores = cadvisor.by_pod(result, where)
        for name in running:
            mine = self._pods.get(name, [])
            pods = [p["metadata"]["name"] for p in mine]
            statuses[name] = replace(
                statuses[name],
                gpu_utilisation=dcgm.of_job(utilisation, pods),
                cpu_utilisation=cadvisor.of_job(cores, mine),
            )
        return statuses

    def cancel(self, external_id: str) -> None:
        """Delete the Job with background propagation (its pods go with it), and its Service and PodGroup."""
        element = arrays.element_of(external_id)
        if element is not None:
            self._cancel_element(*element)
            return
        client = self.client
        client.delete("jobs", external_id)
        # Owned by the Job, these go with it; deleting by name also covers a crash before they were owned.
        client.delete("services", external_id)
        if self.settings.volcano:
            client.delete("podgroups", external_id)

    # A Job taken back is deleted: once gone, poll reads it missing, which the move reads as taken back.
    taken_back_goes = True

    def takes_back(self, external_id: str) -> bool:
        """Whole Jobs are taken back; an array's element (an index of an indexed Job) is not."""
        return arrays.element_of(external_id) is None

    def take_back(self, external_id: str) -> None:
        """Delete the Job only while it still waits and no pod of it ever had a node (fabrics.kubernetes.moves)."""
        if self.takes_back(external_id):
            take_back_job(self.client, external_id, self._pods_of, volcano=self.settings.volcano)

    def _cancel_element(self, name: str, index: int) -> None:
        """Mark the index cancelled on its Job (so its failure reads as a cancel), then delete its pod: a deleted
        pod fails its index, which a backoff limit of 0 per index never retries. The Job and its Secret go
        instead once every index is cancelled. Called again each sync until the element has ended."""
        client = self.client
        try:
            job = client.patch_job(name, {"metadata": {"annotations": {f"{arrays.CANCEL}{index}": "true"}}})
        except KubeError as error:
            if error.code == 404:
                return  # the Job is gone: nothing of it runs
            raise
        if arrays.all_cancelled(job):
            client.delete("jobs", name)
            client.delete("secrets", name)
            return
        pods = client.list_by_label("pods", f"{arrays.ARRAY_JOB_LABEL}={name},{render.JOB_INDEX}={index}")
        for pod in arrays.live_pods(pods, index):
            client.delete("pods", pod)

    def extend(self, external_id: str, ends_at: datetime) -> None:
        """Let the Job run until `ends_at`: its activeDeadlineSeconds counts from its own start time, so the
        new deadline is ends_at less that (one GET, one PATCH). A Job already finished or gone stays so."""
        if arrays.element_of(external_id) is not None:
            raise FabricError("an array's elements share their Job's deadline", retryable=False)
        client = self.client
        try:
            job = client.read_job(external_id)
        except KubeError as error:
            if error.code == 404:
                raise FabricError("its Job is gone", retryable=False) from error
            raise
        if parse.finished(job):
            raise FabricError("its Job has already ended", retryable=False)
        started = parse.parse_time((job.get("status") or {}).get("startTime")) or datetime.now(UTC)
        deadline = max(1, math.ceil((ends_at - started).total_seconds()))
        client.patch_job(external_id, {"spec": {"activeDeadlineSeconds": deadline}})

    def tail(self, external_id: str, max_bytes: int = 16_384) -> str:
        """The end of rank 0's log (the latest attempt), or "" while no container has started."""
        pods = self._pods.get(external_id)
        element = arrays.element_of(external_id)
        if pods is None and element is not None:
            name, index = element
            pods = [
                p
                for p in self.client.list_by_label("pods", f"{arrays.ARRAY_JOB_LABEL}={name}")
                if _index_of(p) == index
            ]
        elif pods is None:
            wid = render.workload_id_of(external_id)
            pods = self._pods_of([wid]).get(external_id, []) if wid else []
        pod = parse.log_pod(pods)
        if pod is None:
            return ""
        try:
            text = self.client.log(pod, TAIL_LINES)
        except FabricError as error:
            if isinstance(error, KubeError) and error.code in (400, 404):
                return ""  # the container is not there (yet, or any more)
            raise
        return text.encode()[-max_bytes:].decode("utf-8", "ignore")

    def capacity(self) -> Capacity:
        declared = self.config.capacity
        try:
            client = self.client
            if self.settings.capacity == "declared":
                version = client.version()
                return Capacity(declared, detail=f"declared; the API server runs {version.get('gitVersion', '?')}")
            nodes = client.nodes(self.settings.node_selector)
            pods = client.live_pods_everywhere()
        except FabricError as error:
            if isinstance(error, KubeError) and error.code == 403:
                return Capacity(declared, detail=f"declared: this fabric may not read nodes and pods ({error})")
            return Capacity(declared, healthy=False, detail=str(error))
        total, detail = parse.capacity(nodes, pods, self.settings.gpu)
        left, flavors, note = self._kueue_quota()
        return Capacity(total, detail=detail + note, free=free.observe(nodes, pods, quota=left, flavors=flavors))

    def _kueue_quota(self) -> tuple[dict[tuple[str, str], int] | None, dict[str, dict[str, str]], str]:
        """Where Kueue runs, what it would still admit for Gridlane (fabrics/kubernetes/quota.py `read`)."""
        pattern = self.settings.namespace_pattern
        team = re.compile(re.escape(pattern).replace(re.escape("{team}"), ".+") + "$") if pattern else None
        return quota.read(self.client, lambda ns: ns == self.namespace or bool(team and team.match(ns)), free.is_gpu)

    # -- Kueue, owned --------------------------------------------------------------------------------

    def reconcile_kueue(
        self, fabric_id: str, teams: Sequence[kueue.Team], departments: Sequence[kueue.Department] = ()
    ) -> kueue_reconcile.Report:
        """Make the cluster's Kueue queues say what Gridlane's quotas say (fabrics/kubernetes/kueue.py); teams
        without namespaces submit from the fabric's. KubeError when the API fails part way (the next run goes on)."""
        version = self.client.kueue_version
        if not version:
            note = "the cluster serves no Kueue API (v1beta2 or v1beta1): no queues are kept, and Jobs run unsuspended"
            return kueue_reconcile.Report(notes=[note])
        labels, notes = kueue.node_labels(self.settings.node_selector)
        site = kueue.Site(
            fabric_id=fabric_id,
            name=self.config.name,
            flavor=str(self.config.settings.get("gpu_flavor") or ""),
            gpu=self.settings.gpu,
            capacity=self.config.capacity,
            teams=tuple(t if t.namespaces else replace(t, namespaces=(self.namespace_of(t.slug),)) for t in teams),
            departments=tuple(departments),
            node_labels=labels,
            version=version,
            priorities=self.settings.kueue_priorities,
            topology=self.settings.topology_levels,
        )
        rendered = kueue.render(site)
        rendered.notes[:0] = notes
        self.reconcile_tenancy(teams)  # the namespaces the LocalQueues go to
        return kueue_reconcile.reconcile(self.client, fabric_id, rendered)

    def reconcile_tenancy(self, given: Sequence[kueue.Team]) -> list[str]:
        """With a namespace per team: each team's Namespace (its Pod Security level), ServiceAccount and
        ResourceQuota (its limit here) made or put back; what changed. Nothing in the one-namespace mode."""
        if not self.settings.namespace_pattern:
            return []
        changed = []
        for team in given:
            namespace = self.namespace_of(team.slug)
            for body in tenancy.objects(self.settings, team.slug, namespace, team.limit):
                changed += teams.put(self.client, body)
            self._teams.add(namespace)
        return changed

    # -- helpers ---------------------------------------------------------------------------------

    def _create(self, workload_id: UUID, manifests: Manifests) -> str:
        client = self.client
        name = manifests.job["metadata"]["name"]
        # 1. The Service and PodGroup before the Job: ranks look each other up, Volcano gangs the pods.
        owned = []
        for kind, body in (("services", manifests.service), ("podgroups", manifests.podgroup)):
            if body is not None:
                self._create_or_keep(kind, body)
                owned.append(kind)
        # 2. The Job; 409 means an earlier attempt made it: answer with the Job its label finds.
        try:
            created = client.create("jobs", manifests.job)
        except KubeError as error:
            if error.reason != "AlreadyExists":
                raise
            existing = [job for job in self._jobs_of([workload_id]) if job["metadata"]["name"] == name]
            if not existing:
                raise FabricError(
                    f"a Job named {name} exists in {client.namespace} but is not workload {workload_id}'s",
                    retryable=False,
                ) from error
            created = existing[0]
        # 3. Let the Job own the others, so deleting it (cancel, TTL) deletes them.
        for kind in owned:
            client.set_owner(kind, name, _owner(created))
        return str(name)

    def _submit_group(self, group: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
        """One Indexed Job for elements of one array (arrays.py): its Secret first (the pods read it as they
        start), then the Job, which then owns the Secret. A Job of that name made by an earlier attempt answers
        for the elements it holds; the others wait for the next dispatch (retryable)."""
        try:
            manifests = arrays.render_group(group, self.settings, self.namespace_of(group[0].group))
            self._ensure_team(group[0].group)
        except TemplateError as exc:
            raise FabricError(f"the Job does not render: {exc}", retryable=False) from exc
        client = self.client
        name = manifests.job["metadata"]["name"]
        secret = manifests.secret or {}  # render_group always makes one
        try:
            client.create("secrets", secret)
        except KubeError as error:
            if error.reason != "AlreadyExists":
                raise
            # Left by an attempt that died before its Job was made (a Job would have been found by its label):
            # its files may be another group's, so it is made again.
            client.delete("secrets", name)
            client.create("secrets", secret)
        try:
            created = client.create("jobs", manifests.job)
        except KubeError as error:
            if error.reason != "AlreadyExists":
                raise
            existing = client.list_by_label("jobs", f"{arrays.ARRAY_JOB_LABEL}={name}")
            if not existing:
                raise FabricError(
                    f"a Job named {name} exists in {client.namespace} but is not Gridlane's", retryable=False
                ) from error
            created = existing[0]
        client.set_owner("secrets", name, _owner(created))
        held = {wid: k for k, wid in enumerate(arrays.elements(created))}
        return {
            job.workload_id: arrays.external_id(name, held[job.workload_id])
            if job.workload_id in held
            else FabricError(f"{name} was made by an earlier attempt without this element", retryable=True)
            for job in group
        }

    def _ensure_team(self, team: str) -> None:
        """With a namespace per team, its Namespace and ServiceAccount before its first Job (once per process; the
        reconciler keeps them and adds the ResourceQuota)."""
        namespace = self.namespace_of(team)
        if self.settings.namespace_pattern and namespace not in self._teams:
            for body in tenancy.objects(self.settings, team, namespace):
                teams.put(self.client, body)
            self._teams.add(namespace)

    def _create_or_keep(self, kind: str, body: dict[str, Any]) -> None:
        try:
            self.client.create(kind, body)
        except KubeError as error:
            if error.reason != "AlreadyExists":
                raise

    def _by_workload(self, kind: str, workload_ids: Sequence[UUID]) -> list[dict[str, Any]]:
        """Objects of a kind labelled with these workload ids: one LIST per CHUNK ids."""
        return self._by_label(kind, render.WORKLOAD_LABEL, sorted(str(w) for w in workload_ids))

    def _by_label(self, kind: str, label: str, values: Sequence[str]) -> list[dict[str, Any]]:
        """Objects of a kind whose label has one of these values: one LIST per CHUNK values."""
        items: list[dict[str, Any]] = []
        for i in range(0, len(values), CHUNK):
            items += self.client.list_by_label(kind, f"{label} in ({','.join(values[i : i + CHUNK])})")
        return items

    def _jobs_of(self, workload_ids: Sequence[UUID]) -> list[dict[str, Any]]:
        return self._by_workload("jobs", workload_ids)

    def _pods_of(self, workload_ids: Sequence[UUID]) -> dict[str, list[dict[str, Any]]]:
        """Pods by the name of their Job."""
        pods: dict[str, list[dict[str, Any]]] = {}
        for pod in self._by_workload("pods", workload_ids):
            wid = (pod["metadata"].get("labels") or {}).get(render.WORKLOAD_LABEL, "")
            pods.setdefault(f"gl-{wid}", []).append(pod)
        return pods

    def _kueue_workloads(self, suspended: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Kueue's Workload objects by the uid of their Job; {} when Kueue's API cannot be read."""
        uids = [
            job["metadata"]["uid"]
            for job in suspended
            if render.KUEUE_QUEUE_LABEL in (job["metadata"].get("labels") or {}) and job["metadata"].get("uid")
        ]
        if not uids:
            return {}
        found: dict[str, dict[str, Any]] = {}
        try:
            for i in range(0, len(uids), CHUNK):
                selector = f"kueue.x-k8s.io/job-uid in ({','.join(uids[i : i + CHUNK])})"
                for workload in self.client.list_by_label("kueue-workloads", selector):
                    found[(workload["metadata"].get("labels") or {}).get("kueue.x-k8s.io/job-uid", "")] = workload
        except FabricError as error:
            log.info("%s: Kueue's workloads are not readable, reasons stay general: %s", self.config.name, error)
        return found

    def _podgroups(self, unfinished: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Volcano's PodGroups by name, for the jobs that have not finished; {} without Volcano."""
        if not self.settings.volcano or not unfinished:
            return {}
        ids = [wid for job in unfinished if (wid := render.workload_id_of(job["metadata"]["name"])) is not None]
        try:
            groups = self._by_workload("podgroups", ids)
        except FabricError as error:
            log.info("%s: Volcano's PodGroups are not readable: %s", self.config.name, error)
            return {}
        return {group["metadata"]["name"]: group for group in groups}


def _owner(job: Mapping[str, Any]) -> dict[str, Any]:
    """An ownerReference to this Job, so the garbage collector deletes what it owns with it."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "name": job["metadata"]["name"],
        "uid": job["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _index_of(pod: Mapping[str, Any]) -> int | None:
    """The completion index of an Indexed Job's pod; None for any other pod."""
    index = str(((pod.get("metadata") or {}).get("annotations") or {}).get(render.JOB_INDEX))
    return int(index) if index.isdigit() else None

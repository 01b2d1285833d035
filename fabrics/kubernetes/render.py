"""Pure rendering: a queue target's pod template and a JobSpec -> the objects Gridlane creates.

The template is IT's YAML: a pod template (`metadata` with labels and annotations, and a pod
`spec`), optionally headed `apiVersion: v1` / `kind: Pod`. Gridlane fills in the main container
(the one named `main`, else the first): the image, `args: [command]` after the template's `command`
(`["/bin/sh", "-c"]` by default), env and resources. User values only ever become whole strings in
the manifest, never part of one: the command is one argv element, names and owners are labels or
annotations.

    training/batch  a batch/v1 Job (backoffLimit 0, activeDeadlineSeconds, ttlSecondsAfterFinished)
    gang (nodes>1)  an Indexed Job, parallelism == completions == nodes, plus a headless Service
                    whose name is the pods' subdomain: rank i is <job>-i.<job>, rank 0 the master
    notebook        a Job running Jupyter through Gridlane's launcher (fabrics.ssh.notebook), which reports
                    the pod's IP, its port and token to the portal; the browser reaches it only
                    through the portal's connect path
    Kueue           the template's kueue.x-k8s.io/queue-name label goes on the Job, created suspended; on a
                    Kueue-owned fabric the label names the team's LocalQueue (gl-<team>) instead
    Volcano         schedulerName volcano and a PodGroup (minMember = nodes) the pods belong to
    code, packages  an init container in the job's image fetches the code and builds the venv into an emptyDir
                    at /gridlane; the job runs in /gridlane/work with the venv first on PATH (fabrics.travel)
"""

from __future__ import annotations

import copy
import functools
import hashlib
import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import yaml

from fabrics import travel
from fabrics.base import JobSpec, TemplateError
from fabrics.kubernetes import identity, manifest, policy
from fabrics.kubernetes.settings import KubeSettings
from fabrics.ssh import notebook

MANAGED_BY = "app.kubernetes.io/managed-by"
WORKLOAD_LABEL = "gridlane.io/workload-id"
GROUP_LABEL = "gridlane.io/group"
QUEUE_LABEL = "gridlane.io/queue"
KIND_LABEL = "gridlane.io/kind"
KUEUE_QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
KUEUE_PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # a WorkloadPriorityClass's name
VOLCANO_GROUP = "scheduling.k8s.io/group-name"
JOB_INDEX = "batch.kubernetes.io/job-completion-index"
RENDEZVOUS_PORT = 29500
DEFAULT_COMMAND = ("/bin/sh", "-c")
# Set by Gridlane on the pod spec; a template that sets them would be silently overruled.
GRIDLANE_POD_FIELDS = frozenset({"subdomain", "hostname", "restartPolicy"})

DEFAULT_SETTINGS = KubeSettings()
TOPOLOGY_ANNOTATION = "gridlane.io/topology"  # on a target's template: the level a multi-node job stays within
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$")
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Manifests:
    """What submit creates. `service`, `podgroup` and `secret` are None when the job needs none (the secret: an
    array's Job, holding each element's own environment, fabrics/kubernetes/arrays.py)."""

    job: dict[str, Any]
    service: dict[str, Any] | None = None
    podgroup: dict[str, Any] | None = None
    secret: dict[str, Any] | None = None

    def documents(self) -> list[dict[str, Any]]:
        return [doc for doc in (self.job, self.service, self.podgroup, self.secret) if doc is not None]


def job_name(workload_id: UUID) -> str:
    """`gl-<workload id>`: 39 characters, a DNS label, and the same on every attempt (so creates collide)."""
    return f"gl-{workload_id}"


def local_queue_name(group: str) -> str:
    """`gl-<team>`: the team's LocalQueue on a Kueue-owned fabric, a label value (so at most 63 characters)."""
    name = re.sub(r"[^a-z0-9.-]+", "-", f"gl-{group}".lower()).strip("-.")
    if len(name) > 63:  # long slugs keep their start and a digest, so two never meet
        name = f"{name[:54].rstrip('-.')}-{hashlib.sha256(group.encode()).hexdigest()[:8]}"
    return name


def workload_id_of(name: str) -> UUID | None:
    """The workload id in a name job_name made; None for any other name."""
    if not name.startswith("gl-"):
        return None
    try:
        return UUID(name[3:])
    except ValueError:
        return None


def label_value(text: str) -> str:
    """Text as a label value: at most 63 of [A-Za-z0-9._-], starting and ending alphanumeric."""
    cleaned = re.sub(r"[^A-Za-z0-9._-]+", "-", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", cleaned)


def labels(job: JobSpec) -> dict[str, str]:
    return {
        MANAGED_BY: "gridlane",
        WORKLOAD_LABEL: str(job.workload_id),
        GROUP_LABEL: label_value(job.group),
        QUEUE_LABEL: label_value(job.queue),
        KIND_LABEL: label_value(job.kind),
    }


# -- the template ---------------------------------------------------------------------------------


def check_template(text: str) -> None:
    """Raise TemplateError saying what is wrong with a pod template."""
    _parsed(text)


def load_template(text: str) -> dict[str, Any]:
    """The checked template as a fresh dict the caller may change; the default when text is empty."""
    return copy.deepcopy(_parsed(text))


@functools.lru_cache(maxsize=128)
def _parsed(text: str) -> dict[str, Any]:
    if not text.strip():
        return {"metadata": {}, "spec": {"containers": [{"name": "main"}]}}
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise TemplateError(f"the pod template is not valid YAML: {exc}") from exc
    if not isinstance(doc, dict):
        raise TemplateError("the pod template must be a mapping with `metadata` and `spec` (a pod template)")
    extra = set(doc) - {"apiVersion", "kind", "metadata", "spec"}
    if extra:
        raise TemplateError(
            f"the pod template may hold apiVersion, kind, metadata and spec; not {', '.join(sorted(extra))}"
        )
    if doc.get("kind", "Pod") != "Pod" or doc.get("apiVersion", "v1") != "v1":
        raise TemplateError(
            "the pod template describes a pod: leave out kind, or write `apiVersion: v1` and `kind: Pod`"
        )
    meta = doc.get("metadata") or {}
    if not isinstance(meta, dict) or set(meta) - {"labels", "annotations"}:
        raise TemplateError("the template's metadata may hold labels and annotations only; Gridlane names the Job")
    _check_labels(meta.get("labels") or {})
    annotations = meta.get("annotations") or {}
    if not isinstance(annotations, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in annotations.items()
    ):
        raise TemplateError("metadata.annotations must map names to text")
    topology_level(annotations.get(TOPOLOGY_ANNOTATION, ""))
    spec = doc.get("spec")
    if not isinstance(spec, dict):
        raise TemplateError("the pod template needs a `spec` with `containers`")
    if spec.get("restartPolicy", "Never") != "Never":
        raise TemplateError("spec.restartPolicy: Gridlane runs pods with Never (a failed run is reported, not retried)")
    overruled = sorted((GRIDLANE_POD_FIELDS - {"restartPolicy"}) & set(spec))
    if overruled:
        raise TemplateError(f"spec.{overruled[0]}: Gridlane sets it (the ranks of a gang find each other through it)")
    containers = spec.get("containers")
    if not isinstance(containers, list) or not containers or not all(isinstance(c, dict) for c in containers):
        raise TemplateError("spec.containers must list at least one container")
    for i, container in enumerate(containers):
        name = container.get("name")
        if not isinstance(name, str) or not _DNS_LABEL.match(name):
            raise TemplateError(f"spec.containers[{i}].name must be a lowercase DNS label such as `main`")
    main = containers[_main_index(containers)]
    if "args" in main:
        raise TemplateError(
            f"container {main['name']!r}: leave out args; Gridlane passes the command as its one argument"
        )
    command = main.get("command")
    if command is not None and not (isinstance(command, list) and command and all(isinstance(c, str) for c in command)):
        raise TemplateError(f'container {main["name"]!r}: command must be a list of strings, e.g. ["/bin/bash", "-lc"]')
    if "image" in main and not isinstance(main["image"], str):
        raise TemplateError(f"container {main['name']!r}: image must be text")
    return {"metadata": meta, "spec": spec}


def _check_labels(labels: Any) -> None:
    if not isinstance(labels, dict):
        raise TemplateError("metadata.labels must map names to values")
    for key, value in labels.items():
        if not isinstance(key, str) or not _LABEL_KEY.match(key):
            raise TemplateError(f"metadata.labels: {key!r} is not a label name")
        if not isinstance(value, str) or not _LABEL_VALUE.match(value):
            raise TemplateError(f"metadata.labels[{key}]: {value!r} is not a label value (quote numbers)")
        if key.startswith("gridlane.io/") or key == MANAGED_BY:
            raise TemplateError(f"metadata.labels: {key} is Gridlane's own label")


def _main_index(containers: list[dict[str, Any]]) -> int:
    return next((i for i, c in enumerate(containers) if c.get("name") == "main"), 0)


# -- rendering ------------------------------------------------------------------------------------


def render(job: JobSpec, settings: KubeSettings, namespace: str) -> Manifests:
    """The objects for this job, its pods running as the person (identity.py); TemplateError when it cannot run as
    asked (template, image, GPUs, the person's POSIX user)."""
    person = identity.ids(job.run_as, settings)
    allowed = policy.Policy.of(load_template(job.template)).allowed
    if job.script:  # the user's own Job manifest (fabrics.kubernetes.manifest)
        made = Manifests(native_job(job, namespace, settings))
        identity.harden(made.job["spec"]["template"]["spec"], person, identity.service_account(settings), allowed)
        return made
    made = _render(job, settings, namespace)
    pod = made.job["spec"]["template"]["spec"]
    from fabrics.kubernetes import home  # it names its objects with this module's labels

    if home.wanted(job, settings):  # the person's own claim at their home path
        home.mount(pod, pod["containers"][_main_index(pod["containers"])], job, settings)
    keep = {"serviceAccountName"} if "serviceAccountName" in pod else set()  # IT's template chose one
    identity.harden(pod, person, identity.service_account(settings), allowed | keep)
    return made


def _render(job: JobSpec, settings: KubeSettings, namespace: str) -> Manifests:
    template = load_template(job.template)
    name = job_name(job.workload_id)
    own = labels(job)
    tmeta, pod = template["metadata"], template["spec"]
    template_labels = dict(tmeta.get("labels") or {})
    kueue = {k: v for k, v in template_labels.items() if k.startswith("kueue.x-k8s.io/")}
    if settings.kueue_owned:  # Gridlane keeps each team's LocalQueue (fabrics/kubernetes/kueue.py)
        kueue[KUEUE_QUEUE_LABEL] = local_queue_name(job.group)
    pod_labels = {k: v for k, v in template_labels.items() if k not in kueue} | own
    pod_annotations, level = _annotations(tmeta, job, settings)
    notebook = job.kind == "notebook"
    gang = job.nodes > 1
    if notebook and gang:
        raise TemplateError("a notebook runs on one node")

    containers = pod["containers"]
    index = _main_index(containers)
    given = containers[index]
    main: dict[str, Any] = {"name": given["name"]}
    main["image"] = job.image or given.get("image") or settings.default_image
    if not main["image"]:
        raise TemplateError("no image: the workload names none, and neither do the queue's pod template or the fabric")
    if notebook:
        main["command"] = notebook_command()
    else:
        main["command"] = list(given.get("command") or DEFAULT_COMMAND)
        main["args"] = [job.command]
    main |= {k: v for k, v in given.items() if k not in ("name", "image", "command", "env", "resources")}
    main["env"] = _env(given.get("env") or [], job, name)
    if notebook:  # the address the launcher reports: the pod's own
        main["env"].append({"name": "GRIDLANE_NOTEBOOK_HOST", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}})
    main["resources"] = _resources(given.get("resources") or {}, job, settings)
    containers[index] = main
    if travel.wanted(job.env):
        _travel(pod, main, notebook)
    pod["restartPolicy"] = "Never"
    if gang:
        pod["subdomain"] = name
    if settings.volcano:
        pod["schedulerName"] = "volcano"
        pod_annotations[VOLCANO_GROUP] = name
    priority_class = job.tier.kubernetes_priority_class
    if priority_class:  # the workload's tier, over what the queue's template says
        pod["priorityClassName"] = priority_class
        if kueue.get(KUEUE_QUEUE_LABEL):  # Kueue orders its queue by the WorkloadPriorityClass of this name
            kueue[KUEUE_PRIORITY_LABEL] = priority_class

    pod_meta: dict[str, Any] = {"labels": pod_labels}
    if pod_annotations:
        pod_meta["annotations"] = pod_annotations
    spec: dict[str, Any] = {}
    if kueue.get(KUEUE_QUEUE_LABEL):
        spec["suspend"] = True  # Kueue admits it inside the cluster by unsuspending it
    if gang:
        spec |= {"completionMode": "Indexed", "completions": job.nodes, "parallelism": job.nodes}
    spec |= {
        "backoffLimit": 0,  # a failed run is reported, not retried behind the user's back
        "activeDeadlineSeconds": max(1, job.runtime_limit_s),
        "ttlSecondsAfterFinished": settings.ttl_s,
        "template": {"metadata": pod_meta, "spec": pod},
    }
    manifest = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": _meta(name, namespace, own | kueue)
        | {"annotations": {"gridlane.io/owner": job.owner, "gridlane.io/name": job.name}},
        "spec": spec,
    }
    service = None
    if gang:
        service = _service(name, namespace, own, headless=True)
    podgroup = _podgroup(job, name, namespace, own, settings) if settings.volcano else None
    if podgroup is not None and level and job.nodes > 1 and level[1] in settings.topology_levels:
        # Volcano's network topology: tier 1 is the narrowest level above a node, counted from the fabric's list.
        tier = len(settings.topology_levels) - settings.topology_levels.index(level[1]) - 1
        mode = "hard" if level[0] == "required" else "soft"
        podgroup["spec"]["networkTopology"] = {"mode": mode, "highestTierAllowed": max(1, tier)}
    return Manifests(manifest, service, podgroup)


def native_job(job: JobSpec, namespace: str, settings: KubeSettings = DEFAULT_SETTINGS) -> dict[str, Any]:
    """A user's own Job, as Gridlane creates it (fabrics.kubernetes.manifest.render), held to the queue target's
    policy again (policy.py), as it was at submit."""
    template = load_template(job.template)
    if settings.kueue_owned:  # to the team's LocalQueue, as a rendered Job (Kueue admits it in the cluster)
        template["metadata"]["labels"] = dict(template["metadata"].get("labels") or {})
        template["metadata"]["labels"][KUEUE_QUEUE_LABEL] = local_queue_name(job.group)
    try:
        read = manifest.read(job.script, namespace, policy.Policy.of(template, settings.reserved_taints))
    except manifest.ManifestError as error:
        raise TemplateError(str(error)) from error
    env = {**job.env, "GRIDLANE_WORKLOAD_ID": str(job.workload_id)}
    return manifest.render(
        read, name=job_name(job.workload_id), namespace=namespace, labels=labels(job),
        pod_template=template, runtime_s=max(1, job.runtime_limit_s), env=env,
        priority_class=job.tier.kubernetes_priority_class,
    )  # fmt: skip


def notebook_command() -> list[str]:
    """JupyterLab started by Gridlane's launcher, as on a batch cluster: on a free port, with a token it picks and
    reports to the portal (never on a command line, in the manifest or in the pod's log), under the workload's
    connect path. The image needs bash and python3 beside Jupyter (every Jupyter image has them)."""
    return ["bash", "-c", notebook.FUNCTION + "gridlane_notebook jupyter lab\n"]


def _env(template_env: list[dict[str, Any]], job: JobSpec, name: str) -> list[dict[str, Any]]:
    """The template's env, then the job's, then Gridlane's own; a later entry replaces an earlier one."""
    env: dict[str, dict[str, Any]] = {e["name"]: e for e in template_env if isinstance(e, dict) and "name" in e}
    for key, value in job.env.items():
        env[key] = {"name": key, "value": value}
    own = {"GRIDLANE_WORKLOAD_ID": str(job.workload_id), "GRIDLANE_NODES": str(job.nodes)}
    if job.nodes > 1:
        master = f"{name}-0.{name}"  # rank 0's hostname in the headless Service's subdomain
        own |= {"GRIDLANE_MASTER_ADDR": master, "MASTER_ADDR": master, "MASTER_PORT": str(RENDEZVOUS_PORT)}
    for key, value in own.items():
        env[key] = {"name": key, "value": value}
    if job.nodes > 1:
        for key in ("GRIDLANE_NODE_RANK", "NODE_RANK"):
            rank = {"fieldRef": {"fieldPath": f"metadata.annotations['{JOB_INDEX}']"}}
            env[key] = {"name": key, "valueFrom": rank}
    return list(env.values())


def _travel(pod: dict[str, Any], main: dict[str, Any], notebook: bool) -> None:
    """Code and packages that travel with the job (fabrics.travel): an init container in the job's own image (so
    its python3 builds a venv the job's Python can run) fills an emptyDir, and the job runs in it, with the venv
    first on PATH. The init container gets the job's environment, which says what to fetch and with what."""
    mount = {"name": travel.VOLUME, "mountPath": travel.MOUNT}
    pod["volumes"] = [*(pod.get("volumes") or []), {"name": travel.VOLUME, "emptyDir": {}}]
    main["volumeMounts"] = [*(main.get("volumeMounts") or []), mount]
    main["workingDir"] = f"{travel.MOUNT}/work"
    if notebook:
        main["command"] = [*main["command"][:-1], travel.ACTIVATE + main["command"][-1]]
    else:
        main["args"] = [travel.ACTIVATE + main["args"][0]]
    init = {
        "name": travel.INIT_NAME,
        "image": main["image"],
        # sh -c SCRIPT NAME PROGRAM: the script runs the program ($1) with the image's python3.
        "command": ["/bin/sh", "-c", travel.INIT_SCRIPT, travel.INIT_NAME, travel.PROGRAM],
        "env": copy.deepcopy(main["env"]),
        "volumeMounts": [dict(mount)],
    }
    pod["initContainers"] = [*(pod.get("initContainers") or []), init]


def _resources(template: Mapping[str, Any], job: JobSpec, settings: KubeSettings) -> dict[str, Any]:
    """Requests for CPU, memory and GPUs; limits for memory and GPUs (no CPU limit: throttling hurts training)."""
    requests = dict(template.get("requests") or {})
    limits = dict(template.get("limits") or {})
    per_node = job.per_node
    if per_node.cpus_milli:
        cpus, rest = divmod(per_node.cpus_milli, 1000)
        requests["cpu"] = str(cpus) if rest == 0 else f"{per_node.cpus_milli}m"
    if per_node.memory_mib:
        requests["memory"] = limits["memory"] = f"{per_node.memory_mib}Mi"
    if per_node.gpus_milli:
        units = gpu_units(job, settings)
        requests[settings.gpu.name] = limits[settings.gpu.name] = str(units)
    resources: dict[str, Any] = {}
    if requests:
        resources["requests"] = requests
    if limits:
        resources["limits"] = limits
    return resources


def _meta(name: str, namespace: str, labels: dict[str, str]) -> dict[str, Any]:
    """Object metadata; the namespace is left to the request when it is not known yet."""
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    return meta


def gpu_units(job: JobSpec, settings: KubeSettings) -> int:
    """Units of the flavor's resource per node (see settings.py on fractions); TemplateError when none fit."""
    try:
        return settings.gpu.units(job.per_node.gpus_milli, settings.gpu_sharing)
    except ValueError as exc:
        raise TemplateError(str(exc)) from exc


def _service(name: str, namespace: str, own: dict[str, str], *, headless: bool) -> dict[str, Any]:
    """A gang's headless Service, whose name is its pods' subdomain."""
    spec: dict[str, Any] = {
        "clusterIP": "None",
        "publishNotReadyAddresses": True,  # ranks resolve each other before they are ready
        "selector": {WORKLOAD_LABEL: own[WORKLOAD_LABEL]},
        "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT}],
    }
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _meta(name, namespace, own),
        "spec": spec,
    }


def _annotations(tmeta: dict[str, Any], job: JobSpec, settings: KubeSettings) -> tuple[dict[str, str], Any]:
    """The pod's annotations from the template's, less Gridlane's own words, and the topology level it names."""
    annotations = dict(tmeta.get("annotations") or {})
    annotations.pop(policy.ALLOW_ANNOTATION, None)  # IT's word to Gridlane, not to the cluster
    level = topology_level(annotations.pop(TOPOLOGY_ANNOTATION, ""))
    if level and job.nodes > 1 and not settings.volcano:  # Kueue places the gang's pods within one such domain
        annotations[f"kueue.x-k8s.io/podset-{level[0]}-topology"] = level[1]
    return annotations, level


def topology_level(text: str) -> tuple[str, str] | None:
    """A target's `gridlane.io/topology` annotation ("required: example.com/rack" or "preferred: ...") as
    (how, node label); None when absent. check_template refuses any other shape."""
    how, _, label = text.partition(":")
    if not text.strip():
        return None
    if how.strip() not in ("required", "preferred") or not _LABEL_KEY.match(label.strip()):
        raise TemplateError(f"{TOPOLOGY_ANNOTATION}: write 'required: <node label>' or 'preferred: <node label>'")
    return how.strip(), label.strip()


def _podgroup(job: JobSpec, name: str, namespace: str, own: dict[str, str], settings: KubeSettings) -> dict[str, Any]:
    total = job.per_node.times(job.nodes)
    need: dict[str, str] = {}
    if total.cpus_milli:
        need["cpu"] = f"{total.cpus_milli}m" if total.cpus_milli % 1000 else str(total.cpus_milli // 1000)
    if total.memory_mib:
        need["memory"] = f"{total.memory_mib}Mi"
    if total.gpus_milli:
        need[settings.gpu.name] = str(gpu_units(job, settings) * job.nodes)
    spec: dict[str, Any] = {"minMember": job.nodes, "minResources": need}
    if settings.volcano_queue:
        spec["queue"] = settings.volcano_queue
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": _meta(name, namespace, own),
        "spec": spec,
    }


def _masked(document: dict[str, Any]) -> dict[str, Any]:
    if document.get("kind") == "Secret":  # an array's: `export NAME='value'` lines per element
        files = {}
        for key, text in (document.get("stringData") or {}).items():
            lines = []
            for line in text.splitlines():
                name = line.removeprefix("export ").partition("=")[0]
                lines.append(f"export {name}={shlex.quote(notebook.MASKED)}" if name in notebook.SECRET_ENV else line)
            files[key] = "".join(f"{line}\n" for line in lines)
        return document | {"stringData": files}
    if document.get("kind") != "Job":
        return document
    copied = copy.deepcopy(document)
    pod = copied["spec"]["template"]["spec"]
    for container in [*(pod.get("containers") or []), *(pod.get("initContainers") or [])]:
        for entry in container.get("env") or []:
            if entry.get("name") in notebook.SECRET_ENV and "value" in entry:
                entry["value"] = notebook.MASKED
    return copied


def to_json(manifests: Manifests) -> str:
    """The manifests as the workload's record: the JSON the client sends, one object or a v1 List of them.

    JSON rather than YAML: it is literally what went over the wire, `kubectl apply -f` takes it, and
    emitting YAML cost more than the API call itself (it halved Jobs created per second). The job's report
    secret is masked in the record, as in a batch script's (fabrics.ssh.notebook).
    """
    documents = [_masked(d) for d in manifests.documents()]
    if len(documents) == 1:
        return json.dumps(documents[0], indent=2)
    return json.dumps({"apiVersion": "v1", "kind": "List", "items": documents}, indent=2)

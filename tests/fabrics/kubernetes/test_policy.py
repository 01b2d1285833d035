"""A user's manifest is held to an allowlist: each privilege and reference field both ways, the person's ids, and two
teams that cannot reach each other's Secrets and claims."""

from __future__ import annotations

import json
from typing import Any

import pytest

from fabrics.base import FabricError
from fabrics.kubernetes import manifest, policy, render
from fabrics.kubernetes.fabric import KubernetesFabric
from fabrics.kubernetes.manifest import ManifestError
from fabrics.kubernetes.settings import KubeSettings
from tests.fabrics.kubernetes.conftest import NAMESPACE, connect, spec
from tests.k8s_double import ApiDouble

POD = "spec.template.spec"
C0 = f"{POD}.containers[0]"


def job(pod: dict[str, Any] | None = None, container: dict[str, Any] | None = None) -> str:
    main = {"name": "main", "image": "busybox:1.36", "command": ["true"]} | (container or {})
    body = {"containers": [main], "restartPolicy": "Never"} | (pod or {})
    return json.dumps({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "j"},
                       "spec": {"template": {"spec": body}}})  # fmt: skip


TOKEN = {"serviceAccountToken": {"path": "t"}}
PRIVILEGES = [
    # (what it is, the pod part, the container part, the refused path, the exception that allows it)
    ("a service account", {"serviceAccountName": "admin"}, None, f"{POD}.serviceAccountName", "serviceAccountName"),
    ("the old service account field", {"serviceAccount": "admin"}, None, f"{POD}.serviceAccount", "serviceAccountName"),
    ("a mounted token", {"automountServiceAccountToken": True}, None, f"{POD}.automountServiceAccountToken",
     "automountServiceAccountToken"),
    ("a projected token", {"volumes": [{"name": "t", "projected": {"sources": [TOKEN]}}]}, None,
     f"{POD}.volumes[0].projected.sources[0].serviceAccountToken", "serviceAccountToken"),
    ("a node by name", {"nodeName": "gpu-node-1"}, None, f"{POD}.nodeName", "nodeName"),
    ("another scheduler", {"schedulerName": "mine"}, None, f"{POD}.schedulerName", "schedulerName"),
    ("a host port", None, {"ports": [{"containerPort": 80, "hostPort": 80}]}, f"{C0}.ports[0].hostPort", "hostPort"),
    ("the host's network", {"hostNetwork": True}, None, f"{POD}.hostNetwork", "hostNetwork"),
    ("the host's processes", {"hostPID": True}, None, f"{POD}.hostPID", "hostPID"),
    ("the host's IPC", {"hostIPC": True}, None, f"{POD}.hostIPC", "hostIPC"),
    ("a privileged container", None, {"securityContext": {"privileged": True}}, f"{C0}.securityContext.privileged",
     "privileged"),
    ("an added capability", None, {"securityContext": {"capabilities": {"add": ["NET_RAW"]}}},
     f"{C0}.securityContext.capabilities.add", "capabilities"),
    ("uid 0 in a container", None, {"securityContext": {"runAsUser": 0}}, f"{C0}.securityContext.runAsUser",
     "runAsRoot"),
    ("uid 0 for the pod", {"securityContext": {"runAsUser": 0}}, None, f"{POD}.securityContext.runAsUser", "runAsRoot"),
    ("root allowed outright", {"securityContext": {"runAsNonRoot": False}}, None,
     f"{POD}.securityContext.runAsNonRoot", "runAsRoot"),
    ("a priority class", {"priorityClassName": "system-cluster-critical"}, None, f"{POD}.priorityClassName",
     "priorityClassName"),
    ("a reserved taint tolerated", {"tolerations": [{"key": "example.com/reserved", "operator": "Exists"}]}, None,
     f"{POD}.tolerations[0]", "reservedTolerations"),
    ("every taint tolerated", {"tolerations": [{"operator": "Exists"}]}, None, f"{POD}.tolerations[0]",
     "reservedTolerations"),
    ("a host path", {"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}, None, f"{POD}.volumes[0].hostPath",
     "hostPath"),
    ("supplemental groups", {"securityContext": {"supplementalGroups": [0]}}, None,
     f"{POD}.securityContext.supplementalGroups", "supplementalGroups"),
]  # fmt: skip


@pytest.mark.parametrize(("what", "pod", "container", "field", "allow"), PRIVILEGES, ids=[p[0] for p in PRIVILEGES])
def test_each_privilege_is_refused_naming_its_path_unless_the_target_allows_it(
    what: str, pod: Any, container: Any, field: str, allow: str
) -> None:
    reserved = ("example.com/reserved",)
    with pytest.raises(ManifestError) as refused:
        manifest.read(job(pod, container), policy=policy.Policy(reserved_taints=reserved))
    assert refused.value.field == field
    others = policy.Policy(policy.ALLOWABLE - {allow}, reserved)
    with pytest.raises(ManifestError):
        manifest.read(job(pod, container), policy=others)
    manifest.read(job(pod, container), policy=policy.Policy(frozenset({allow}), reserved))


@pytest.mark.parametrize(
    ("what", "pod", "container", "field"),
    [
        ("an unknown pod field", {"hostUsers": False}, None, f"{POD}.hostUsers"),
        ("an unknown volume type", {"volumes": [{"name": "n", "nfs": {"server": "x", "path": "/"}}]}, None,
         f"{POD}.volumes[0].nfs"),
        ("an unknown container field", None, {"volumeDevices": []}, f"{C0}.volumeDevices"),
        ("an unconfined seccomp profile", {"securityContext": {"seccompProfile": {"type": "Unconfined"}}}, None,
         f"{POD}.securityContext.seccompProfile.type"),
        ("SELinux options", None, {"securityContext": {"seLinuxOptions": {"level": "s0"}}},
         f"{C0}.securityContext.seLinuxOptions"),
    ],
)  # fmt: skip
def test_what_the_allowlist_does_not_name_is_refused(what: str, pod: Any, container: Any, field: str) -> None:
    with pytest.raises(ManifestError) as refused:
        manifest.read(job(pod, container), policy=policy.Policy(policy.ALLOWABLE))
    assert refused.value.field == field


def test_harmless_fields_pass_and_an_allow_annotation_reads_from_the_targets_template() -> None:
    safe = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}], "nodeSelector": {"gpu": "h100"}}
    manifest.read(job(safe, {"securityContext": {"runAsNonRoot": True, "capabilities": {"drop": ["ALL"]}}}))
    template = "metadata:\n  annotations:\n    gridlane.io/allow: hostNetwork, nonsense\n"
    template += "spec:\n  containers: [{name: main}]"
    assert manifest.target_policy(template, {"reserved_taints": ["a.b/c"]}) == policy.Policy(
        frozenset({"hostNetwork"}), ("a.b/c",)
    )


REFERENCES = [
    ({"volumes": [{"name": "s", "secret": {"secretName": "x"}}]}, None, f"{POD}.volumes[0].secret.secretName"),
    ({"volumes": [{"name": "c", "configMap": {"name": "x"}}]}, None, f"{POD}.volumes[0].configMap.name"),
    ({"volumes": [{"name": "p", "persistentVolumeClaim": {"claimName": "x"}}]}, None,
     f"{POD}.volumes[0].persistentVolumeClaim.claimName"),
    ({"volumes": [{"name": "q", "projected": {"sources": [{"secret": {"name": "x"}}]}}]}, None,
     f"{POD}.volumes[0].projected.sources[0].secret.name"),
    ({"imagePullSecrets": [{"name": "x"}]}, None, f"{POD}.imagePullSecrets[0].name"),
    (None, {"env": [{"name": "E", "valueFrom": {"secretKeyRef": {"name": "x", "key": "k"}}}]},
     f"{C0}.env[0].valueFrom.secretKeyRef.name"),
    (None, {"env": [{"name": "E", "valueFrom": {"configMapKeyRef": {"name": "x", "key": "k"}}}]},
     f"{C0}.env[0].valueFrom.configMapKeyRef.name"),
    (None, {"envFrom": [{"secretRef": {"name": "x"}}]}, f"{C0}.envFrom[0].secretRef.name"),
    (None, {"envFrom": [{"configMapRef": {"name": "x"}}]}, f"{C0}.envFrom[0].configMapRef.name"),
]  # fmt: skip


def labelled(double: ApiDouble, resource: str, name: str, team: str) -> None:
    body: dict[str, Any] = {"metadata": {"name": name, "labels": {"gridlane.io/team": team}}}
    if resource == "persistentvolumeclaims":
        body["spec"] = {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}}
    with double.store.lock:
        from tests.k8s_double.objects import BY_NAME

        double.store.create(BY_NAME[resource], NAMESPACE, body)


@pytest.mark.parametrize(("pod", "container", "field"), REFERENCES, ids=[r[2] for r in REFERENCES])
def test_each_reference_reaches_only_the_teams_own_objects(
    double: ApiDouble, fabric: KubernetesFabric, pod: Any, container: Any, field: str
) -> None:
    text = job(pod, container)
    (ref,) = policy.references(json.loads(text)["spec"]["template"]["spec"])
    assert ref.field == field
    labelled(double, ref.kind, "x", "fraud")  # another team's, in the same namespace
    with pytest.raises(FabricError) as refused:
        fabric.submit(spec(script=text, group="vision"))
    assert str(refused.value).startswith(f"{field}: 'x' is not a")
    assert not refused.value.retryable
    assert double.objects("jobs", NAMESPACE) == []
    labelled(double, ref.kind, "y", "vision")  # its own
    assert fabric.submit(spec(script=text.replace('"x"', '"y"'), group="vision")).startswith("gl-")


def test_one_teams_manifest_cannot_name_the_other_teams_secret_and_claim(
    double: ApiDouble, fabric: KubernetesFabric
) -> None:
    labelled(double, "secrets", "fraud-db", "fraud")
    labelled(double, "persistentvolumeclaims", "fraud-data", "fraud")
    volumes = [
        {"name": "db", "secret": {"secretName": "fraud-db"}},
        {"name": "data", "persistentVolumeClaim": {"claimName": "fraud-data"}},
    ]
    text = job({"volumes": volumes})
    with pytest.raises(FabricError, match=r"volumes\[0\]\.secret\.secretName: 'fraud-db'"):
        fabric.submit(spec(script=text, group="vision"))
    without_secret = job({"volumes": volumes[1:]})
    with pytest.raises(FabricError, match=r"persistentVolumeClaim\.claimName: 'fraud-data'"):
        fabric.submit(spec(script=without_secret, group="vision"))
    assert fabric.submit(spec(script=text, group="fraud")).startswith("gl-")  # fraud's own


def test_the_person_runs_as_their_posix_ids_and_never_as_root(double: ApiDouble, kubeconfig: Any) -> None:
    mapped = connect({"kubeconfig": str(kubeconfig), "posix_ids": {"alice": {"uid": 2001, "gid": 3001}}})
    name = mapped.submit(spec(script=job(None, {"securityContext": {"runAsUser": 5000}}), run_as="alice"))
    created = double.get("jobs", NAMESPACE, name)
    assert created is not None
    pod = created["spec"]["template"]["spec"]
    assert {k: pod["securityContext"][k] for k in ("runAsNonRoot", "runAsUser", "runAsGroup", "fsGroup")} == {
        "runAsNonRoot": True, "runAsUser": 2001, "runAsGroup": 3001, "fsGroup": 3001}  # fmt: skip
    assert pod["containers"][0]["securityContext"]["runAsUser"] == 2001  # the manifest's 5000 does not win
    assert pod["automountServiceAccountToken"] is False
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    # A rendered (template) job too; and root, or an id below the floor, runs nothing.
    made = render.render(spec(run_as="alice"), mapped.settings, NAMESPACE)
    assert made.job["spec"]["template"]["spec"]["securityContext"]["runAsUser"] == 2001
    low = KubeSettings.parse({"posix_ids": {"svc": {"uid": 999, "gid": 999}}})
    for settings, user in ((mapped.settings, "root"), (low, "svc")):
        with pytest.raises(Exception, match="below"):
            render.render(spec(run_as=user), settings, NAMESPACE)


def test_a_job_field_outside_the_allowlist_is_refused_and_an_unknown_field_deeper_is_refused_by_the_server(
    double: ApiDouble, fabric: KubernetesFabric
) -> None:
    body = json.loads(job())
    body["spec"]["manualSelector"] = True
    with pytest.raises(ManifestError) as refused:
        manifest.read(json.dumps(body))
    assert refused.value.field == "spec.manualSelector"
    # A misspelt field inside what the policy lets through is refused by the client's own model before it is sent
    # (and by the API server under strict validation, tests/fabrics/kubernetes/test_double_schema.py): not retried.
    typo = job(None, {"resources": {"limitz": {"cpu": "1"}}})
    with pytest.raises(FabricError) as refused_too:
        fabric.submit(spec(script=typo))
    assert "spec.template.spec.containers.0.resources.limitz: Extra inputs are not permitted" in str(refused_too.value)
    assert not refused_too.value.retryable
    assert double.objects("jobs", NAMESPACE) == []

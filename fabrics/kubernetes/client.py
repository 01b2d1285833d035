"""The one seam to a cluster: the official `kubernetes` client, one ApiClient per fabric.

Calls ask for the raw JSON (`_preload_content=False`) and hand plain dicts to parse.py, which then
reads exactly what the API server sent (the same JSON as the recorded examples), and skips building
model objects nobody reads. Every failure becomes a KubeError, a FabricError that says whether a
retry can help.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from fabrics.base import FabricError
from fabrics.kubernetes.settings import KubeSettings

IN_CLUSTER_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
# Answers a retry cannot change: the request itself is wrong.
PERMANENT = frozenset({400, 405, 413, 415, 422})
CUSTOM = {"podgroups": ("scheduling.volcano.sh", "v1beta1", "podgroups")}
KUEUE_GROUP = "kueue.x-k8s.io"
KUEUE_VERSIONS = ("v1beta2", "v1beta1")  # what Gridlane speaks, most preferred first
STRICT = "Strict"  # every write asks the API server to refuse unknown fields rather than drop them
MERGE_PATCH = "application/merge-patch+json"  # custom resources take JSON merge patches, never strategic ones


class KubeError(FabricError):
    """An API call failed; `code` and `reason` are the Status's (0 and "" when no answer came)."""

    def __init__(self, message: str, *, code: int = 0, reason: str = "") -> None:
        super().__init__(message, retryable=code not in PERMANENT)
        self.code = code
        self.reason = reason


class KubeClient:
    """Namespaced calls for the kinds Gridlane creates; each returns the API server's JSON as dicts."""

    def __init__(self, settings: KubeSettings) -> None:
        import urllib3
        from kubernetes import client
        from kubernetes import config as kube_config
        from kubernetes.config.config_exception import ConfigException

        config: Any = kube_config  # its loaders carry no annotations

        from pydantic import ValidationError  # the client's models check a body before it is sent

        self._transport_errors: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError)
        self._refused: type[Exception] = ValidationError
        self._api_exception: type[Exception] = client.ApiException
        self.timeout = (min(10.0, settings.request_timeout_s), settings.request_timeout_s)
        configuration = client.Configuration()
        namespace = settings.namespace
        try:
            if settings.kubeconfig:
                context = settings.context or None
                config.load_kube_config(
                    config_file=settings.kubeconfig,
                    context=context,
                    client_configuration=configuration,
                    persist_config=False,
                )
                if not namespace:
                    contexts, active = config.list_kube_config_contexts(config_file=settings.kubeconfig)
                    chosen = next((c for c in contexts if c["name"] == context), active) if context else active
                    namespace = (chosen or {}).get("context", {}).get("namespace", "")
            else:
                config.load_incluster_config(client_configuration=configuration)
                if not namespace and IN_CLUSTER_NAMESPACE.exists():
                    namespace = IN_CLUSTER_NAMESPACE.read_text().strip()
        except (ConfigException, OSError, ValueError, TypeError, KeyError) as exc:
            where = settings.kubeconfig or "the in-cluster service account"
            raise KubeError(f"cannot load the Kubernetes credentials from {where}: {exc}") from exc
        self.namespace = namespace or "default"
        # A namespace per team (settings.namespace_pattern): lists span every namespace, and each object's namespace
        # is remembered by name from creates and lists (Gridlane's names are unique: gl-<workload id>).
        self.everywhere = bool(settings.namespace_pattern)
        self.where: dict[str, str] = {}
        self.host = configuration.host
        self.api = client.ApiClient(configuration)
        self.core = client.CoreV1Api(self.api)
        self.batch = client.BatchV1Api(self.api)
        self.custom = client.CustomObjectsApi(self.api)
        self.version_api = client.VersionApi(self.api)
        self.apis = client.ApisApi(self.api)
        self._kueue_version: str | None = None

    def close(self) -> None:
        self.api.close()  # type: ignore[no-untyped-call]

    # -- the calls -------------------------------------------------------------------------------

    def create(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create the object (in its metadata's namespace, else the fabric's); KubeError with reason AlreadyExists when
        one of that name exists."""
        ns = self._remember(body)
        strict = {"field_validation": STRICT}
        if kind == "jobs":
            return self._json(self.batch.create_namespaced_job, ns, body, **strict)
        if kind == "services":
            return self._json(self.core.create_namespaced_service, ns, body, **strict)
        if kind == "secrets":
            return self._json(self.core.create_namespaced_secret, ns, body, **strict)
        group, version, plural = self._custom(kind)
        return self._json(self.custom.create_namespaced_custom_object, group, version, ns, plural, body, **strict)

    def list_by_label(self, kind: str, selector: str) -> list[dict[str, Any]]:
        """The items of this kind in the fabric's namespace (every namespace, with a namespace per team) that match
        the label selector."""
        if self.everywhere:
            items = self._everywhere(kind, label_selector=selector)
            for item in items:
                self._remember(item)
            return items
        ns = self.namespace
        if kind == "jobs":
            listed = self._json(self.batch.list_namespaced_job, ns, label_selector=selector)
        elif kind == "pods":
            listed = self._json(self.core.list_namespaced_pod, ns, label_selector=selector)
        elif kind == "services":
            listed = self._json(self.core.list_namespaced_service, ns, label_selector=selector)
        else:
            group, version, plural = self._custom(kind)
            call = self.custom.list_namespaced_custom_object
            listed = self._json(call, group, version, ns, plural, label_selector=selector)
        return list(listed.get("items") or [])

    def delete(self, kind: str, name: str) -> bool:
        """Delete with background propagation (its pods go too); False when there was nothing to delete."""
        ns = self._ns(name)
        try:
            if kind == "jobs":
                self._json(self.batch.delete_namespaced_job, name, ns, propagation_policy="Background")
            elif kind == "services":
                self._json(self.core.delete_namespaced_service, name, ns, propagation_policy="Background")
            elif kind == "pods":
                self._json(self.core.delete_namespaced_pod, name, ns)
            elif kind == "secrets":
                self._json(self.core.delete_namespaced_secret, name, ns)
            else:
                group, version, plural = self._custom(kind)
                call = self.custom.delete_namespaced_custom_object
                self._json(call, group, version, ns, plural, name, propagation_policy="Background")
        except KubeError as error:
            if error.code == 404:
                return False
            raise
        return True

    def delete_job_unchanged(self, name: str, resource_version: str) -> bool:
        """Delete the Job (background propagation) only if it is still at `resource_version` (the API server's
        precondition: one decision on its side); False when it changed since (409) or is gone (404)."""
        body = {"preconditions": {"resourceVersion": resource_version}, "propagationPolicy": "Background"}
        try:
            self._json(self.batch.delete_namespaced_job, name, self._ns(name), body=body)
        except KubeError as error:
            if error.code in (404, 409):
                return False
            raise
        return True

    def read(self, kind: str, name: str, namespace: str = "") -> dict[str, Any]:
        """A Secret, ConfigMap or PersistentVolumeClaim of that name; KubeError with code 404 when there is none."""
        calls: dict[str, Callable[..., Any]] = {
            "secrets": self.core.read_namespaced_secret,
            "configmaps": self.core.read_namespaced_config_map,
            "persistentvolumeclaims": self.core.read_namespaced_persistent_volume_claim,
        }
        return self._json(calls[kind], name, namespace or self.namespace)

    def read_job(self, name: str) -> dict[str, Any]:
        """The Job of that name; KubeError with code 404 when there is none."""
        return self._json(self.batch.read_namespaced_job, name, self._ns(name))

    def patch_job(self, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of the Job (e.g. its spec.activeDeadlineSeconds, which may change while it runs)."""
        call = self.batch.patch_namespaced_job
        return self._json(call, name, self._ns(name), patch, _content_type=MERGE_PATCH, field_validation=STRICT)

    def set_owner(self, kind: str, name: str, owner: dict[str, Any]) -> None:
        """Make `owner` the object's owner, so the garbage collector deletes it with the owner."""
        patch = {"metadata": {"ownerReferences": [owner]}}
        ns = self._ns(name)
        if kind == "services":
            self._json(self.core.patch_namespaced_service, name, ns, patch)
        elif kind == "secrets":
            self._json(self.core.patch_namespaced_secret, name, ns, patch)
        else:
            group, version, plural = self._custom(kind)
            # Custom resources take JSON merge patches only, never strategic ones.
            call = self.custom.patch_namespaced_custom_object
            self._json(call, group, version, ns, plural, name, patch, _content_type="application/merge-patch+json")

    # -- a namespace per team -------------------------------------------------------------------------

    def create_core(self, kind: str, body: dict[str, Any]) -> dict[str, Any]:
        """Create a Namespace, ServiceAccount, ResourceQuota or PersistentVolumeClaim (AlreadyExists as create)."""
        ns, strict = body["metadata"].get("namespace", ""), {"field_validation": STRICT}
        if kind == "namespaces":
            return self._json(self.core.create_namespace, body, **strict)
        calls: dict[str, Callable[..., Any]] = {
            "serviceaccounts": self.core.create_namespaced_service_account,
            "resourcequotas": self.core.create_namespaced_resource_quota,
            "persistentvolumeclaims": self.core.create_namespaced_persistent_volume_claim,
        }
        return self._json(calls[kind], ns, body, **strict)

    def patch_core(self, kind: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch of a Namespace (namespace "") or a ResourceQuota."""
        if kind == "namespaces":
            return self._json(self.core.patch_namespace, name, patch, _content_type=MERGE_PATCH)
        call = self.core.patch_namespaced_resource_quota
        return self._json(call, name, namespace, patch, _content_type=MERGE_PATCH, field_validation=STRICT)

    def _remember(self, obj: dict[str, Any]) -> str:
        meta = obj.get("metadata") or {}
        ns = str(meta.get("namespace") or self.namespace)
        if self.everywhere and meta.get("name"):
            if len(self.where) > 50_000:  # forget the oldest half: a lookup finds them again
                self.where = dict(list(self.where.items())[25_000:])
            self.where[str(meta["name"])] = ns
        return ns

    def _ns(self, name: str) -> str:
        """The namespace of a Job (or its Service, Secret, PodGroup: they share its name) or a pod by name."""
        if not self.everywhere:
            return self.namespace
        if name not in self.where:
            for kind in ("jobs", "pods"):
                for item in self._everywhere(kind, field_selector=f"metadata.name={name}"):
                    self._remember(item)
                if name in self.where:
                    break
        return self.where.get(name, self.namespace)

    def _everywhere(self, kind: str, **selectors: str) -> list[dict[str, Any]]:
        if kind == "jobs":
            listed = self._json(self.batch.list_job_for_all_namespaces, **selectors)
        elif kind == "pods":
            listed = self._json(self.core.list_pod_for_all_namespaces, **selectors)
        elif kind == "services":
            listed = self._json(self.core.list_service_for_all_namespaces, **selectors)
        else:
            group, version, plural = self._custom(kind)
            listed = self._json(self.custom.list_cluster_custom_object, group, version, plural, **selectors)
        return list(listed.get("items") or [])

    # -- Kueue's queues (cluster-scoped but for localqueues; "" as the namespace of a cluster-scoped one) -----------

    @property
    def kueue_version(self) -> str:
        """The newest Kueue API version both the cluster serves and Gridlane speaks, from API discovery (one GET of
        /apis, once per client); "" when the cluster serves neither (no Kueue, or one too old or too new)."""
        if self._kueue_version is None:
            groups = self._json(self.apis.get_api_versions).get("groups") or []
            served = {v.get("version") for g in groups if g.get("name") == KUEUE_GROUP for v in g.get("versions") or []}
            self._kueue_version = next((v for v in KUEUE_VERSIONS if v in served), "")
        return self._kueue_version

    def _kueue(self) -> str:
        version = self.kueue_version
        if not version:
            raise KubeError(f"the cluster serves no Kueue API Gridlane speaks ({', '.join(KUEUE_VERSIONS)})", code=404)
        return version

    def _custom(self, kind: str) -> tuple[str, str, str]:
        if kind == "kueue-workloads":
            return KUEUE_GROUP, self._kueue(), "workloads"
        return CUSTOM[kind]

    def kueue_list(self, plural: str, selector: str) -> list[dict[str, Any]]:
        """Every object of a Kueue kind matching the selector, in all namespaces."""
        call = self.custom.list_cluster_custom_object
        listed = self._json(call, KUEUE_GROUP, self._kueue(), plural, label_selector=selector or None)
        return list(listed.get("items") or [])

    def kueue_read(self, plural: str, namespace: str, name: str) -> dict[str, Any]:
        if namespace:
            call = self.custom.get_namespaced_custom_object
            return self._json(call, KUEUE_GROUP, self._kueue(), namespace, plural, name)
        return self._json(self.custom.get_cluster_custom_object, KUEUE_GROUP, self._kueue(), plural, name)

    def kueue_create(self, plural: str, body: dict[str, Any]) -> dict[str, Any]:
        namespace = body["metadata"].get("namespace", "")
        if namespace:
            call = self.custom.create_namespaced_custom_object
            return self._json(call, KUEUE_GROUP, self._kueue(), namespace, plural, body, field_validation=STRICT)
        create = self.custom.create_cluster_custom_object
        return self._json(create, KUEUE_GROUP, self._kueue(), plural, body, field_validation=STRICT)

    def kueue_patch(self, plural: str, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        """A JSON merge patch (RFC 7386: a null removes the key)."""
        if namespace:
            call = self.custom.patch_namespaced_custom_object
            return self._json(
                call, KUEUE_GROUP, self._kueue(), namespace, plural, name, patch, _content_type=MERGE_PATCH,
                field_validation=STRICT,
            )  # fmt: skip
        call_ = self.custom.patch_cluster_custom_object
        return self._json(
            call_, KUEUE_GROUP, self._kueue(), plural, name, patch, _content_type=MERGE_PATCH, field_validation=STRICT
        )

    def kueue_delete(self, plural: str, namespace: str, name: str) -> bool:
        """False when there was nothing to delete."""
        try:
            if namespace:
                call = self.custom.delete_namespaced_custom_object
                self._json(call, KUEUE_GROUP, self._kueue(), namespace, plural, name)
            else:
                self._json(self.custom.delete_cluster_custom_object, KUEUE_GROUP, self._kueue(), plural, name)
        except KubeError as error:
            if error.code == 404:
                return False
            raise
        return True

    def log(self, pod: str, tail_lines: int) -> str:
        response = self._call(self.core.read_namespaced_pod_log, pod, self._ns(pod), tail_lines=tail_lines)
        data = bytes(response.data)
        response.release_conn()
        return data.decode("utf-8", "replace")

    def nodes(self, selector: str) -> list[dict[str, Any]]:
        return list(self._json(self.core.list_node, label_selector=selector or None).get("items") or [])

    def live_pods_everywhere(self) -> list[dict[str, Any]]:
        """Pods in every namespace that still hold resources (not Succeeded, not Failed)."""
        phases = "status.phase!=Succeeded,status.phase!=Failed"
        return list(self._json(self.core.list_pod_for_all_namespaces, field_selector=phases).get("items") or [])

    def version(self) -> dict[str, Any]:
        return self._json(self.version_api.get_code)

    # -- plumbing --------------------------------------------------------------------------------

    def _json(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        response = self._call(call, *args, **kwargs)
        data = bytes(response.data)
        response.release_conn()
        try:
            parsed = json.loads(data) if data else {}
        except ValueError as exc:
            raise KubeError(f"the Kubernetes API at {self.host} answered with something other than JSON") from exc
        return parsed if isinstance(parsed, dict) else {}

    def _call(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        try:
            return call(*args, _preload_content=False, _request_timeout=self.timeout, **kwargs)
        except self._transport_errors as exc:
            raise KubeError(f"cannot reach the Kubernetes API at {self.host}: {exc}") from exc
        except self._api_exception as exc:
            raise _error(exc) from exc
        except self._refused as exc:  # the client's own model refused the body: a field it does not know, a type
            first = exc.errors()[0] if exc.errors() else {}  # type: ignore[attr-defined]
            where = ".".join(str(p) for p in first.get("loc", ())[1:])  # ("2", "spec", ...): the argument's position
            raise KubeError(
                f"the object is not valid: {where}: {first.get('msg', exc)}", code=400, reason="Invalid"
            ) from exc


def _error(exc: Any) -> KubeError:
    """A KubeError from the client's ApiException, worded from the Status the API server sent.

    The body is a meta/v1 Status: {"kind": "Status", "status": "Failure", "reason": "AlreadyExists",
    "message": "jobs.batch \"gl-...\" already exists", "code": 409, ...}.
    """
    code = int(exc.status or 0)
    try:
        body = json.loads(exc.body) if exc.body else {}
    except (ValueError, TypeError):
        body = {}
    if not isinstance(body, dict):
        body = {}
    reason = str(body.get("reason") or exc.reason or "")
    message = str(body.get("message") or reason or exc)
    return KubeError(f"Kubernetes answered {code} {reason}: {message}", code=code, reason=reason)

"""The API double's HTTP side: real REST paths and JSON over a ThreadingHTTPServer on 127.0.0.1.

Routes (the subset of the API the official client calls for Gridlane, and a little more):
    GET  /version, /api, /api/v1, /apis, /apis/{group}/{version}
    GET|POST              /api/v1/namespaces/{ns}/{plural}            list (labelSelector, fieldSelector), create
    GET|PUT|PATCH|DELETE  /api/v1/namespaces/{ns}/{plural}/{name}     read, replace, patch, delete
    GET|PUT|PATCH         .../{plural}/{name}/status                  a custom resource's status subresource
    GET                   /api/v1/namespaces/{ns}/pods/{name}/log     (tailLines, limitBytes)
    GET                   /api/v1/{plural}                            nodes, namespaces, or pods in every namespace
    the same under /apis/{group}/{version}/... for apps/v1, batch/v1, networking.k8s.io/v1, scheduling.volcano.sh,
    kueue.x-k8s.io (workloads, localqueues; cluster-scoped clusterqueues and resourceflavors)
Patches: merge patch; strategic merge patch applied as a merge patch on built-in kinds (custom resources answer it
415, as the API server does); a JSON patch (RFC 6902) as a list of operations.
Every error is a meta/v1 Status. Writes bump a global resourceVersion.
"""

from __future__ import annotations

import copy
import itertools
import json
import re
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.k8s_double import admission, crds, podsecurity, validation
from tests.k8s_double.objects import (
    BY_NAME,
    KINDS,
    ApiError,
    Kind,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
    now_rfc3339,
    object_details,
    status,
)
from tests.k8s_double.selectors import SelectorError, field_selector, label_selector

Key = tuple[str, str, str]  # (resource as BY_NAME names it, namespace or "", name)

VERSION = {
    "major": "1",
    "minor": "31",
    "gitVersion": "v1.31.2",
    "gitCommit": "5864a4677267e6adeae276ad85882a8714d69d9d",
    "gitTreeState": "clean",
    "buildDate": "2024-10-22T20:28:14Z",
    "goVersion": "go1.22.8",
    "compiler": "gc",
    "platform": "linux/amd64",
}


@dataclass
class Fault:
    """Answer matching requests with an error instead: `times` of them, then behave again."""

    method: str
    path: re.Pattern[str]
    code: int
    times: int = 1


@dataclass
class Request:
    method: str
    path: str
    query: dict[str, str]


@dataclass
class Store:
    """Every object the double holds, by (resource, namespace, name), under one lock."""

    lock: threading.RLock = field(default_factory=threading.RLock)
    objects: dict[Key, dict[str, Any]] = field(default_factory=dict)
    _rv: Iterator[int] = field(default_factory=lambda: itertools.count(1000))
    resource_version: int = 1000
    # What is written on each claim's volume, by (namespace, claim): relative path -> text. It outlives the pods that
    # mount it, as a volume does, and goes with its claim.
    volumes: dict[tuple[str, str], dict[str, str]] = field(default_factory=dict)

    def bump(self) -> str:
        self.resource_version = next(self._rv)
        return str(self.resource_version)

    def touch(self, obj: dict[str, Any]) -> None:
        obj["metadata"]["resourceVersion"] = self.bump()

    def key(self, kind: Kind, namespace: str, name: str) -> Key:
        return (kind.resource, namespace if kind.namespaced else "", name)

    def get(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        return self.objects.get(self.key(kind, namespace, name))

    def items(self, kind: Kind, namespace: str | None = None) -> list[dict[str, Any]]:
        return [
            obj
            for (resource, ns, _), obj in self.objects.items()
            if resource == kind.resource and (namespace is None or ns == namespace)
        ]

    def by_uid(self) -> dict[str, dict[str, Any]]:
        return {obj["metadata"]["uid"]: obj for obj in self.objects.values()}

    def create(
        self,
        kind: Kind,
        namespace: str,
        body: dict[str, Any],
        manager: str = "",
        *,
        version: str = "",
        strict: bool = False,
    ) -> dict[str, Any]:
        """Validate, default and store a new object (sent as `version`, stored as the kind's); ApiError as the API
        server would answer."""
        obj = copy.deepcopy(body)
        version = version or kind.version
        meta = obj.setdefault("metadata", {})
        if kind.namespaced:
            if meta.get("namespace") and meta["namespace"] != namespace:
                raise bad_request(
                    "the namespace of the provided object does not match the namespace sent on the request"
                )
            if self.get(BY_NAME["namespaces"], "", namespace) is None:
                raise not_found(BY_NAME["namespaces"], namespace)
            meta["namespace"] = namespace
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
        sent = f"{kind.group}/{version}" if kind.group else version
        if obj.get("kind", kind.kind) != kind.kind or obj.get("apiVersion", sent) != sent:
            raise bad_request(f"the API version in the data ({obj.get('apiVersion')}) does not match the expected")
        if meta.get("resourceVersion"):
            raise bad_request("resourceVersion should not be set on objects to be created")
        obj, missing = admission.admit(kind, version, obj, strict=strict)
        if kind.group == crds.GROUP:
            obj = crds.convert(kind.kind, obj, kind.version)
        meta = obj["metadata"]
        validation.decode(kind, obj)
        causes = admission.merged(validation.validate(kind, obj), missing)
        if causes:
            raise invalid(kind, meta.get("name", ""), causes)
        if self.get(kind, namespace, meta["name"]) is not None:
            raise already_exists(kind, meta["name"])
        if kind.kind == "Pod":  # Pod Security admission, by the namespace's label
            labels = (self.get(BY_NAME["namespaces"], "", namespace) or {}).get("metadata", {}).get("labels") or {}
            podsecurity.enforce(labels.get(podsecurity.ENFORCE, ""), obj)
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_rfc3339()
        # Pods, nodes, namespaces, services, secrets and config maps carry no generation.
        if kind.kind not in ("Pod", "Node", "Namespace", "Service", "Secret", "ConfigMap"):
            meta.setdefault("generation", 1)
        if manager:
            meta["managedFields"] = [
                {
                    "manager": manager,
                    "operation": "Update",
                    "apiVersion": kind.api_version,
                    "time": meta["creationTimestamp"],
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {}, "f:spec": {}},
                }
            ]
        validation.default(kind, obj)
        # The API server orders keys apiVersion, kind, metadata, spec, status.
        ordered = {k: obj[k] for k in ("apiVersion", "kind", "metadata", "spec", "status") if k in obj}
        ordered |= {k: v for k, v in obj.items() if k not in ordered}
        self.touch(ordered)
        self.objects[self.key(kind, namespace, meta["name"])] = ordered
        return ordered

    def remove(self, obj: dict[str, Any]) -> None:
        kind = BY_NAME[_resource_of(obj)]
        if kind.kind == "PersistentVolumeClaim":
            self.volumes.pop((obj["metadata"]["namespace"], obj["metadata"]["name"]), None)
        self.objects.pop(self.key(kind, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]), None)
        self.bump()


def _resource_of(obj: dict[str, Any]) -> str:
    api_version, kind = obj["apiVersion"], obj["kind"]
    group = api_version.rpartition("/")[0]
    for k in KINDS:
        if k.kind == kind and k.group == group:
            return k.resource
    raise KeyError(kind)


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 JSON merge patch (also how the double applies strategic merge patches)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


_NAMESPACED = re.compile(r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))/namespaces/(?P<ns>[^/]+)/(?P<rest>.+)$")
_CLUSTER = re.compile(r"^/(?:api/(?P<cv>v1)|apis/(?P<g>[^/]+)/(?P<v>[^/]+))/(?P<rest>[^/]+(?:/[^/]+){0,2})$")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the client's connection pool expects
    server: DoubleServer

    def setup(self) -> None:
        super().setup()
        # As Go's net/http does: no Nagle delay, or every small response waits for a delayed ACK.
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # tests read the double's request log instead

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PUT(self) -> None:
        self._serve("PUT")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        api = self.server.api
        url = urlsplit(self.path)
        query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        api.record(Request(method, url.path, query))
        try:
            if self.headers.get("Authorization") != f"Bearer {api.token}":
                raise ApiError(status(401, "Unauthorized", "Unauthorized"))
            api.maybe_fault(method, url.path)
            body = json.loads(raw) if raw else None
            agent, content_type = self.headers.get("User-Agent", ""), self.headers.get("Content-Type", "")
            code, payload = api.route(method, url.path, query, body, agent, content_type)
        except ApiError as error:
            code, payload = error.code, error.body
        except json.JSONDecodeError as exc:
            code, payload = 400, bad_request(f"couldn't get version/kind; json parse error: {exc}").body
        if isinstance(payload, str):
            self._send(code, payload.encode(), "text/plain")
        else:
            self._send(code, json.dumps(payload).encode(), "application/json")

    def _send(self, code: int, data: bytes, content_type: str) -> None:
        """Status line, headers and body in one write (apart, the body would wait on a delayed ACK)."""
        head = [
            f"{self.protocol_version} {code} {self.responses.get(code, ('Unknown',))[0]}",
            f"Date: {self.date_time_string()}",
            f"Content-Type: {content_type}",
            f"Content-Length: {len(data)}",
            f"Audit-Id: {uuid.uuid4()}",
        ]
        self.wfile.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + data)


class DoubleServer(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that hangs up mid-request is the client's business, as it is for an API server."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)

    def __init__(self, api: Api) -> None:
        super().__init__(("127.0.0.1", 0), Handler)
        self.api = api


class Api:
    """The REST semantics over a Store; the cluster simulation works on the same store."""

    def __init__(self, store: Store, token: str, kueue_versions: tuple[str, ...] = crds.RELEASE["v0.19"]) -> None:
        self.store = store
        self.kinds = served(kueue_versions)
        self.paths = {(k.group, k.version, k.plural): k for k in self.kinds}
        self.token = token
        self.requests: list[Request] = []
        self.faults: list[Fault] = []
        self.on_create: list[Callable[[Kind, dict[str, Any]], None]] = []
        self._log_lock = threading.Lock()
        self.pod_logs: Callable[[dict[str, Any]], str] = lambda pod: ""

    def record(self, request: Request) -> None:
        with self._log_lock:
            self.requests.append(request)

    def maybe_fault(self, method: str, path: str) -> None:
        with self._log_lock:
            for fault in self.faults:
                if fault.times > 0 and fault.method == method and fault.path.search(path):
                    fault.times -= 1
                    reason = {500: "InternalError", 503: "ServiceUnavailable", 429: "TooManyRequests", 403: "Forbidden"}
                    raise ApiError(status(fault.code, reason.get(fault.code, "Unknown"), "injected by the test"))

    def route(
        self, method: str, path: str, query: dict[str, str], body: Any, agent: str, content_type: str = ""
    ) -> tuple[int, Any]:
        if method == "GET" and path in ("/version", "/version/"):
            return 200, VERSION
        if method == "GET" and path == "/api":
            return 200, {
                "kind": "APIVersions",
                "versions": ["v1"],
                "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1:6443"}],
            }
        if method == "GET" and path in ("/apis", "/apis/"):
            return 200, _group_list(self.kinds)
        if method == "GET" and (m := re.fullmatch(r"/apis/([^/]+)", path)):
            return 200, _group(self.kinds, m[1])
        if method == "GET" and (path == "/api/v1" or re.fullmatch(r"/apis/[^/]+/[^/]+", path)):
            return 200, _resource_list(self.kinds, path)
        namespace: str | None
        if m := _NAMESPACED.match(path):
            namespace = m["ns"]
        elif m := _CLUSTER.match(path):
            namespace = None
        else:
            raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
        group, version = (m["g"] or "", m["v"]) if m["g"] else ("", m["cv"])
        parts = m["rest"].split("/")
        kind = self.paths.get((group, version, parts[0]))
        if kind is None or (namespace is not None and not kind.namespaced):
            raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
        name = parts[1] if len(parts) > 1 else None
        sub = parts[2] if len(parts) > 2 else None
        strict = query.get("fieldValidation") == "Strict"
        stored = BY_NAME[kind.resource]  # the kind at its stored version
        with self.store.lock:
            code, answer = self._route(
                method, stored, kind, namespace, name, sub, query, body, agent, strict, content_type
            )
        if kind.group == crds.GROUP and isinstance(answer, dict):
            if answer.get("kind") == kind.kind:
                answer = crds.convert(kind.kind, answer, kind.version)
            elif "items" in answer:
                answer["apiVersion"] = kind.api_version
                answer["items"] = [crds.convert(kind.kind, item, kind.version) for item in answer["items"]]
        return code, answer

    def _route(
        self, method: str, stored: Kind, sent: Kind, namespace: str | None, name: str | None, sub: str | None,
        query: dict[str, str], body: Any, agent: str, strict: bool, content_type: str,
    ) -> tuple[int, Any]:  # fmt: skip
        kind, ns = stored, namespace or ""
        if name is None:
            if method == "GET":
                everywhere = ("Pod", "Job", "Service", "LocalQueue", "Workload", "PodGroup")  # across namespaces
                if kind.namespaced and namespace is None and kind.kind not in everywhere:
                    raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
                return 200, self._list(kind, namespace, query)
            if method == "POST" and (namespace is not None or not kind.namespaced):
                manager = agent.split("/")[0]
                obj = self.store.create(kind, ns, body or {}, manager, version=sent.version, strict=strict)
                for hook in self.on_create:
                    hook(kind, obj)
                return 201, copy.deepcopy(obj)
            raise _method_not_allowed()
        if sub == "log" and kind.kind == "Pod" and method == "GET":
            return self._log(ns, name, query)
        if sub is not None and not (sub == "status" and kind.status_subresource):
            raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
        found = self.store.get(kind, ns, name)
        if found is None:
            raise not_found(kind, name)
        obj = found
        if method == "GET":
            return 200, copy.deepcopy(obj)
        if method == "DELETE" and sub is None:
            return self._delete(kind, obj, query, body)
        if method == "PATCH":
            if sent.group == crds.GROUP and isinstance(body, dict):
                body = crds.convert(kind.kind, body, kind.version)
            return 200, copy.deepcopy(self._patch(kind, obj, body, content_type, sub, strict))
        if method == "PUT":
            if sent.group == crds.GROUP and isinstance(body, dict):
                body = crds.convert(kind.kind, body, kind.version)
            return 200, copy.deepcopy(self._replace(kind, obj, body, sub))
        raise _method_not_allowed()

    def _list(self, kind: Kind, namespace: str | None, query: dict[str, str]) -> dict[str, Any]:
        try:
            labels = label_selector(query.get("labelSelector"))
            fields = field_selector(query.get("fieldSelector"))
        except SelectorError as exc:
            raise bad_request(str(exc)) from exc
        items = []
        for obj in sorted(
            self.store.items(kind, namespace), key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"])
        ):
            if labels(obj["metadata"].get("labels") or {}) and fields(obj):
                item = copy.deepcopy(obj)
                if kind.builtin:  # built-in lists carry kind and apiVersion once, on the list
                    item.pop("kind", None)
                    item.pop("apiVersion", None)
                items.append(item)
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": kind.api_version,
            "metadata": {"resourceVersion": str(self.store.resource_version)},
            "items": items,
        }

    def _log(self, namespace: str, name: str, query: dict[str, str]) -> tuple[int, Any]:
        pod = self.store.get(BY_NAME["pods"], namespace, name)
        if pod is None:
            raise not_found(BY_NAME["pods"], name)
        container = pod["spec"]["containers"][0]["name"]
        statuses = pod.get("status", {}).get("containerStatuses") or []
        waiting = statuses[0]["state"].get("waiting") if statuses else {"reason": "ContainerCreating"}
        if waiting is not None:
            message = f'container "{container}" in pod "{name}" is waiting to start: {waiting.get("reason", "")}'
            raise bad_request(message)
        text = self.pod_logs(pod)
        if "tailLines" in query:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[-int(query["tailLines"]) :]) if int(query["tailLines"]) else ""
        if "limitBytes" in query:
            text = text.encode()[: int(query["limitBytes"])].decode("utf-8", "replace")
        return 200, text

    def _delete(self, kind: Kind, obj: dict[str, Any], query: dict[str, str], body: Any) -> tuple[int, Any]:
        options = body if isinstance(body, dict) else {}
        preconditions = options.get("preconditions") or {}
        for name, have in (("resourceVersion", obj["metadata"]["resourceVersion"]), ("uid", obj["metadata"]["uid"])):
            if preconditions.get(name) and preconditions[name] != have:  # the API server's answer: 409
                raise conflict(kind, obj["metadata"]["name"])
        policy = query.get("propagationPolicy") or options.get("propagationPolicy")
        if policy is None:
            # The REST default for batch/v1 Jobs is still to orphan their pods (kubectl asks for background).
            policy = "Orphan" if kind.kind == "Job" else "Background"
        if policy not in ("Orphan", "Background", "Foreground"):
            raise invalid(kind, obj["metadata"]["name"], [("propagationPolicy", f'Unsupported value: "{policy}"')])
        meta = obj["metadata"]
        if policy == "Foreground":
            meta.setdefault("deletionTimestamp", now_rfc3339())
            meta["deletionGracePeriodSeconds"] = 0
            if "foregroundDeletion" not in meta.setdefault("finalizers", []):
                meta["finalizers"].append("foregroundDeletion")
            self.store.touch(obj)
            return 200, copy.deepcopy(obj)
        if policy == "Orphan":
            uid = meta["uid"]
            for other in list(self.store.objects.values()):
                refs = other["metadata"].get("ownerReferences")
                if refs and any(r["uid"] == uid for r in refs):
                    other["metadata"]["ownerReferences"] = [r for r in refs if r["uid"] != uid] or None
                    if other["metadata"]["ownerReferences"] is None:
                        del other["metadata"]["ownerReferences"]
                    self.store.touch(other)
        if kind.kind == "Pod" and obj.get("status", {}).get("phase") in ("Pending", "Running"):
            # A live pod terminates gracefully: it keeps a deletionTimestamp until the kubelet lets go.
            meta.setdefault("deletionTimestamp", now_rfc3339(time.time() + 30))
            meta["deletionGracePeriodSeconds"] = 30
            self.store.touch(obj)
            return 200, copy.deepcopy(obj)
        self.store.remove(obj)
        details = object_details(kind, meta["name"]) | {"uid": meta["uid"]}
        return 200, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "details": details}

    def _patch(
        self, kind: Kind, obj: dict[str, Any], body: Any, content_type: str = "", sub: str | None = None,
        strict: bool = False,
    ) -> dict[str, Any]:  # fmt: skip
        """Merge patch (and strategic merge patch, which the double applies as one, for built-in kinds only, as
        the API server does: custom resources answer it 415) or, for a list body, a JSON patch (RFC 6902)."""
        if content_type.startswith("application/strategic-merge-patch") and not kind.builtin:
            raise ApiError(
                status(
                    415,
                    "UnsupportedMediaType",
                    "the body of the request was in an unknown format - accepted media types include: "
                    "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml",
                )
            )
        if isinstance(body, list):
            patched = json_patch(kind, obj, body)
        else:
            want = (body or {}).get("metadata", {}).get("resourceVersion")
            if want and want != obj["metadata"]["resourceVersion"]:
                raise conflict(kind, obj["metadata"]["name"])
            patched = merge_patch(obj, body or {})
        return self._write(kind, obj, patched, sub, strict)

    def _write(
        self, kind: Kind, obj: dict[str, Any], patched: dict[str, Any], sub: str | None, strict: bool = False
    ) -> dict[str, Any]:
        """Store `patched` in place of `obj`, as the API server would: what may not change is kept, a status
        subresource splits the object in two, a changed spec is a new generation."""
        patched.setdefault("metadata", {})
        for locked in ("uid", "name", "namespace", "creationTimestamp", "generation"):
            if locked in obj["metadata"]:
                patched["metadata"][locked] = obj["metadata"][locked]
        if kind.status_subresource:
            if sub == "status":  # only the status changes through /status
                patched = copy.deepcopy(obj) | {"status": patched.get("status")}
            else:  # and never through the object itself
                patched["status"] = copy.deepcopy(obj.get("status"))
            if patched["status"] is None:
                del patched["status"]
        patched, missing = admission.admit(kind, kind.version, patched, strict=strict, old=obj)
        validation.decode(kind, patched)
        causes = admission.merged(validation.validate(kind, patched), missing)
        if kind.kind == "Job" and sub is None:
            causes += validation.job_update(obj, patched)
        if causes:
            raise invalid(kind, obj["metadata"]["name"], causes)
        spec_of = lambda o: {k: v for k, v in o.items() if k not in ("metadata", "status")}  # noqa: E731
        if "generation" in obj["metadata"] and spec_of(patched) != spec_of(obj):
            patched["metadata"]["generation"] = obj["metadata"]["generation"] + 1
        obj.clear()
        obj.update(patched)
        self.store.touch(obj)
        return obj

    def _replace(self, kind: Kind, obj: dict[str, Any], body: Any, sub: str | None = None) -> dict[str, Any]:
        body = body or {}
        if body.get("metadata", {}).get("resourceVersion") != obj["metadata"]["resourceVersion"]:
            raise conflict(kind, obj["metadata"]["name"])
        if sub == "status" or kind.status_subresource:
            return self._write(kind, obj, copy.deepcopy(body), sub)
        return self._patch(kind, obj, {k: v for k, v in body.items() if k != "status"} | {"status": obj.get("status")})


def json_patch(kind: Kind, obj: dict[str, Any], operations: list[Any]) -> dict[str, Any]:
    """RFC 6902 (add, remove, replace, test) on a copy of the object; a 422 when an operation cannot apply."""
    doc: Any = copy.deepcopy(obj)
    for op in operations:
        if not isinstance(op, dict) or op.get("op") not in ("add", "remove", "replace", "test"):
            raise bad_request(f"json patch: unsupported operation {op!r}")
        parts = [p.replace("~1", "/").replace("~0", "~") for p in str(op.get("path", "")).split("/")[1:]]
        if not parts:
            raise bad_request("json patch: the whole document cannot be patched")
        parent: Any = doc
        try:
            for part in parts[:-1]:
                parent = parent[int(part)] if isinstance(parent, list) else parent[part]
            last: Any = parts[-1]
            if isinstance(parent, list):
                last = len(parent) if last == "-" else int(last)
            elif op["op"] in ("remove", "replace", "test") and last not in parent:
                raise KeyError(last)
            if op["op"] == "test" and parent[last] != op.get("value"):
                raise ValueError("testing value failed")
            if op["op"] == "remove":
                del parent[last]
            elif op["op"] == "add" and isinstance(parent, list):
                parent.insert(last, copy.deepcopy(op.get("value")))
            elif op["op"] in ("add", "replace"):
                parent[last] = copy.deepcopy(op.get("value"))
        except (KeyError, IndexError, ValueError, TypeError) as exc:
            message = f"the server rejected our request due to an error in our request: {op['op']} {op.get('path')}"
            raise ApiError(
                status(422, "Invalid", f"{message}: {exc}", object_details(kind, obj["metadata"]["name"]))
            ) from exc
    return dict(doc)


def _method_not_allowed() -> ApiError:
    return ApiError(status(405, "MethodNotAllowed", "the server does not allow this method on the requested resource"))


def served(kueue_versions: tuple[str, ...]) -> list[Kind]:
    """The kinds this double serves: the built-in ones, and each Kueue kind at every version its CRD serves that
    the release (crds.RELEASE) still serves."""
    kinds = [k for k in KINDS if k.group != crds.GROUP]
    if not kueue_versions:
        return kinds
    found = crds.load()
    for k in KINDS:
        if k.group == crds.GROUP and k.plural in found:
            kinds += [replace(k, version=v) for v in found[k.plural]["served"] if v in kueue_versions]
    return kinds


def _group_list(kinds: list[Kind]) -> dict[str, Any]:
    names = list(dict.fromkeys(k.group for k in kinds if k.group))
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(kinds, name) for name in names]}


def _group(kinds: list[Kind], name: str) -> dict[str, Any]:
    """An APIGroup: its served versions, the preferred (newest) first, as kube-apiserver orders them."""
    versions = sorted({k.version for k in kinds if k.group == name}, reverse=True)
    if not versions:
        raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": name,
        "versions": [{"groupVersion": f"{name}/{v}", "version": v} for v in versions],
        "preferredVersion": {"groupVersion": f"{name}/{versions[0]}", "version": versions[0]},
    }


def _resource_list(kinds: list[Kind], path: str) -> dict[str, Any]:
    group_version = "v1" if path == "/api/v1" else path.removeprefix("/apis/")
    resources = [
        {
            "name": k.plural,
            "singularName": k.kind.lower(),
            "namespaced": k.namespaced,
            "kind": k.kind,
            "verbs": ["create", "delete", "get", "list", "patch", "update", "watch"],
        }
        for k in kinds
        if k.api_version == group_version
    ]
    if not resources:
        raise ApiError(status(404, "NotFound", "the server could not find the requested resource", {}))
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}


def write_kubeconfig(path: Path, server: str, token: str, namespace: str | None = None) -> Path:
    """A kubeconfig with one context, `double`, that reaches the server with a bearer token."""
    context: dict[str, Any] = {"cluster": "double", "user": "gridlane"}
    if namespace:
        context["namespace"] = namespace
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "double", "cluster": {"server": server}}],
        "users": [{"name": "gridlane", "user": {"token": token}}],
        "contexts": [{"name": "double", "context": context}],
        "current-context": "double",
    }
    path.write_text(json.dumps(config, indent=2))  # JSON is YAML: the client's loader reads it
    return path

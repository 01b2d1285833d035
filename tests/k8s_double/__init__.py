"""A Kubernetes API double: real REST paths and JSON over HTTP on 127.0.0.1, with a simulated control plane.

No API server can be installed here, so Gridlane's Kubernetes fabric is tested through the official
client against this. Its responses follow the shapes of the Kubernetes API reference; fixtures/ holds
example responses in a v1.31 API server's shape, and tests/fabrics/kubernetes/test_double.py holds the
double to them.

Upstream versions it follows, and what it validates (admission.py):
  - Kubernetes v1.31 (kube-apiserver's answers, discovery, defaults): built-in kinds' fields and types come from
    the official Python client the project pins (`kubernetes.client.models`, 37.x, generated from the API's
    OpenAPI document): unknown fields (dropped, or 400 under fieldValidation=Strict), JSON types (400), required
    fields (422); validation.py adds the hand-written checks the API server's validators make (names, labels,
    Job and pod spec rules, resources).
  - Kueue v0.19.2's released CRDs, read at run time from `../shared/kueue-crds/` (crds.py): the versions each
    CRD serves, its structural schema (types, unknown fields, required, enum, bounds, patterns, defaults) and
    the CEL rules listed in crds.RULES. `kueue="v0.19"` (the default) serves v1beta1 and v1beta2, as 0.19
    does; `"v0.20"` serves v1beta2 only (0.20 stops serving v1beta1); `"v1beta1-only"` a cluster that has not
    moved yet; `"none"` a cluster without Kueue.

    with ApiDouble(namespaces=("gridlane",)) as double:
        kubeconfig = double.kubeconfig(tmp_path / "kubeconfig", namespace="gridlane")
        ...
        double.kueue_admit("gridlane", "gl-...")   # what Kueue would do
        double.fail("POST", r"/jobs$", 500)        # the next create answers 500
        double.watch("app=x"); ...; double.peak("app=x")  # the most live pods with that label at once
"""

from __future__ import annotations

import copy
import re
import secrets
import threading
from pathlib import Path
from typing import Any

from tests.k8s_double import crds
from tests.k8s_double.cluster import Cluster
from tests.k8s_double.objects import BY_NAME
from tests.k8s_double.pods import node
from tests.k8s_double.selectors import label_selector
from tests.k8s_double.server import Api, DoubleServer, Fault, Request, Store, write_kubeconfig

__all__ = ["ApiDouble", "node"]


class ApiDouble:
    def __init__(
        self,
        *,
        namespaces: tuple[str, ...] = ("default",),
        nodes: list[dict[str, Any]] | None = None,
        tick_s: float = 0.02,
        start_delay_s: float = 0.05,
        simulate: bool = True,
        kueue: str = "v0.19",
    ) -> None:
        self.store = Store()
        self.token = secrets.token_hex(16)
        self.api = Api(self.store, self.token, crds.RELEASE[kueue])
        self.cluster = Cluster(self.store, self.api, start_delay_s=start_delay_s)
        self.tick_s = tick_s
        self.simulate = simulate
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.server: DoubleServer | None = None
        for namespace in dict.fromkeys(("default", "kube-system", *namespaces)):
            self.store.create(BY_NAME["namespaces"], "", {"metadata": {"name": namespace}})
        for spec in nodes if nodes is not None else [node("gpu-node-1"), node("gpu-node-2")]:
            self.store.create(BY_NAME["nodes"], "", spec)

    def start(self) -> ApiDouble:
        self.server = DoubleServer(self.api)
        serve = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self._threads.append(serve)
        if self.simulate:
            self._threads.append(threading.Thread(target=self.cluster.run, args=(self._stop, self.tick_s), daemon=True))
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    def __enter__(self) -> ApiDouble:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        assert self.server is not None, "start() the double first"
        host, port = self.server.server_address[:2]
        return f"http://{host!s}:{port}"

    def kubeconfig(self, path: Path, namespace: str | None = None) -> Path:
        return write_kubeconfig(path, self.url, self.token, namespace)

    # -- looking inside, as a test ---------------------------------------------------------------

    def objects(self, resource: str, namespace: str | None = None, selector: str = "") -> list[dict[str, Any]]:
        """Copies of the stored objects of a resource ("jobs", "pods", "services", ...)."""
        matches = label_selector(selector)
        with self.store.lock:
            return [
                copy.deepcopy(obj)
                for obj in self.store.items(BY_NAME[resource], namespace)
                if matches(obj["metadata"].get("labels") or {})
            ]

    def get(self, resource: str, namespace: str, name: str) -> dict[str, Any] | None:
        with self.store.lock:
            obj = self.store.get(BY_NAME[resource], namespace, name)
            return copy.deepcopy(obj)

    def watch(self, selector: str) -> None:
        """From now on, track the most live pods matching the label selector at once (`peak`)."""
        self.cluster.watch(selector)

    def peak(self, selector: str) -> int:
        return self.cluster.peak(selector)

    def write_on_claim(self, namespace: str, claim: str, path: str, text: str) -> None:
        """What a process in a pod mounting the claim writes (a notebook's kernel saving a file): kept on the claim's
        volume, seen by every later pod that mounts it, gone with the claim."""
        with self.store.lock:
            if self.store.get(BY_NAME["persistentvolumeclaims"], namespace, claim) is None:
                raise KeyError(claim)
            self.store.volumes.setdefault((namespace, claim), {})[path.lstrip("/")] = text

    def files_of(self, namespace: str, pod: str) -> dict[str, str]:
        """The files a pod's first container sees from what it mounts (Secrets, ConfigMaps, claims): path -> text."""
        with self.store.lock:
            found = self.store.get(BY_NAME["pods"], namespace, pod)
            return self.cluster._files(found, found["spec"]["containers"][0]) if found else {}

    def kueue_admit(self, namespace: str, job_name: str) -> None:
        self.cluster.kueue_admit(namespace, job_name)

    def fail(self, method: str, path: str, code: int, times: int = 1) -> None:
        """Answer the next `times` requests whose path matches the regex with a Status of this code."""
        with self.api._log_lock:
            self.api.faults.append(Fault(method, re.compile(path), code, times))

    def calls(self, method: str | None = None, path: str = "") -> list[Request]:
        """The requests served so far (optionally by method and a regex on the path)."""
        with self.api._log_lock:
            return [
                r
                for r in self.api.requests
                if (method is None or r.method == method) and (not path or re.search(path, r.path))
            ]

    def forget_calls(self) -> None:
        with self.api._log_lock:
            self.api.requests.clear()

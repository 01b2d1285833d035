"""Fixtures for the Kubernetes fabric: the API double on a free port, a kubeconfig for it, an adapter."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fabrics.base import FabricConfig, JobSpec, Resources
from fabrics.kubernetes.fabric import KubernetesFabric
from tests.k8s_double import ApiDouble

NAMESPACE = "gridlane"


@pytest.fixture
def double() -> Iterator[ApiDouble]:
    with ApiDouble(namespaces=(NAMESPACE,)) as api:
        yield api


@pytest.fixture
def kubeconfig(double: ApiDouble, tmp_path: Path) -> Path:
    return double.kubeconfig(tmp_path / "kubeconfig", namespace=NAMESPACE)


@pytest.fixture
def k8s_settings(kubeconfig: Path) -> dict[str, Any]:
    """A fabric's settings pointing at the double (the namespace comes from the kubeconfig's context)."""
    return {"kubeconfig": str(kubeconfig), "gpu_flavor": "h100"}


@pytest.fixture
def fabric(k8s_settings: dict[str, Any]) -> KubernetesFabric:
    return connect(k8s_settings)


def connect(settings: dict[str, Any]) -> KubernetesFabric:
    return KubernetesFabric(FabricConfig("k8s", "kubernetes", Resources(16000, 64000, 512 * 1024), settings))


def spec(command: str = "true", **overrides: Any) -> JobSpec:
    fields: dict[str, Any] = {
        "workload_id": uuid.uuid4(),
        "name": "probe",
        "kind": "training",
        "owner": "alice",
        "group": "vision",
        "queue": "k8s-train",
        "command": command,
        "per_node": Resources(1000, 2000, 4096),
        "runtime_limit_s": 600,
        "image": "busybox:1.36",
    }
    return JobSpec(**(fields | overrides))

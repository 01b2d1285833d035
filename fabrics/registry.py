"""Fabric kinds by dotted path, loaded lazily so the web process starts without SSH or cloud SDKs."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol, cast

from fabrics.base import Fabric, FabricConfig

KINDS: Mapping[str, str] = {
    "local": "fabrics.local.fabric.LocalFabric",
    "slurm": "fabrics.slurm.fabric.SlurmFabric",
    "pbs": "fabrics.pbs.fabric.PbsFabric",
    "kubernetes": "fabrics.kubernetes.fabric.KubernetesFabric",
    "agent": "portal.agents.fabric.AgentFabric",
}


class FabricClass(Protocol):
    def __call__(self, config: FabricConfig) -> Fabric: ...

    def check_template(self, template: str) -> None:
        """Raise TemplateError when the template does not parse."""

    def check_settings(self, settings: Mapping[str, Any]) -> None:
        """Raise ValueError when the kind-specific settings are incomplete or wrong."""


def fabric_class(kind: str) -> FabricClass:
    try:
        dotted = KINDS[kind]
    except KeyError:
        raise ValueError(f"unknown fabric kind {kind!r}") from None
    module_name, _, attr = dotted.rpartition(".")
    return cast(FabricClass, getattr(importlib.import_module(module_name), attr))


def connect(config: FabricConfig) -> Fabric:
    return fabric_class(config.kind)(config)

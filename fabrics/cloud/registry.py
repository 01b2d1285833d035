"""Cloud providers by dotted path, loaded lazily: the web process never imports a cloud SDK."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import cast

from fabrics.cloud.base import Provider, ProviderConfig

PROVIDERS: Mapping[str, str] = {
    "ec2": "fabrics.cloud.ec2.Ec2Provider",
    "openstack": "fabrics.cloud.openstack.OpenStackProvider",
}


def connect(config: ProviderConfig) -> Provider:
    try:
        dotted = PROVIDERS[config.kind]
    except KeyError:
        raise ValueError(f"unknown cloud provider {config.kind!r}") from None
    module_name, _, attr = dotted.rpartition(".")
    make = cast(Callable[[ProviderConfig], Provider], getattr(importlib.import_module(module_name), attr))
    return make(config)

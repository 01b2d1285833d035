"""The small interface every cloud provider implements, and the values that cross it.

A provider launches instances tagged with their pool and a launch id, lists a pool's instances by that tag,
and terminates them. Everything else (what to launch, when to stop it, what it costs) is the autoscaler's.
Nothing here imports Django: the worker turns database rows into these values and back.
"""

from __future__ import annotations

import enum
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Protocol

POOL_TAG = "gridlane:pool"
LAUNCH_TAG = "gridlane:launch-id"


class InstanceState(enum.StrEnum):
    """A provider's native instance states, normalised. Unknown native states map to UNDETERMINED."""

    PENDING = "pending"  # accepted, not running yet
    RUNNING = "running"
    STOPPING = "stopping"  # shutting down or stopped: it will not serve work again
    TERMINATED = "terminated"
    UNDETERMINED = "undetermined"

    @property
    def gone(self) -> bool:
        return self in (InstanceState.STOPPING, InstanceState.TERMINATED)


class ErrorKind(enum.StrEnum):
    CAPACITY = "capacity"  # the provider has none of this type in this zone now: try another type or zone
    THROTTLED = "throttled"  # too many calls: the same call later
    CREDENTIALS = "credentials"  # missing, wrong or not allowed: IT must fix the reference
    INVALID = "invalid"  # the request itself is wrong (unknown type or image): IT must fix the pool
    UNAVAILABLE = "unavailable"  # no answer, or a server error: later


RETRYABLE = frozenset({ErrorKind.CAPACITY, ErrorKind.THROTTLED, ErrorKind.UNAVAILABLE})


class CloudError(Exception):
    """A provider call failed. `kind` says what failed, `retryable` whether trying again later can help."""

    def __init__(self, message: str, *, kind: ErrorKind, code: str = "") -> None:
        super().__init__(message)
        self.kind = kind
        self.code = code

    @property
    def retryable(self) -> bool:
        return self.kind in RETRYABLE


@dataclass(frozen=True)
class Credentials:
    """What a provider signs its calls with. The secret never appears in repr, logs or pages."""

    key_id: str
    secret: str = field(repr=False)
    session_token: str = field(default="", repr=False)


@dataclass(frozen=True)
class LaunchRequest:
    pool: str
    launch_id: str  # the tag that finds the instance again after a crash
    client_token: str  # the provider's idempotency key: the same token never launches a second instance
    instance_type: str
    zone: str
    image: str
    user_data: str
    spot: bool = False
    name: str = ""


@dataclass(frozen=True)
class Instance:
    id: str
    state: InstanceState
    pool: str
    launch_id: str
    instance_type: str = ""
    zone: str = ""
    spot: bool = False
    launched_at: datetime | None = None
    reason: str = ""  # the provider's word on why it stopped, where it gives one


class Provider(Protocol):
    def launch(self, request: LaunchRequest) -> Instance:
        """Launch one instance, or return the one this client token already launched."""

    def describe(self, pool: str) -> list[Instance]:
        """Every instance tagged with this pool, terminated ones included while the provider still lists them."""

    def terminate(self, ids: Sequence[str]) -> None:
        """Ask for these instances to be terminated; ids already gone are not an error."""


@dataclass(frozen=True)
class ProviderConfig:
    kind: str  # "ec2", "openstack"
    pool: str
    region: str
    credentials: Credentials
    endpoint_url: str = ""  # EC2: empty for the region's public endpoint; OpenStack: Keystone's auth URL
    timeout_s: float = 20.0


# A credentials reference: "env:PREFIX" (the provider's names below, after PREFIX_, in the worker's environment)
# or "file:NAME" (a file NAME in GRIDLANE_CREDENTIALS_DIR with the same names in lower case, one "name = value" a
# line). The database holds only the reference.
_REFERENCE = re.compile(r"^(env):([A-Z][A-Z0-9_]{0,63})$|^(file):([A-Za-z0-9][A-Za-z0-9_.-]{0,99})$")

# Per provider: the key id's name, the secret's, and an optional session token's. OpenStack's are an application
# credential's, as an openrc file names them (OS_APPLICATION_CREDENTIAL_ID ...: give "env:OS").
NAMES: Mapping[str, tuple[str, str, str]] = {
    "ec2": ("ACCESS_KEY_ID", "SECRET_ACCESS_KEY", "SESSION_TOKEN"),
    "openstack": ("APPLICATION_CREDENTIAL_ID", "APPLICATION_CREDENTIAL_SECRET", ""),
}


def check_reference(reference: str) -> None:
    """Raise ValueError unless the reference has one of the two shapes; it never looks at the secret."""
    if not _REFERENCE.match(reference):
        raise ValueError(
            'Give "env:PREFIX" (PREFIX_ACCESS_KEY_ID and PREFIX_SECRET_ACCESS_KEY for EC2, '
            "PREFIX_APPLICATION_CREDENTIAL_ID and PREFIX_APPLICATION_CREDENTIAL_SECRET for OpenStack, in the worker's "
            'environment) or "file:NAME" (a file in GRIDLANE_CREDENTIALS_DIR); never the key itself.'
        )


def resolve(reference: str, environ: Mapping[str, str] | None = None, kind: str = "ec2") -> Credentials:
    """The credentials a reference names for a provider kind; CloudError(CREDENTIALS) saying what is missing
    (never the values)."""
    env = os.environ if environ is None else environ
    key_name, secret_name, session_name = NAMES.get(kind, NAMES["ec2"])
    match = _REFERENCE.match(reference)
    if match is None:
        raise CloudError(f"credentials reference {reference!r} has no known shape", kind=ErrorKind.CREDENTIALS)
    if match.group(1):
        prefix = match.group(2)
        key_id, secret = env.get(f"{prefix}_{key_name}", ""), env.get(f"{prefix}_{secret_name}", "")
        if not key_id or not secret:
            raise CloudError(
                f"{prefix}_{key_name} and {prefix}_{secret_name} are not both set in the worker's environment",
                kind=ErrorKind.CREDENTIALS,
            )
        return Credentials(key_id, secret, env.get(f"{prefix}_{session_name}", "") if session_name else "")
    name = match.group(4)
    folder = env.get("GRIDLANE_CREDENTIALS_DIR", "")
    if not folder:
        raise CloudError("GRIDLANE_CREDENTIALS_DIR is not set in the worker's environment", kind=ErrorKind.CREDENTIALS)
    try:
        text = (Path(folder) / name).read_text()
    except OSError:
        raise CloudError(f"credentials file {name} cannot be read", kind=ErrorKind.CREDENTIALS) from None
    values: dict[str, str] = {}
    for line in text.splitlines():  # access_key_id = AKIA...
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip().lower()] = value.strip()
    key_id, secret = values.get(key_name.lower(), ""), values.get(secret_name.lower(), "")
    if not key_id or not secret:
        raise CloudError(
            f"credentials file {name} needs {key_name.lower()} and {secret_name.lower()} lines",
            kind=ErrorKind.CREDENTIALS,
        )
    return Credentials(key_id, secret, values.get(session_name.lower(), "") if session_name else "")

"""A submission as typed values (the same from the web form, the API and the CLI), and the bounds every
submission is held to."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, fields
from decimal import Decimal
from typing import Any

from portal.queues.models import DEFAULT_TIER, WorkloadKind

MAX_COMMAND_BYTES = 64 * 1024
MAX_GPUS_PER_NODE = 64
MAX_CPUS_PER_NODE = 1024
MAX_MEMORY_GB_PER_NODE = 16 * 1024
MAX_NODES = 1024
MAX_LEASE_HOURS = 24 * 30
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._ -]{0,99}")
IMAGE_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/:@+-]{0,299}")
KINDS = tuple(WorkloadKind.values)  # (the enum builds the list anew on every read)
LEASED_KINDS = (WorkloadKind.NOTEBOOK, WorkloadKind.VM)  # the kinds that hold a lease and run no batch work


@dataclass(frozen=True)
class SubmitRequest:
    """A submission as typed values, the same from the web form, the API and the CLI."""

    queue: str
    kind: str
    name: str
    command: str = ""
    script: str = ""
    image: str = ""
    gpus: Decimal = Decimal(0)
    cpus: Decimal = Decimal(1)
    memory_gb: Decimal = Decimal(4)
    nodes: int = 1
    runtime_limit_minutes: int | None = None
    priority: str = DEFAULT_TIER
    lease_hours: Decimal | None = None
    group: str | None = None
    resources_given: tuple[str, ...] = ()  # the resources the caller named (beside a script they must agree)
    array: str = ""  # e.g. "0-99%10": one parent, one workload per index, at most 10 running at once
    manifest: str = ""  # a Kubernetes batch/v1 Job as the user wrote it (YAML or JSON)
    code: Any = None  # {"digest": sha256} of the team's bundle, or {"git": url, "commit": sha} (portal.code)
    requirements: str = ""  # a requirements file's text: a virtual environment built on the node
    gpu_type: str = ""  # a GPU type some target of the queue has (portal/workloads/gpu_types.py); "": any

    def fingerprint(self) -> str:
        """The digest a repeat with the same idempotency key is compared by: the fields as asdict() gives them
        (every one is flat), Decimals as their str(), an open GPU type left out."""
        values = {f.name: (str(v) if isinstance(v := getattr(self, f.name), Decimal) else v) for f in fields(self)}
        if not self.gpu_type:
            del values["gpu_type"]  # a field added later counts only when set: a key recorded before still matches
        return hashlib.sha256(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()


def milli(value: Decimal) -> int | None:
    """Value x 1000 as an integer, or None when it has finer than milli precision."""
    scaled = value * 1000
    return int(scaled) if scaled == scaled.to_integral_value() else None


def text_errors(value: str, field: str, max_bytes: int) -> list[str]:
    """What is wrong with a text a workload runs (a NUL, too long, not UTF-8); [] when nothing."""
    if "\x00" in value:
        return [f"The {field} contains a NUL character."]
    if len(value.encode("utf-8", errors="surrogatepass")) > max_bytes:
        return [f"The {field} is longer than {max_bytes // 1024} KiB."]
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return [f"The {field} is not valid UTF-8."]
    return []

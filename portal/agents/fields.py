"""The fields each agent endpoint's body may give (an allowlist, one set per endpoint): a body naming any other is
a 400 naming it, as every write endpoint of the API answers (`portal.known_fields`), so that an agent's typo
(`"gpu": 4` on register, `"exitcode"` on status) is refused instead of running with the defaults.

Lists of objects are checked item by item: an unknown field of a run in `ends` or of a sample is named under
its list and index (the answer names it `runs.0.exitcode`)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from rest_framework.exceptions import ValidationError

from portal.known_fields import unknown_errors

ENROLL = frozenset({"token", "host"})
REGISTER = frozenset({"host", "queues", "gpus", "gpu_model", "gpu_memory_mib", "cpus", "memory_mib"})
HEARTBEAT = frozenset({"host"})
CLAIM = frozenset({"host", "queues", "wait", "max"})
STATUS = frozenset({"host", "state", "exit_code", "reason"})
ENDS = frozenset({"host", "runs"})
END = frozenset({"run_id", "state", "exit_code", "reason", "samples"})
LOG = frozenset({"host", "chunk"})
USAGE = frozenset({"host", "samples"})
SAMPLE = frozenset({"at", "gpu_utilisation", "gpu_memory_mib", "cpu_utilisation", "memory_mib"})
# A native PBS job's reading (portal.agents.native) also gives its GPUs one by one; the agent's own jobs' readings
# do not (yet), so their endpoints keep refusing `gpus` rather than dropping it unread.
PBS_SAMPLE = SAMPLE | {"gpus"}
GPU = frozenset({"index", "utilisation", "memory_mib"})  # one GPU of a PBS_SAMPLE's `gpus`
LEASE_KEY = frozenset({"public_key", "from"})


def item_errors(items: Any, known: Collection[str]) -> dict[str, dict[str, list[str]]]:
    """{index: {name: [message]}} for each object of the list `items` that names a field not in `known`."""
    if not isinstance(items, list):
        return {}
    found = {str(i): unknown_errors(item, known) for i, item in enumerate(items) if isinstance(item, Mapping)}
    return {index: errors for index, errors in found.items() if errors}


def refuse(data: Any, known: Collection[str], lists: Mapping[str, Collection[str]] | None = None) -> None:
    """Raise the 400 naming each unknown field of the body `data`, and of each object in its lists named in
    `lists` (list name -> the fields its items may give)."""
    errors: dict[str, Any] = dict(unknown_errors(data, known))
    if isinstance(data, Mapping):
        for name, item_known in (lists or {}).items():
            found = item_errors(data.get(name), item_known)
            if found:
                errors[name] = found
    if errors:
        raise ValidationError(errors)

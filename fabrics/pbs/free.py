"""What a PBS cluster has free now, from `pbsnodes -a` (PBS Pro / OpenPBS, and Torque's text shape).

Rules:
- A node counts only where every one of its states is allowlisted (free, job-busy, job-exclusive, job-sharing,
  busy): offline, down, unknown, state-unknown and resv-exclusive (reserved) nodes are left out.
- GPUs, CPUs, memory: `resources_available.*` minus `resources_assigned.*` (PBS Pro), else Torque's `gpus`,
  `np` and `availmem`, all of them free on a `free` node and none on a busy one (Torque's text does not say
  how much of a busy node is in use).
- The GPU type is `resources_available.gpu_model` (or `gpu_type`) where the site defines one, else the type in
  the node's `gres=gpu:TYPE:N` status (Slurm's Torque wrapper), else untyped.
- Pools are the node's `queue` (PBS Pro `queue` attribute) or "" for the whole server.
Pure.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator

from fabrics.base import Resources
from fabrics.live import UNTYPED, FreeNow, Node, from_nodes

SEPARATOR = "\x1d"
USABLE = frozenset({"free", "job-busy", "job-exclusive", "job-sharing", "busy"})
_BUSY = frozenset({"job-busy", "job-exclusive", "busy"})
_MEMORY = re.compile(r"^(\d+)\s*([kmgt]?)b?$", re.IGNORECASE)
_SCALE = {"": 1 / (1 << 20), "k": 1 / 1024, "m": 1, "g": 1024, "t": 1 << 20}


def blocks(text: str) -> Iterator[tuple[str, dict[str, str]]]:
    """Each node's name and `key = value` attributes."""
    name, attrs = "", dict[str, str]()
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line[0].isspace():
            if name:
                yield name, attrs
            name, attrs = line.strip(), {}
        elif "=" in line:
            key, _, value = line.partition("=")
            attrs[key.strip()] = value.strip()
    if name:
        yield name, attrs


def node(name: str, attrs: dict[str, str]) -> Node | None:
    """The node as fabrics.live sees it; None where it is not usable."""
    states = {s.strip() for s in attrs.get("state", "").split(",") if s.strip()}
    if not states or not states <= USABLE:
        return None
    busy = bool(states & _BUSY)
    status = attrs.get("status", "")
    gpu_type = attrs.get("resources_available.gpu_model") or attrs.get("resources_available.gpu_type") or UNTYPED
    typed: dict[str, int]
    if "resources_available.ngpus" in attrs:
        gpus = _int(attrs["resources_available.ngpus"])
        typed = {gpu_type: gpus} if gpus else {}
        free = {gpu_type: max(0, gpus - _int(attrs.get("resources_assigned.ngpus", "0")))} if gpus else {}
    else:
        gpus = _int(attrs.get("gpus", "0"))
        typed = _gres(status) or ({gpu_type: gpus} if gpus else {})
        free = {t: 0 if busy else n for t, n in typed.items()}
    cpus = _int(attrs.get("resources_available.ncpus") or attrs.get("np") or "0")
    assigned = attrs.get("resources_assigned.ncpus")
    idle_cpus = cpus - _int(assigned) if assigned is not None else (0 if busy else cpus)
    memory = _mib(attrs.get("resources_available.mem") or _status_value(status, "availmem"))
    assigned_memory = attrs.get("resources_assigned.mem")
    idle_memory = memory - _mib(assigned_memory) if assigned_memory is not None else (0 if busy else memory)
    amount = Resources(1000 * sum(free.values()), 1000 * max(0, idle_cpus), max(0, idle_memory))
    return Node(name, (attrs.get("queue", ""),), typed, free, amount)


def command(qstat: str, pbsnodes: str) -> list[str]:
    """One command for the server's health (`qstat -Q`, its exit status) and its nodes (`pbsnodes -a`, after a
    group separator where qstat answered). Both reads: safe to run twice."""
    script = f"{shlex.join([qstat, '-Q'])} || exit $?; printf '\\035'; {shlex.join([pbsnodes, '-a'])} || true"
    return ["sh", "-c", script]


def split(stdout: str) -> tuple[str, str]:
    qstat, _, nodes = stdout.partition(SEPARATOR)
    return qstat, nodes


def read(text: str) -> FreeNow:
    """The observation from `pbsnodes -a` output."""
    usable = (node(name, attrs) for name, attrs in blocks(text))
    return from_nodes(n for n in usable if n is not None)


def _status_value(status: str, key: str) -> str:
    match = re.search(rf"(?:^|,){key}=([^,]*)", status)
    return match.group(1) if match else "0"


def _gres(status: str) -> dict[str, int]:
    """GPUs by type from Torque's status `gres=gpu:a100:4,gpu:h100:4` (Slurm's wrapper prints that)."""
    counts: dict[str, int] = {}
    for gpu_type, count in re.findall(r"(?:^|[,=])gpu:([A-Za-z0-9_.-]+):(\d+)", status):
        counts[gpu_type] = counts.get(gpu_type, 0) + int(count)
    return counts


def _int(text: str) -> int:
    digits = re.match(r"\d+", text.strip())
    return int(digits.group()) if digits else 0


def _mib(text: str) -> int:
    match = _MEMORY.match(text.strip())
    return int(int(match.group(1)) * _SCALE[match.group(2).lower()]) if match else 0

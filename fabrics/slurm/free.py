"""What a Slurm cluster has free now: `sinfo` per node and partition, and `squeue --start` for its own estimate.

One observation is one SSH command: `sinfo` and `squeue` run back to back on the login node, their outputs
apart by a group separator (\\x1d, which neither prints). Pure apart from `command()`'s argv.

Rules:
- Only nodes in an allowlisted state count (idle, mixed, allocated, completing, optionally planned `-`):
  drained, down, reserved, powered-down, failing and not-responding nodes (any other state, or a flag such as
  `*~#!%$@^`) are left out, whatever they hold.
- A node's free GPUs of a type are its GRES of that type minus its GRES_USED of that type, whoever uses them;
  its free CPUs the idle of `CPUsState`, its free memory `Memory - AllocMem`.
- Only the partitions Gridlane submits to count, where the fabric names them; else every partition.
- The fabric's own estimate is the latest start Slurm plans for work already pending in those partitions: new
  work of the same priority starts no sooner (None where nothing pends with an estimate).
"""

from __future__ import annotations

import shlex
from collections.abc import Collection, Sequence
from datetime import datetime

from fabrics.base import Resources
from fabrics.live import FreeNow, Node, from_nodes
from fabrics.slurm import parse

SEPARATOR = "\x1d"
USABLE = frozenset({"idle", "mixed", "allocated", "completing"})
_PLANNED = "-+"  # planned for pending work (backfill), or a state with more to say: the node still runs work
SQUEUE_START_FIELDS = ("Partition", "StartTime")


def command(env: Sequence[str], sinfo: str, squeue: str) -> list[str]:
    """The one command that observes the cluster (both reads, so it is safe to run twice)."""
    reads = [
        shlex.join([*env, sinfo, "-h", "-N", "-O", parse.sinfo_format()]) + " || exit $?",  # sinfo's status is ours
        "printf '\\035'",
        shlex.join([*env, squeue, "-h", "-t", "PD", "--start", "-O", parse._format(SQUEUE_START_FIELDS)]) + " || true",
    ]
    return ["sh", "-c", "; ".join(reads)]


def split(stdout: str) -> tuple[str, str]:
    """The sinfo and squeue parts of the command's output (squeue's empty where it did not run)."""
    sinfo, _, squeue = stdout.partition(SEPARATOR)
    return sinfo, squeue


def usable(state: str) -> bool:
    """An allowlisted state with no flag (`*~#!%$@^`: not responding, powered down, rebooting...)."""
    return state.strip().lower().rstrip(_PLANNED) in USABLE


def nodes(sinfo_text: str, partitions: Collection[str] = ()) -> list[Node]:
    """Usable nodes from `sinfo -h -N -O <parse.sinfo_format()>`, each once with the partitions it is in."""
    seen: dict[str, Node] = {}
    names: dict[str, list[str]] = {}
    for row in parse.records(sinfo_text, len(parse.SINFO_FIELDS)):
        host, partition, state, _cpus, cpu_state, memory, alloc_mem, gres, gres_used = (v.strip() for v in row)
        partition = partition.rstrip("*")
        if (partitions and partition not in partitions) or not usable(state):
            continue
        names.setdefault(host, []).append(partition)
        if host in seen:
            continue
        gpus, used = parse._gres_counts(gres), parse._gres_counts(gres_used)
        idle = {t: max(0, n - used.get(t, 0)) for t, n in gpus.items()}
        parts = cpu_state.split("/")
        idle_cpus = parse._int(parts[1]) if len(parts) == 4 else 0  # alloc/idle/other/total
        free = Resources(
            1000 * sum(idle.values()), 1000 * idle_cpus, max(0, parse._int(memory) - parse._int(alloc_mem))
        )
        seen[host] = Node(host, (), gpus, idle, free)
    return [Node(n.name, tuple(dict.fromkeys(names[n.name])), n.gpus, n.gpus_free, n.free) for n in seen.values()]


def next_start(squeue_text: str, partitions: Collection[str] = ()) -> datetime | None:
    """The latest start Slurm plans for pending work in these partitions (None: no estimate)."""
    latest = None
    for row in parse.records(squeue_text, len(SQUEUE_START_FIELDS)):
        partition, start = (v.strip() for v in row)
        if partitions and not set(partition.split(",")) & set(partitions):
            continue
        when = parse.parse_time(start)
        if when is not None and (latest is None or when > latest):
            latest = when
    return latest


def read(stdout: str, partitions: Collection[str] = ()) -> FreeNow:
    """The observation from the command's output."""
    sinfo_text, squeue_text = split(stdout)
    return from_nodes(nodes(sinfo_text, partitions), next_start(squeue_text, partitions))

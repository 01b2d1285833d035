"""Whether any fabric behind a queue could ever hold a checked workload for its team, and may run it as its
owner: refused at submit time rather than left pending forever. Plain functions over what the submit loaded
(the queue's fabrics, the team's caps on each, each fabric's POSIX policy)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fabrics.registry import fabric_class
from portal import words
from portal.accounts import posix
from portal.queues.models import Fabric, Queue
from portal.workloads import limits
from portal.workloads.models import Workload
from portal.workloads.services.errors import SubmitRejected

# By team and shape of request: never_runs's field errors ({} when some fabric could run it).
FitsByShape = dict[tuple[Any, ...], dict[str, list[str]]]


def check_fits_somewhere(
    workload: Workload, queue: Queue, cap_of: Callable[[Fabric], limits.Cap], known: FitsByShape | None = None
) -> None:
    """Raise SubmitRejected for what no enabled fabric behind the queue could ever hold, or may not run as its
    owner. `known`: never_runs's answers for this queue, its fabrics and the teams' caps as they are now (a
    kept context's), by team and shape of request."""
    fabrics = [t.fabric for t in queue.targets.all() if t.fabric.enabled]
    if workload.native_kind:  # a script runs only where its kind of scheduler reads it
        fabrics = [f for f in fabrics if f.kind == workload.native_kind]
    if not fabrics:
        raise SubmitRejected({"queue": [f"The queue {queue.name} has no fabric behind it yet; ask IT."]})
    shape = (workload.group_id, workload.native_kind, workload.nodes, workload.gpus_milli, workload.cpus_milli,
             workload.memory_mib)  # fmt: skip
    errors = None if known is None else known.get(shape)
    if errors is None:
        errors = never_runs(workload, queue.name, fabrics, cap_of)
        if known is not None:
            known[shape] = errors
    if errors:
        raise SubmitRejected({name: list(messages) for name, messages in errors.items()})  # its own to change
    check_run_as(workload, queue, fabrics)


def never_runs(
    workload: Workload, queue_name: str, fabrics: list[Fabric], cap_of: Callable[[Fabric], limits.Cap]
) -> dict[str, list[str]]:
    """Why no fabric behind a queue could ever start this workload for its team, as field errors; {} when one
    could.

    Each fabric is tried in steps (big enough, enough nodes, the fabric's own rule, the team's cap); the reason
    given is the one of the fabric that got furthest, the most useful to the person asking."""
    need = workload.total
    furthest: tuple[int, dict[str, list[str]]] = (-1, {})

    def refuse(step: int, name: str, message: str) -> None:
        nonlocal furthest
        if step > furthest[0]:
            furthest = (step, {name: [message]})

    for fabric in fabrics:
        if not need.fits_in(fabric.capacity):
            refuse(0, "resources", _too_big(queue_name, fabrics))
            continue
        most_nodes = getattr(fabric_class(fabric.kind), "MAX_NODES", None)  # e.g. local: this one host
        if most_nodes is not None and workload.nodes > most_nodes:
            refuse(1, "resources.nodes", f"The queue {queue_name} runs on {fabric.name}, which has "
                   f"{words.count(most_nodes, 'node')}: ask for at most {most_nodes}.")  # fmt: skip
            continue
        check = getattr(fabric_class(fabric.kind), "check_request", None)  # e.g. Kubernetes: whole GPUs only
        try:
            if check is not None:
                check(fabric.resolved_settings(), workload.per_node)
        except ValueError as error:
            refuse(2, "resources.gpus", str(error))
            continue
        over = limits.over_cap(need.gpus_milli, need.cpus_milli, need.memory_mib, cap_of(fabric))
        if over:
            where = f"on {fabric.name}" if len(fabrics) == 1 else f"on any fabric behind {queue_name}"
            refuse(3, "resources", f"Your team {workload.group.name} may hold at most that much {where}: "
                   f"this asks for {over}. Ask for less, or ask IT or your team lead to raise the limit.")  # fmt: skip
            continue
        return {}
    return furthest[1]


def _too_big(queue_name: str, fabrics: list[Fabric]) -> str:
    biggest = max(fabrics, key=lambda f: (f.gpus_milli, f.cpus_milli, f.memory_mib))
    return (
        f"No fabric behind {queue_name} is that big: the largest has {words.gpus(biggest.gpus_milli / 1000)}, "
        f"{words.cpus(biggest.cpus_milli / 1000)} and {words.number(biggest.memory_mib / 1024, 1)} GB in all."
    )


def check_run_as(workload: Workload, queue: Queue, fabrics: list[Any]) -> None:
    """Refuse, before anything is queued, a person with no POSIX account on a fabric behind the queue that
    runs jobs as their owners. The policies came with the queue; the person's names are a cached lookup."""
    refused = posix.refusals(workload.owner_id, fabrics)
    if refused:
        raise SubmitRejected(
            {"queue": [f"Jobs on {queue.name} run under your own account on the cluster, but {refused[0]}."]}
        )

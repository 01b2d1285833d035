"""Pull back and re-route: work that has waited in a fabric's own queue longer than GRIDLANE_PULLBACK_PATIENCE_SECONDS,
while another target of its queue has room for it now, is taken back from the first fabric and goes back in line,
where the scheduler routes it by soonest start (scheduler/soonest.py), so to the target with room.

A move, in this order, each step safe to repeat:
1. intent: a Move row (and an event on the workload) is written before the fabric is touched;
2. take back: the fabric cancels the job only while it still waits (Slurm: `scancel --state=PENDING`);
3. confirm: the fabric's status says the job was cancelled without ever having a node (it never started);
   a job that started meanwhile stays where it is and the move is dropped (an event says so);
4. back in line: dispatching -> preempted -> pending with a new attempt (a new run id, so the cancelled job is never
   taken for the new one); then the Move row goes.

Invariants: the worker finishes every recorded move before it reads any fabric's status (step() runs before sync,
under the sync lock), so a crash at any step leaves one job, never two and never none: before 2 the job still
waits and is taken back on the next run; after 2 and before 4 the workload is still dispatching, and the move is
finished (never read as "cancelled outside Gridlane"); after the first transition of 4 the sync's preemption path
requeues it. Only whole jobs move: an array's elements (one Slurm array) are not moved; a gang is one job.
Fabrics without `take_back` are never moved from.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.conf import settings

from fabrics.base import FabricError, JobState, Resources
from portal.queues.models import Fabric as FabricRow
from portal.queues.models import QueueTarget
from portal.worker import live
from portal.worker.capacity import live_since
from portal.worker.connections import fabric_for
from portal.worker.models import Move
from portal.workloads import services
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State

log = logging.getLogger("gridlane.worker")

# At most this many moves are started per run: each is a few round trips to the fabric.
MOVES_PER_RUN = 20


def patience() -> timedelta:
    return timedelta(seconds=getattr(settings, "GRIDLANE_PULLBACK_PATIENCE_SECONDS", 300))


def step(now: datetime) -> int:
    """Finish every recorded move, then start the moves due now; returns how many workloads went back in line."""
    done = sum(finish(move) for move in Move.objects.order_by("at"))
    for workload, to in candidates(now)[:MOVES_PER_RUN]:
        done += start(workload, to, now)
    return done


def candidates(now: datetime) -> list[tuple[Workload, int]]:
    """Work waiting in a fabric's queue past its patience, with the first other target of its queue that has room
    for it now (by that target's fresh observation)."""
    waiting = list(
        Workload.objects.filter(
            state=State.DISPATCHING,
            admitted_at__lte=now - patience(),
            array_parent__isnull=True,
            fabric__isnull=False,
        )
        .exclude(external_id="")
        .select_related("fabric")
    )
    if not waiting:
        return []
    rooms = {fid: answer for fid, (_, answer) in live.fresh(now, live_since(now)).items()}
    healthy = set(FabricRow.objects.filter(enabled=True, healthy=True).values_list("pk", flat=True))
    targets: dict[int, list[int]] = {}
    for queue_id, fabric_id in QueueTarget.objects.order_by("queue_id", "order", "pk").values_list("queue", "fabric"):
        targets.setdefault(queue_id, []).append(fabric_id)
    out = []
    for w in waiting:
        if w.fabric is None or not hasattr(fabric_for(w.fabric), "take_back"):
            continue
        per_node = Resources(w.gpus_milli, w.cpus_milli, w.memory_mib)
        gpu_type = getattr(w, "gpu_type", "")
        for fid in targets.get(w.queue_id, []):
            room = rooms.get(fid)
            if (
                fid != w.fabric_id
                and fid in healthy
                and room is not None
                and room.room_for(per_node, w.nodes, gpu_type)
            ):
                out.append((w, fid))
                break
    return out


def start(w: Workload, to: int, now: datetime) -> int:
    """Record the intent, then take the job back (see the module docstring)."""
    to_name = FabricRow.objects.filter(pk=to).values_list("name", flat=True).first() or str(to)
    from_name = w.fabric.name if w.fabric else str(w.fabric_id)
    minutes = int((now - (w.admitted_at or now)).total_seconds() // 60)
    _, created = Move.objects.get_or_create(
        workload=w,
        defaults={"from_fabric_id": w.fabric_id, "external_id": w.external_id, "to_fabric_id": to, "at": now},
    )
    if not created:
        return 0
    _event(w, f"moving: waited {minutes} min in {from_name}'s queue while {to_name} can start it now")
    return finish(Move.objects.get(pk=w.pk))


def finish(move: Move) -> int:
    """Take the job back and confirm, or drop the move; 1 when the workload went back in line."""
    w = Workload.objects.select_related("fabric").filter(pk=move.workload_id).first()
    if w is None or w.fabric is None or w.state != State.DISPATCHING or w.external_id != move.external_id:
        move.delete()  # finished before (a crash after its first transition), or the workload ended
        return 0
    row = w.fabric
    fabric = fabric_for(row)
    try:
        fabric.take_back(move.external_id)  # type: ignore[attr-defined]
        status = fabric.poll([move.external_id])[move.external_id]
    except FabricError as error:
        log.warning("moving %s from %s: %s (will try again)", w.pk, row.name, error)
        return 0
    if status.state == JobState.QUEUED:
        return 0  # not taken back yet: the next run asks again
    if status.state != JobState.CANCELLED or status.host:
        move.delete()
        _event(w, f"move dropped: the job started on {row.name} first and stays there")
        return 0
    reason = f"taken back from {row.name}'s queue to start elsewhere sooner"
    if not services.transition(w, State.PREEMPTED, reason=reason):
        return 0
    services.transition(
        w, State.PENDING, reason="back in line to start where there is room now", attempt=w.attempt + 1,
        fabric_id=None, target_id=None, external_id="", rendered="", host="", connect_url="",
        notebook_endpoint=None, admitted_at=None, started_at=None, exit_code=None, idle_stop_at=None,
        gpu_idle_warned_at=None, last_sample_at=None, last_estimated_start=None, estimate_error_s=None,
    )  # fmt: skip
    move.delete()
    return 1


def _event(w: Workload, reason: str) -> None:
    WorkloadEvent.objects.create(workload=w, from_state=w.state, to_state=w.state, reason=reason[:500])

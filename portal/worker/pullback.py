"""Pull back and re-route: work that has waited in a fabric's own queue longer than its queue's patience (IT's
setting, `pullback_patience_seconds`; empty: the site's GRIDLANE_PULLBACK_PATIENCE_SECONDS, 300 s), while another
target of its queue has room for it now, is taken back from the first fabric and goes back in line,
where the scheduler routes it by soonest start (scheduler/soonest.py), so to the target with room. Room now is a
target's fresh observation of what it has free (fabrics/live.py); a target that keeps no queue of its own (the
local fabric, agents, burst pools: Gridlane is its only user) and has no observation has the room a cycle plans it
with, its declaration less Gridlane's own use there. A target that keeps a queue of its own and said nothing lately
is never moved to.

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
requeues it. Arrays and gangs move whole: the intent of every waiting element of an array is recorded in one
transaction before any is taken back (an element that started meanwhile stays, like any job); a gang is one job.
Fabrics without `take_back` are never moved from.
"""

from __future__ import annotations

import logging
import os
import time
from dataclasses import replace
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Min

from fabrics.base import FabricError, JobState, Resources
from portal.queues.models import Fabric as FabricRow
from portal.queues.models import Queue, QueueTarget
from portal.worker import live, snapshot
from portal.worker.capacity import live_since, queues_work
from portal.worker.connections import fabric_for
from portal.worker.models import Move
from portal.workloads import services
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State
from scheduler.ledger import fits, need_on, sub
from scheduler.model import Job

log = logging.getLogger("gridlane.worker")

# At most this many moves are started per run: each is a few round trips to the fabric.
MOVES_PER_RUN = 20


def patience(queue: Queue | None = None) -> timedelta:
    """How long work of `queue` may wait in a fabric's own queue before it is moved: the queue's setting, else
    the site's default."""
    own = None if queue is None else queue.pullback_patience_seconds
    if own is not None:
        return timedelta(seconds=own)
    return timedelta(seconds=getattr(settings, "GRIDLANE_PULLBACK_PATIENCE_SECONDS", 300))


def _shortest_patience() -> timedelta:
    """The least patience of any queue (or the site's default): no workload waited past its own before that."""
    least = Queue.objects.aggregate(least=Min("pullback_patience_seconds"))["least"]
    site = patience()
    return site if least is None else min(site, timedelta(seconds=least))


def step(now: datetime) -> int:
    """Finish every recorded move, then start the moves due now; returns how many workloads went back in line."""
    done = sum(finish(move) for move in Move.objects.order_by("at"))
    for group, to in candidates(now)[:MOVES_PER_RUN]:
        done += start(group, to, now)
    return done


def candidates(now: datetime) -> list[tuple[list[Workload], int]]:
    """Work waiting in a fabric's queue past its queue's patience, each with the first other target of its queue
    that has room for it now (Rooms: by a fresh observation, or for a fabric that keeps no queue of its own by
    its planned room, less what earlier moves of this run take there). An array moves whole: its elements waiting
    in one fabric's queue form one group, moved together where there is room for all of them, else none; a gang
    (one job over several nodes) moves where all its nodes fit. None while live routing is off (live.routing):
    work waits where its declaration sent it."""
    if not live.routing():
        return []
    in_queues = (
        Workload.objects.filter(state=State.DISPATCHING, admitted_at__isnull=False, fabric__isnull=False, array_size=0)
        .exclude(external_id="")
        .select_related("fabric", "queue")
        .order_by("admitted_at", "pk")
    )
    waiting = list(in_queues.filter(admitted_at__lte=now - _shortest_patience()))
    arrays = {w.array_parent_id for w in waiting if w.array_parent_id is not None}
    if arrays:  # their elements sent later wait too, and move with them
        waiting += in_queues.filter(array_parent_id__in=arrays).exclude(pk__in=[w.pk for w in waiting])
    groups: dict[tuple[object, int | None], list[Workload]] = {}
    for w in waiting:  # an array's elements in one fabric's queue together; any other workload alone
        groups.setdefault((w.array_parent_id or w.pk, w.fabric_id), []).append(w)
    due = [
        g
        for g in groups.values()
        if min(w.admitted_at or now for w in g) <= now - patience(g[0].queue)
        and g[0].fabric is not None
        and _takes_back(fabric_for(g[0].fabric), g)
    ]
    if not due:
        return []
    targets: dict[int, list[int]] = {}
    for queue_id, fabric_id in QueueTarget.objects.order_by("queue_id", "order", "pk").values_list("queue", "fabric"):
        targets.setdefault(queue_id, []).append(fabric_id)
    room = Rooms(now, {fid for g in due for fid in targets.get(g[0].queue_id, ())})
    out = []
    for group in due:
        first = group[0]
        for fid in targets.get(first.queue_id, []):
            if fid != first.fabric_id and room.take(fid, group):
                out.append((group, fid))
                break
    return out


class Rooms:
    """Where moved work could start now, used up by the moves of one run. A target that keeps a queue of its own
    (Slurm, PBS, Kubernetes) counts only by its fresh observation (fabrics/live.py): without one, nothing moves
    there. A target that keeps none (the local fabric, agents, burst pools: Gridlane is its only user), where it
    has no fresh observation, counts by what a cycle plans it with: its declaration (lowered to a fresh answer)
    less what Gridlane's own work holds there (snapshot.declared_free, the Ledger's `free`), and takes a named GPU
    type at its word, as routing does (scheduler/soonest.py). Only enabled, healthy fabrics."""

    def __init__(self, now: datetime, fabric_ids: set[int]) -> None:
        self.live = {fid: answer for fid, (_, answer) in live.fresh(now, live_since(now)).items() if fid in fabric_ids}
        rows = FabricRow.objects.filter(pk__in=fabric_ids, enabled=True, healthy=True)
        self.healthy = {row.pk for row in rows}
        own = [row for row in rows if row.pk not in self.live and not queues_work(row.kind)]
        self.fabrics, self.declared = snapshot.declared_free(own, now)

    def take(self, fid: int, group: list[Workload]) -> bool:
        """Whether the group (an array's waiting elements, or one workload, a gang's nodes all together) fits on
        the fabric now; if so its room there is taken."""
        if fid not in self.healthy:
            return False
        first = group[0]
        per_node = Resources(first.gpus_milli, first.cpus_milli, first.memory_mib)
        nodes = sum(w.nodes for w in group)  # every element's nodes, or the gang's
        observed = self.live.get(fid)
        if observed is not None:
            if not observed.room_for(per_node, nodes, getattr(first, "gpu_type", "")):
                return False
            self.live[fid] = replace(observed, free=observed.free - per_node.times(nodes))
            return True
        free = self.declared.get(fid)
        if free is None:
            return False  # keeps a queue of its own and said nothing lately
        job = Job(id=str(first.pk), group_id=first.group_id, queue_id=first.queue_id, per_node=per_node, nodes=nodes)
        need = need_on(job, self.fabrics[fid].gpu_sharing)
        if not fits(need, free):
            return False
        self.declared[fid] = sub(free, need)
        return True


def start(group: list[Workload], to: int, now: datetime) -> int:
    """Record the intent of the whole group (an array's waiting elements: all or none), then take each job back
    (see the module docstring)."""
    to_name = FabricRow.objects.filter(pk=to).values_list("name", flat=True).first() or str(to)
    with transaction.atomic():
        if Move.objects.filter(workload__in=group).exists():
            return 0
        Move.objects.bulk_create(
            Move(workload=w, from_fabric=w.fabric, external_id=w.external_id, to_fabric_id=to, at=now) for w in group
        )
        whole = f" with the {len(group) - 1} other waiting elements of its array" if len(group) > 1 else ""
        for w in group:
            from_name = w.fabric.name if w.fabric else str(w.fabric_id)
            minutes = int((now - (w.admitted_at or now)).total_seconds() // 60)
            _event(w, f"moving{whole}: waited {minutes} min in {from_name}'s queue while {to_name} can start it now")
    gate("intent")
    return sum(finish(move) for move in Move.objects.filter(workload__in=group).order_by("pk"))


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
        gate("cancel")
        status = fabric.poll([move.external_id])[move.external_id]
    except FabricError as error:
        log.warning("moving %s from %s: %s (will try again)", w.pk, row.name, error)
        return 0
    if status.state == JobState.QUEUED:
        return 0  # not taken back yet: the next run asks again
    # Taken back: cancelled without a node, or gone where the fabric deletes what it takes back (Kubernetes).
    gone = status.state is JobState.MISSING and getattr(fabric, "taken_back_goes", False)
    if (status.state != JobState.CANCELLED and not gone) or status.host:
        move.delete()
        _event(w, f"move dropped: the job started on {row.name} first and stays there")
        return 0
    gate("confirm")
    reason = f"taken back from {row.name}'s queue to start elsewhere sooner"
    if not services.transition(w, State.PREEMPTED, reason=reason):
        return 0
    gate("preempted")
    services.transition(
        w, State.PENDING, reason="back in line to start where there is room now", attempt=w.attempt + 1,
        fabric_id=None, target_id=None, external_id="", rendered="", host="", connect_url="",
        notebook_endpoint=None, admitted_at=None, started_at=None, exit_code=None, idle_stop_at=None,
        gpu_idle_warned_at=None, last_sample_at=None, last_estimated_start=None, estimate_error_s=None,
    )  # fmt: skip
    gate("requeued")
    move.delete()
    return 1


GATE_ENV = "GRIDLANE_MOVE_GATE"


def gate(step: str) -> None:
    """A test's hold at one step of a move: where GRIDLANE_MOVE_GATE names the step, say so on stdout and wait
    there to be killed (the crash tests, tests/fabrics/slurm/test_move_crash_live.py). Nothing elsewhere."""
    if os.environ.get(GATE_ENV) == step:
        print(f"gate {step}", flush=True)  # the test reads it
        time.sleep(3600)


def _takes_back(fabric: object, group: list[Workload]) -> bool:
    """Whether the fabric can take these jobs back (Kubernetes: whole Jobs, not an indexed Job's elements)."""
    if not hasattr(fabric, "take_back"):
        return False
    takes = getattr(fabric, "takes_back", None)
    return takes is None or all(takes(w.external_id) for w in group)


def _event(w: Workload, reason: str) -> None:
    WorkloadEvent.objects.create(workload=w, from_state=w.state, to_state=w.state, reason=reason[:500])

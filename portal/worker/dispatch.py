"""Hand admitted work to its fabric without ever submitting it twice.

1. Record intent: admitted -> dispatching, with the rendered script, before anything leaves.
2. Look for jobs already tagged with the workload ids (a worker that died after submitting).
3. Only then submit the rest, and record the external ids. Where the fabric can, 2 and 3 are one
   round trip (`place_many`: the look-up and the submissions in one script, under one lock).
A crash between any two steps is repaired by the next cycle running the same steps again.
"""

from __future__ import annotations

import logging
from collections import defaultdict

from django.db.models import Q

from fabrics.base import Fabric, FabricError, JobSpec, place_many
from portal.queues.models import Fabric as FabricRow
from portal.worker.connections import fabric_for
from portal.workloads import notebook_endpoint, services
from portal.workloads.models import Workload
from portal.workloads.states import State

log = logging.getLogger("gridlane.worker")


def job_spec(w: Workload) -> JobSpec:
    return JobSpec(
        workload_id=w.run_id,
        name=w.name,
        kind=w.kind,
        owner=w.owner.get_username(),
        group=w.group.slug,
        queue=w.queue.slug,
        command=w.script or w.command,
        per_node=w.per_node,
        nodes=w.nodes,
        runtime_limit_s=w.runtime_limit_s,
        image=w.image,
        env=notebook_endpoint.job_env(w),  # notebooks on a batch cluster: where to report their server
        template=w.target.template if w.target else "",
    )


def dispatch_all() -> int:
    """Dispatch every admitted workload, and resume any whose dispatch was interrupted."""
    todo = (
        Workload.objects.filter(Q(state=State.ADMITTED) | Q(state=State.DISPATCHING, external_id=""))
        .select_related("owner", "group", "queue", "fabric", "target")
        .order_by("admitted_at")
    )
    by_fabric: defaultdict[int, list[Workload]] = defaultdict(list)
    rows: dict[int, FabricRow] = {}
    for w in todo:
        if w.fabric is not None:
            by_fabric[w.fabric.pk].append(w)
            rows[w.fabric.pk] = w.fabric
    return sum(dispatch(rows[fid], workloads) for fid, workloads in by_fabric.items())


def dispatch(row: FabricRow, workloads: list[Workload]) -> int:
    """Dispatch these workloads to one fabric; returns how many now have a job there."""
    fabric = fabric_for(row)
    # 1. Record intent. Those moved from admitted just now were never sent anywhere: nothing to look up.
    admitted = {w.pk for w in workloads if w.state == State.ADMITTED}
    ready = {w.run_id: w for w in workloads if _record_intent(row, fabric, w)}
    if not ready:
        return 0
    fresh = {run_id for run_id, w in ready.items() if w.pk in admitted}
    # 2. Find jobs a previous attempt already submitted, 3. and submit the rest: in one round trip where
    # the fabric can (Slurm, PBS: one script under the login node's submit lock), else in two.
    placed = place_many(fabric, [job_spec(w) for w in ready.values()], fresh=fresh)
    done = 0
    for run_id, outcome in placed.items():
        done += _record_outcome(row, ready[run_id], outcome)
    return done


def _record_intent(row: FabricRow, fabric: Fabric, w: Workload) -> bool:
    """admitted -> dispatching with the rendered script; True when the workload is ours to dispatch."""
    if w.state != State.ADMITTED:
        return True  # dispatching already: a previous attempt recorded the intent
    try:
        rendered = fabric.render(job_spec(w))
    except Exception as error:  # a template IT saved that cannot render this job
        services.transition(w, State.DISPATCHING, reason="dispatching")
        services.transition(w, State.FAILED, reason=f"could not render the job for {row.name}: {error}")
        return False
    return services.transition(w, State.DISPATCHING, reason=f"dispatching to {row.name}", rendered=rendered)


def _record_outcome(row: FabricRow, w: Workload, outcome: str | FabricError) -> int:
    if isinstance(outcome, FabricError):
        if outcome.retryable:
            log.warning("dispatch of %s to %s will be retried: %s", w.pk, row.name, outcome)
        else:
            services.transition(w, State.FAILED, reason=f"{row.name} refused the job: {outcome}")
        return 0
    # Whatever state it is in now (a cancel may have come), remember where the job is.
    Workload.objects.filter(pk=w.pk, external_id="").update(external_id=outcome)
    w.external_id = outcome
    log.info("workload %s dispatched to %s as %s", w.pk, row.name, outcome)
    return 1

"""Hand admitted work to its fabric without ever submitting it twice.

1. Record intent: admitted -> dispatching, with the rendered script, before anything leaves.
2. Look for a job already tagged with the workload id (a worker that died after submitting).
3. Only then submit, and record the external id.
A crash between any two steps is repaired by the next cycle running the same steps again.
"""

from __future__ import annotations

import logging

from django.db.models import Q

from fabrics.base import FabricError, JobSpec
from portal.worker.connections import fabric_for
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State

log = logging.getLogger("gridlane.worker")


def job_spec(w: Workload) -> JobSpec:
    return JobSpec(
        workload_id=w.pk,
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
        template=w.target.template if w.target else "",
    )


def dispatch_all() -> int:
    """Dispatch every admitted workload, and resume any whose dispatch was interrupted."""
    todo = (
        Workload.objects.filter(Q(state=State.ADMITTED) | Q(state=State.DISPATCHING, external_id=""))
        .select_related("owner", "group", "queue", "fabric", "target")
        .order_by("admitted_at")
    )
    return sum(dispatch(w) for w in todo)


def dispatch(workload: Workload) -> bool:
    """True when the workload now has a job on its fabric."""
    assert workload.fabric is not None  # noqa: S101 (admission always places a workload)
    fabric = fabric_for(workload.fabric)
    job = job_spec(workload)
    if workload.state == State.ADMITTED:
        try:
            rendered = fabric.render(job)
        except Exception as error:  # a template IT saved that cannot render this job
            services.transition(workload, State.DISPATCHING, reason="dispatching")
            services.transition(workload, State.FAILED, reason=f"could not render the job: {error}")
            return False
        if not services.transition(
            workload, State.DISPATCHING, reason=f"dispatching to {workload.fabric.name}", rendered=rendered
        ):
            return False  # cancelled (or taken) meanwhile
    try:
        external_id = fabric.find(workload.pk) or fabric.submit(job)
    except FabricError as error:
        if error.retryable:
            log.warning("dispatch of %s to %s will be retried: %s", workload.pk, workload.fabric.name, error)
            return False
        services.transition(workload, State.FAILED, reason=f"{workload.fabric.name} refused the job: {error}")
        return False
    # Whatever state it is in now (a cancel may have come), remember where the job is.
    Workload.objects.filter(pk=workload.pk, external_id="").update(external_id=external_id)
    workload.external_id = external_id
    log.info("workload %s dispatched to %s as %s", workload.pk, workload.fabric.name, external_id)
    return True

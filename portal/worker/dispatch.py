"""Hand admitted work to its fabric without ever submitting it twice.

1. Record intent: admitted -> dispatching, with the rendered script, before anything leaves.
2. Look for jobs already tagged with the workload ids (a worker that died after submitting).
3. Only then submit the rest, and record the external ids. Where the fabric can, 2 and 3 are one
   round trip (`place_many`: the look-up and the submissions in one script, under one lock).
A crash between any two steps is repaired by the next cycle running the same steps again. Fabrics are
dispatched to at once, one dispatch in flight per fabric, so that a slow one holds up only its own work.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import cast

from django.db import connection, transaction
from django.db.models import Q

from fabrics.base import Fabric, FabricError, InDatabaseFabric, JobSpec, TierHints, in_database, place_many
from portal import sql
from portal.accounts import posix
from portal.code import services as code_travel
from portal.queues import tiers
from portal.queues.models import Fabric as FabricRow
from portal.usage import samples as usage_samples
from portal.worker.connections import fabric_for
from portal.workloads import notebook_endpoint, services
from portal.workloads.models import Workload
from portal.workloads.paths import Paths
from portal.workloads.states import State

log = logging.getLogger("gridlane.worker")


def job_spec(
    w: Workload, tier: TierHints | None = None, paths: Paths | None = None, who: posix.RunAs | None = None
) -> JobSpec:
    """`tier`: what its priority tier asks of fabrics, when the caller has read the tiers already (else one query);
    `paths`: a batch's (its own paths on the portal); `who`: whom it runs as, when the caller has asked already."""
    if who is None:
        who = posix.run_as(w.owner_id, w.group_id, w.fabric_id) if w.fabric_id is not None else posix.RunAs()
    return JobSpec(
        workload_id=w.run_id,
        name=w.name,
        kind=w.kind,
        owner=w.owner.get_username(),
        group=w.group.slug,
        queue=w.queue.slug,
        command=w.command,
        per_node=w.per_node,
        nodes=w.nodes,
        runtime_limit_s=w.runtime_limit_s,
        image=w.image,
        # Notebooks on a batch cluster: where to report their server; jobs with a sampler: where to post
        # samples; an array's element: its index; code or packages that travel with it: where to get them.
        env=notebook_endpoint.job_env(w, paths)
        | usage_samples.job_env(w, paths)
        | _array_env(w)
        | code_travel.job_env(w, paths),
        template=w.target.template if w.target else "",
        script=w.script,  # a user's own sbatch/qsub script: byte for byte, with what the target forces
        forced=dict((w.target.native or {}).get("forced") or {}) if w.target and w.script else {},
        array=str(w.array_index) if w.array_index is not None else "",
        array_id=str(w.array_parent_id) if w.array_index is not None else "",
        run_as=who.user,
        account=who.account,
        tier=tier if tier is not None else tiers.hints_of([w.priority]).get(w.priority, TierHints()),
        gpu_type=w.gpu_type,
    )


def _array_env(w: Workload) -> dict[str, str]:
    if w.array_index is None:
        return {}
    return {"GRIDLANE_ARRAY_INDEX": str(w.array_index), "GRIDLANE_ARRAY_ID": str(w.array_parent_id)}


def dispatch_all() -> int:
    """Dispatch every admitted workload, and resume any whose dispatch was interrupted."""
    todo = _TODO.run(
        "to dispatch",
        lambda: (
            Workload.objects.filter(Q(state=State.ADMITTED) | Q(state=State.DISPATCHING, external_id=""))
            # Work admitted together (one admission's rows share their admitted_at) in the order it came, an
            # array's elements by index: element k of an array is element k of the Job that runs it.
            .order_by("admitted_at", "submitted_at", "array_index")
        ),
    )
    sql.related_once(todo, *RELATED)  # each read once for the batch, not joined to every row
    by_fabric: defaultdict[int, list[Workload]] = defaultdict(list)
    rows: dict[int, FabricRow] = {}
    for w in todo:
        if w.fabric is not None:
            by_fabric[w.fabric.pk].append(w)
            rows[w.fabric.pk] = w.fabric
    # Threads read with connections of their own: not from inside a transaction whose rows they could not see,
    # nor on SQLite (one writer at a time).
    if len(by_fabric) < 2 or connection.vendor != "postgresql" or connection.in_atomic_block:
        return sum(dispatch(rows[fid], workloads) for fid, workloads in by_fabric.items())
    return _in_parallel([(rows[fid], workloads) for fid, workloads in by_fabric.items()])


# What a dispatch reads of each workload beside its row: its job spec, its fabric and target.
RELATED = ("owner", "group", "queue", "fabric", "target")

# What dispatch_all reads on every kick: compiled once (portal.sql).
_TODO = sql.Compiled(Workload)

# Fabrics dispatched to at once, each from a thread of its own (a busy site has a handful of fabrics).
MAX_PARALLEL = 8


def _in_parallel(batches: list[tuple[FabricRow, list[Workload]]]) -> int:
    """One dispatch in flight per fabric, all at once: a slow fabric (an SSH round trip, an API server that
    takes its time) holds up only its own work. Each runs the same crash-safe steps on a database connection
    of its own (closed when it is done). A fabric whose dispatch raises leaves the others to finish; the first
    error is raised once they have."""

    def one(row: FabricRow, workloads: list[Workload]) -> int:
        try:
            return dispatch(row, workloads)
        finally:
            connection.close()  # this thread's own

    with ThreadPoolExecutor(max_workers=min(MAX_PARALLEL, len(batches)), thread_name_prefix="dispatch") as pool:
        futures = [pool.submit(one, row, workloads) for row, workloads in batches]
    done, errors = 0, []
    for future, (row, _) in zip(futures, batches, strict=True):
        error = future.exception()
        if error is None:
            done += future.result()
        else:
            log.error("dispatch to %s failed", row.name, exc_info=error)
            errors.append(error)
    if errors:
        raise errors[0]
    return done


def dispatch(row: FabricRow, workloads: list[Workload]) -> int:
    """Dispatch these workloads to one fabric; returns how many now have a job there."""
    fabric = fabric_for(row)
    hints = tiers.hints_of({w.priority for w in workloads})  # what their priority tiers ask of the fabric
    specs_of: dict[object, JobSpec] = {}  # each one's spec, worked out once: rendered, then sent
    paths = Paths()  # the batch's own paths on the portal: one reverse() per name
    resumed, rendered = _render(row, fabric, workloads, hints, specs_of, paths)
    placed = 0
    if in_database(fabric):  # intent, jobs and ids at once; what a dispatch left halfway before goes on below
        placed, rendered = _place_with_intent(row, cast(InDatabaseFabric, fabric), rendered, specs_of), {}
    # 1. Record intent. Those moved from admitted just now were never sent anywhere: nothing to look up.
    ready = {w.run_id: w for w in _record_intents(row, workloads, resumed, rendered)}
    if not ready:
        return placed
    fresh = {run_id for run_id, w in ready.items() if w.pk not in resumed}
    # 2. Find jobs a previous attempt already submitted, 3. and submit the rest: in one round trip where
    # the fabric can (Slurm, PBS: one script under the login node's submit lock), else in two.
    specs = [specs_of.get(w.pk) or job_spec(w, hints.get(w.priority, TierHints()), paths) for w in ready.values()]
    outcomes = place_many(fabric, specs, fresh=fresh)
    return placed + _record_outcomes(row, {ready[run_id]: outcome for run_id, outcome in outcomes.items()})


def _render(
    row: FabricRow,
    fabric: Fabric,
    workloads: list[Workload],
    hints: dict[str, TierHints],
    specs: dict[object, JobSpec],
    paths: Paths,
) -> tuple[set[object], dict[Workload, str]]:
    """The ids of those whose intent a previous attempt recorded (dispatching already), and each admitted one's
    rendered script; the spec each was rendered from goes into `specs`, by workload id. One that cannot run (no
    account to run as on this fabric, a template that cannot render it) fails here."""
    resumed: set[object] = set()
    rendered: dict[Workload, str] = {}
    mapped: dict[tuple[int, int], posix.RunAs] = {}  # a batch is mostly one person's work: each asked once
    for w in workloads:
        if (who := mapped.get((w.owner_id, w.group_id))) is None:
            who = mapped[w.owner_id, w.group_id] = posix.run_as(w.owner_id, w.group_id, row.pk)
        if who.refusal:  # the mapping changed since the submit: never run it as anyone else
            if w.state == State.ADMITTED:
                services.transition(w, State.DISPATCHING, reason="dispatching")
            services.transition(w, State.FAILED, reason=f"cannot run on {row.name}: {who.refusal}")
            continue
        if w.state != State.ADMITTED:
            resumed.add(w.pk)
            continue
        try:
            specs[w.pk] = job_spec(w, hints.get(w.priority, TierHints()), paths, who)
            rendered[w] = fabric.render(specs[w.pk])
        except Exception as error:  # a template IT saved that cannot render this job
            services.transition(w, State.DISPATCHING, reason="dispatching")
            services.transition(w, State.FAILED, reason=f"could not render the job for {row.name}: {error}")
    return resumed, rendered


def _record_intents(
    row: FabricRow, workloads: list[Workload], resumed: set[object], rendered: dict[Workload, str]
) -> list[Workload]:
    """admitted -> dispatching with each one's rendered script, in one statement for the whole batch; returns
    those that are ours to dispatch, with those whose intent a previous attempt recorded (`resumed`)."""
    won: list[Workload] = []
    if rendered:
        # One statement: each moves to dispatching with its script (one new version of its row).
        scripts = {w.pk: text for w, text in rendered.items()}
        moved = set(
            services.transition_many(
                list(scripts), State.ADMITTED, State.DISPATCHING, reason=f"dispatching to {row.name}",
                each={"rendered": scripts},
            )
        )  # fmt: skip
        won = [w for w in rendered if w.pk in moved]  # the others moved on meanwhile (a cancel)
        for w in won:
            w.state, w.rendered = State.DISPATCHING, rendered[w]
    keep = resumed | {w.pk for w in won}
    return [w for w in workloads if w.pk in keep]  # in the order given (oldest admission first)


def _place_with_intent(
    row: FabricRow, fabric: InDatabaseFabric, rendered: dict[Workload, str], specs: dict[object, JobSpec]
) -> int:
    """Dispatch to a fabric whose jobs are rows of the portal's own database (the agents' claims), all in one
    transaction: admitted -> dispatching with each one's script, its job's id and why it waits there (the
    fabric's QUEUED_REASON, as its next poll would say it), and the jobs themselves. A crash leaves all of it or
    none: no intent to repair, and each row takes one new version where the usual steps take three (the intent,
    the job's id, then the reason the next sync writes). A retryable error undoes the whole batch, which the
    next dispatch takes again. Returns how many were placed."""
    if not rendered:
        return 0
    scripts = {w.pk: text for w, text in rendered.items()}
    job_ids = {w.pk: fabric.job_id(specs[w.pk]) for w in rendered}
    placed: list[Workload] = []
    try:
        with transaction.atomic():
            moved = set(
                services.transition_many(
                    list(scripts), State.ADMITTED, State.DISPATCHING, reason=f"dispatching to {row.name}",
                    each={"rendered": scripts, "external_id": job_ids}, pending_reason=fabric.QUEUED_REASON,
                )
            )  # fmt: skip
            won = [w for w in rendered if w.pk in moved]  # the others moved on meanwhile (a cancel)
            outcomes = fabric.submit_many([specs[w.pk] for w in won]) if won else {}
            for w in won:
                w.state, w.rendered, w.pending_reason = State.DISPATCHING, scripts[w.pk], fabric.QUEUED_REASON
                outcome = outcomes.get(w.run_id)
                if isinstance(outcome, FabricError) and outcome.retryable:
                    raise outcome  # none of this dispatch stays: all of it is tried again
                if outcome is None or isinstance(outcome, FabricError):
                    services.transition(w, State.FAILED, reason=f"{row.name} refused the job: {outcome or 'no answer'}")
                else:
                    w.external_id = job_ids[w.pk]
                    placed.append(w)
    except FabricError as error:
        log.warning("dispatch of %d workloads to %s will be retried: %s", len(rendered), row.name, error)
        return 0
    for w in placed:
        log.info("workload %s dispatched to %s as %s", w.pk, row.name, w.external_id)
    return len(placed)


def _record_outcomes(row: FabricRow, outcomes: dict[Workload, str | FabricError]) -> int:
    """Remember where each job is (whatever state its workload is in now: a cancel may have come), in a few
    statements for the whole batch; a refused job fails its workload, a retryable error waits for the next try."""
    placed: dict[Workload, str] = {}
    for w, outcome in outcomes.items():
        if not isinstance(outcome, FabricError):
            placed[w] = outcome
        elif outcome.retryable:
            log.warning("dispatch of %s to %s will be retried: %s", w.pk, row.name, outcome)
        else:
            services.transition(w, State.FAILED, reason=f"{row.name} refused the job: {outcome}")
    sql.set_each(Workload, "external_id", {w.pk: job for w, job in placed.items()}, blank_only=True)
    for w, job in placed.items():
        w.external_id = job
        log.info("workload %s dispatched to %s as %s", w.pk, row.name, job)
    return len(placed)

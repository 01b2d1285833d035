"""The agent fabric, worker side: dispatch makes work claimable, poll reads what agents reported.

Nothing is pushed: agents long-poll the API and claim. Polling also notices hosts that stopped
heartbeating (see services.mark_lost).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from django.db import IntegrityError, connection, transaction
from django.db.models import Q
from django.utils import timezone

from fabrics.base import Capacity, FabricConfig, FabricError, JobSpec, JobState, JobStatus, Resources
from portal import sql
from portal.accounts import audit
from portal.agents import services
from portal.agents.models import AgentHost, Claim
from portal.notify import outbox
from portal.notify.models import Event
from portal.queues.models import Fabric as FabricRow
from portal.workloads.models import Workload

LEASE_WARNING_S = 600.0  # how long before a lease ends its warning is recorded (settings.lease_warning_s)

_STATES = {
    Claim.ClaimState.CLAIMABLE: JobState.QUEUED,
    Claim.ClaimState.RUNNING: JobState.RUNNING,
    Claim.ClaimState.SUCCEEDED: JobState.SUCCEEDED,
    Claim.ClaimState.FAILED: JobState.FAILED,
    Claim.ClaimState.CANCELLED: JobState.CANCELLED,
    Claim.ClaimState.TIMED_OUT: JobState.TIMED_OUT,
    Claim.ClaimState.LOST: JobState.FAILED,
}


class AgentFabric:
    """fabrics.base.InDatabaseFabric: a job is a claim, a row of the portal's own database, and its external id is
    its run id."""

    MAX_NODES = 1  # one host: a request for more nodes could never run here (refused at submit)
    IN_DATABASE = True
    QUEUED_REASON = "waiting for an agent"

    def __init__(self, config: FabricConfig) -> None:
        self.check_settings(config.settings)
        self.config = config
        # The output of the claims the last poll read, each handed once to the sync's tail() that follows: a
        # burst's starts were a query per job for what the poll had just read.
        self._polled_logs: dict[str, str] = {}

    @classmethod
    def check_template(cls, template: str) -> None:
        """Agents run the command as given; there is no template to check."""

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> None:
        for key in ("heartbeat_s", "lost_after_s"):
            value = settings.get(key, 1)
            if not isinstance(value, int | float) or value <= 0:
                raise ValueError(f"settings.{key} must be a positive number of seconds")

    def _row(self) -> FabricRow:
        found: list[FabricRow] = _BY_NAME.run(
            "by name", lambda name: FabricRow.objects.filter(name=name), self.config.name
        )
        if not found:
            raise FabricError(f"no fabric called {self.config.name}", retryable=False)
        return found[0]

    def render(self, job: JobSpec) -> str:
        return json.dumps(_spec(job), indent=2, sort_keys=True)

    def job_id(self, job: JobSpec) -> str:
        return str(job.workload_id)

    def submit(self, job: JobSpec) -> str:
        row = self._row()
        workload = services.workload_for(job.workload_id, row.name)
        if workload is None:
            raise FabricError(f"no workload runs as {job.workload_id}", retryable=False)
        Claim.objects.bulk_create([_claim(row, workload.pk, workload.lease_s, job)], ignore_conflicts=True)
        return self.job_id(job)

    def find_many(self, workload_ids: Sequence[UUID]) -> dict[UUID, str]:
        """One query for the whole batch the worker dispatches."""
        found = Claim.objects.filter(run_id__in=workload_ids, fabric__name=self.config.name)
        return {run_id: str(run_id) for run_id in found.values_list("run_id", flat=True)}

    def submit_many(self, jobs: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
        """Make the whole batch claimable in one insert; a job already claimable stays as it is."""
        row = self._row()
        # A claim needs only its workload's key and lease, read as plain values: the rest of each row stays in the
        # database. A workload run again runs under a new id (its run_id): looked up on its own.
        direct = dict(Workload.objects.filter(pk__in=[job.workload_id for job in jobs]).values_list("id", "lease_s"))
        results: dict[UUID, str | FabricError] = {}
        claims = []
        now = timezone.now()  # one batch, one moment: its claims are taken oldest work first, not in batch order
        for job in jobs:
            if job.workload_id in direct:
                pk, lease_s = job.workload_id, direct[job.workload_id]
            elif (workload := services.workload_for(job.workload_id, row.name)) is not None:
                pk, lease_s = workload.pk, workload.lease_s
            else:
                results[job.workload_id] = FabricError(f"no workload runs as {job.workload_id}", retryable=False)
                continue
            claims.append(_claim(row, pk, lease_s, job, now))
            results[job.workload_id] = self.job_id(job)
        _insert_claims(claims)
        return results

    def find(self, workload_id: UUID) -> str | None:
        found = Claim.objects.filter(run_id=workload_id, fabric__name=self.config.name).exists()
        return str(workload_id) if found else None

    def poll(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        """Each job's claim as a status. A claim still waiting for an agent is read as three plain values (a
        burst leaves thousands waiting, polled every cycle); only claims an agent took come as objects, with
        their host and workload (leases, logs)."""
        row = self._row()
        services.mark_lost(row.pk, services.lost_after_s(row))
        wanted = [u for u in (_uuid(i) for i in ids) if u]
        run_ids = sql.among(Claim._meta.get_field("run_id"), wanted)
        found = list(Claim.objects.filter(fabric=row, run_id__in=run_ids).values_list("run_id", "state", "reason"))
        waiting = {str(run_id): reason for run_id, state, reason in found if state == Claim.ClaimState.CLAIMABLE}
        taken = [run_id for run_id, state, _ in found if state != Claim.ClaimState.CLAIMABLE]
        # Claims an agent took are read again, whole and as they are now (an agent may have ended one since).
        by_id = {
            str(c.run_id): c
            for c in Claim.objects.filter(fabric=row, run_id__in=taken).select_related("host", "workload__queue")
        } if taken else {}  # fmt: skip
        self._polled_logs = {run_id: c.log for run_id, c in by_id.items()}
        statuses = {}
        for external_id in ids:
            if external_id in waiting:
                statuses[external_id] = JobStatus(JobState.QUEUED, reason=waiting[external_id] or self.QUEUED_REASON)
                continue
            claim = by_id.get(external_id)
            if claim is None:
                statuses[external_id] = JobStatus(JobState.MISSING)
                continue
            _follow_lease_extension(claim)
            _warn_before_expiry(claim, float(row.settings.get("lease_warning_s", LEASE_WARNING_S)))
            state = _STATES.get(Claim.ClaimState(claim.state), JobState.UNDETERMINED)
            if claim.state == Claim.ClaimState.LOST and claim.workload.queue.preemptible:
                state = JobState.MISSING  # the worker puts it back in line
            reason = claim.reason or (self.QUEUED_REASON if state == JobState.QUEUED else "")
            statuses[external_id] = JobStatus(
                state,
                exit_code=claim.exit_code,
                host=claim.host.name if claim.host else "",
                started_at=claim.started_at,
                finished_at=claim.finished_at,
                reason=reason,
            )
        return statuses

    def cancel(self, external_id: str) -> None:
        run_id = _uuid(external_id)
        if run_id is None:
            return
        claims = Claim.objects.filter(run_id=run_id, fabric__name=self.config.name)
        # Unclaimed work is cancelled outright; claimed work is stopped by its agent, which sees the flag.
        claims.filter(state=Claim.ClaimState.CLAIMABLE).update(
            state=Claim.ClaimState.CANCELLED, reason="cancelled before an agent took it", cancel_requested=True
        )
        claims.filter(state=Claim.ClaimState.RUNNING).update(cancel_requested=True)

    def extend(self, external_id: str, ends_at: datetime) -> None:
        """The running claim carries the new end; its agent learns it from its next heartbeat ("leases"),
        and warns of the new end again when it nears."""
        run_id = _uuid(external_id)
        claims = Claim.objects.filter(fabric__name=self.config.name, state=Claim.ClaimState.RUNNING)
        if run_id is None or not claims.filter(run_id=run_id).update(lease_ends_at=ends_at, lease_warned_at=None):
            raise FabricError(f"no agent is running {external_id} now", retryable=False)

    def tail(self, external_id: str, max_bytes: int = 16_384) -> str:
        log = self._polled_logs.pop(external_id, None)
        if log is None:
            run_id = _uuid(external_id)
            log = Claim.objects.filter(run_id=run_id).values_list("log", flat=True).first() if run_id else None
        return (log or "")[-max_bytes:]

    def capacity(self) -> Capacity:
        """What the online hosts offer; a lost host's capacity is no longer counted. With none online the pool
        is empty, not broken: work waits for capacity there, and runs once an agent comes back."""
        hosts = AgentHost.objects.filter(fabric__name=self.config.name).filter(Q(state=AgentHost.HostState.ONLINE))
        total = Resources()
        for h in hosts:
            total = total + Resources(h.gpus * 1000, h.cpus * 1000, h.memory_mib)
        names = ", ".join(h.name for h in hosts) or "none"
        return Capacity(total, healthy=True, detail=f"online agent hosts: {names}")


# A fabric's row by its name, read on every dispatch: compiled once (portal.sql).
_BY_NAME = sql.Compiled(FabricRow)


def _insert_claims(claims: list[Claim]) -> None:
    """Insert the claims, leaving any that exists already (by run id) as it is. On PostgreSQL a burst's go in by
    COPY (an INSERT of 1,000 claims quoted 17,000 values in Python first: most of a burst's dispatch); a run id
    claimable already (a dispatch retried after a crash) makes the COPY fail whole, and then the INSERT that
    skips what exists goes instead."""
    if len(claims) > 1 and connection.vendor == "postgresql":
        try:
            with transaction.atomic():  # a savepoint where a transaction is open: a failed COPY undoes itself alone
                sql.copy_insert(claims)
            return
        except IntegrityError:
            pass
    Claim.objects.bulk_create(claims, ignore_conflicts=True)


def _claim(row: FabricRow, workload_id: UUID, lease_s: int | None, job: JobSpec, now: datetime | None = None) -> Claim:
    return Claim(
        created_at=now or timezone.now(),
        run_id=job.workload_id,
        workload_id=workload_id,
        fabric=row,
        queue=job.queue,
        spec={**_spec(job), "lease_s": lease_s or 0},
        gpus_milli=job.per_node.gpus_milli,
    )


def _follow_lease_extension(claim: Claim) -> None:
    """A lease extended on the workload reaches its claim; the agent learns it from its next heartbeat."""
    ends = claim.workload.lease_ends_at
    if claim.state == Claim.ClaimState.RUNNING and claim.lease_ends_at and ends and ends > claim.lease_ends_at:
        Claim.objects.filter(pk=claim.pk).update(lease_ends_at=ends)
        claim.lease_ends_at = ends


def _warn_before_expiry(claim: Claim, warn_s: float) -> None:
    """Once per lease, when its end is near: an audit event `lease.expiring` the owner and IT can see."""
    ends = claim.lease_ends_at
    if claim.state != Claim.ClaimState.RUNNING or ends is None or claim.lease_warned_at is not None:
        return
    now = timezone.now()
    if ends - now > timedelta(seconds=warn_s):
        return
    if Claim.objects.filter(pk=claim.pk, lease_warned_at__isnull=True).update(lease_warned_at=now):
        audit.record("lease.expiring", claim.workload_id, actor=None, ends_at=ends.isoformat(),
                     owner=claim.workload.owner_id)  # fmt: skip
        outbox.tell(claim.workload, Event.LEASE, key=f"lease:{claim.workload_id}:{ends.isoformat()}", when=ends)


def _spec(job: JobSpec) -> dict[str, Any]:
    return {
        "workload_id": str(job.workload_id),
        "name": job.name,
        "kind": job.kind,
        "owner": job.owner,
        "command": job.command,
        "image": job.image,
        "runtime_limit_s": job.runtime_limit_s,
        "gpus_milli": job.per_node.gpus_milli,
        "env": dict(job.env),
        "run_as": job.run_as,  # a lease logs in to the person's own account on the host (fabrics.agent.keys)
    }


def _uuid(value: str) -> UUID | None:
    try:
        return UUID(value)
    except ValueError:
        return None

"""What agents do to the database: enrol, register, heartbeat, claim, report; and noticing lost hosts.

Claims are compare-and-swap: on PostgreSQL the candidate rows are locked with SKIP LOCKED, so two
agents polling at once each take a different workload and neither waits on the other.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import connection, transaction
from django.db.models import Sum
from django.utils import timezone

from portal.accounts import agents as service_identities
from portal.accounts.models import ResourceGroup, ServiceIdentity
from portal.agents.models import AgentAccess, AgentHost, Claim
from portal.queues.models import Fabric
from portal.usage.models import UsageSample
from portal.workloads import services as workload_services
from portal.workloads.models import Workload
from portal.workloads.states import State

log = logging.getLogger("gridlane.agents")

DEFAULT_HEARTBEAT_S = 5.0
DEFAULT_LOST_AFTER_S = 30.0
MAX_LOG_CHARS = 64 * 1024
LIVE = (Claim.ClaimState.RUNNING,)
FINISHED_STATES = {"succeeded", "failed", "cancelled", "timed_out"}


def heartbeat_s(fabric: Fabric) -> float:
    return float(fabric.settings.get("heartbeat_s", DEFAULT_HEARTBEAT_S))


def lost_after_s(fabric: Fabric) -> float:
    return float(fabric.settings.get("lost_after_s", DEFAULT_LOST_AFTER_S))


def enroll(fabric: Fabric, name: str, group: ResourceGroup, by: Any, days: int = 365) -> tuple[ServiceIdentity, str]:
    """A service identity that may act as an agent of this fabric only; returns it and its token."""
    service = ServiceIdentity(
        group=group, description=f"agent of fabric {fabric.name}", expires_at=timezone.now() + timedelta(days=days)
    )
    service, token = service_identities.create(service, name, [], by=by)
    AgentAccess.objects.create(service=service, fabric=fabric)
    return service, token


def fabric_of(user: Any) -> Fabric | None:
    """The agent fabric this user may speak for; None for people and for other service identities."""
    access = AgentAccess.objects.filter(service__user=user).select_related("fabric").first()
    return access.fabric if access is not None and access.fabric.kind == "agent" else None


def register(fabric: Fabric, name: str, facts: dict[str, Any]) -> AgentHost:
    now = timezone.now()
    host, _ = AgentHost.objects.update_or_create(
        fabric=fabric,
        name=name,
        defaults={
            "queues": [str(q) for q in facts.get("queues", [])],
            "gpus": _count(facts.get("gpus", 0)),
            "gpu_model": str(facts.get("gpu_model", ""))[:100],
            "gpu_memory_mib": _count(facts.get("gpu_memory_mib", 0)),
            "cpus": _count(facts.get("cpus", 0)),
            "memory_mib": _count(facts.get("memory_mib", 0)),
            "state": AgentHost.HostState.ONLINE,
            "last_heartbeat": now,
        },
    )
    return host


def beat(host: AgentHost) -> list[str]:
    """Record a heartbeat; returns the run ids on this host whose cancel was asked for."""
    AgentHost.objects.filter(pk=host.pk).update(last_heartbeat=timezone.now(), state=AgentHost.HostState.ONLINE)
    return cancels(host)


def cancels(host: AgentHost) -> list[str]:
    ids = Claim.objects.filter(host=host, state__in=LIVE, cancel_requested=True).values_list("run_id", flat=True)
    return [str(i) for i in ids]


def _free_gpus_milli(host: AgentHost) -> int:
    used = Claim.objects.filter(host=host, state__in=LIVE).aggregate(s=Sum("gpus_milli"))["s"] or 0
    return host.gpus * 1000 - used


def host_lost(host: AgentHost) -> bool:
    """Whether the host has been given up (heartbeats stopped, instance reclaimed), as stored now."""
    return AgentHost.objects.filter(pk=host.pk, state=AgentHost.HostState.LOST).exists()


def try_claim(host: AgentHost, queues: list[str]) -> Claim | None:
    """Take the oldest claimable work of the first queue that has some that fits; None when there is none, and
    for a host given up as lost (a long poll still open for an agent whose machine is gone) until it heartbeats."""
    got = try_claim_many(host, queues, 1)
    return got[0] if got else None


# How many claimable rows one look at a queue considers: enough to skip what does not fit the host's GPUs.
LOOK_AHEAD = 20


def try_claim_many(host: AgentHost, queues: list[str], limit: int) -> list[Claim]:
    """Take up to `limit` claims at once, oldest work first from each queue in the order given, as many as fit
    the host's free GPUs: one transaction and one UPDATE for all of them (an agent with free slots takes a
    burst's work in one round trip, not one per job). Empty when there is none, and for a host given up as lost."""
    if limit < 1 or host_lost(host):
        return []
    taken: list[Claim] = []
    free = _free_gpus_milli(host)
    with transaction.atomic():
        for queue in queues:
            candidates = Claim.objects.filter(
                fabric_id=host.fabric_id, queue=queue, state=Claim.ClaimState.CLAIMABLE, cancel_requested=False
            ).order_by("created_at", "workload__submitted_at", "pk")  # claims made in one batch: oldest work first
            if connection.features.has_select_for_update_skip_locked:
                candidates = candidates.select_for_update(skip_locked=True, of=("self",))
            for claim in candidates[: limit - len(taken) + LOOK_AHEAD]:
                if claim.gpus_milli > free:
                    continue
                taken.append(claim)
                free -= claim.gpus_milli
                if len(taken) == limit:
                    break
            if len(taken) == limit:
                break
        if not taken:
            return []
        now = timezone.now()
        mine = Claim.objects.filter(pk__in=[c.pk for c in taken], state=Claim.ClaimState.CLAIMABLE)
        if mine.update(state=Claim.ClaimState.RUNNING, host=host, started_at=now) != len(taken):
            # Without row locks (SQLite) another agent may have taken some since we looked: keep what we won.
            won = set(Claim.objects.filter(pk__in=[c.pk for c in taken], host=host, started_at=now)
                      .values_list("pk", flat=True))  # fmt: skip
            taken = [c for c in taken if c.pk in won]
        for claim in taken:
            claim.state, claim.host, claim.started_at = Claim.ClaimState.RUNNING, host, now
            if claim.spec.get("lease_s"):
                claim.lease_ends_at = now + timedelta(seconds=int(claim.spec["lease_s"]))
                Claim.objects.filter(pk=claim.pk).update(lease_ends_at=claim.lease_ends_at)
        # The worker records the starts at once (its sync), not at its next tick: a burst's last claims are
        # shown running in milliseconds, and a user watching one sees it start.
        workload_services.kick_worker()
    return taken


def claim_payload(claim: Claim) -> dict[str, Any]:
    payload: dict[str, Any] = {"run_id": str(claim.run_id), "queue": claim.queue, **claim.spec}
    payload["lease_ends_at"] = claim.lease_ends_at.isoformat() if claim.lease_ends_at else None
    key = getattr(claim.workload, "lease_key", None) if claim.spec.get("kind") == "vm" else None
    if key is not None:
        payload["public_key"] = key.public_key
        payload["from_addresses"] = key.from_addresses
    return payload


def report(claim: Claim, state: str, exit_code: int | None, reason: str) -> None:
    """The agent's word on how the job ended; a claim already finished (or lost) keeps its end."""
    report_many([(claim, state, exit_code, reason, [])])


def report_many(ends: list[tuple[Claim, str, int | None, str, list[dict[str, Any]]]]) -> None:
    """Many jobs' ends at once (an agent's batch): each claim's last readings, then its end, in one transaction;
    a claim already finished (or lost) keeps its end. The readings of all of them go in one insert, and the ends
    in one UPDATE for each distinct end (a burst's jobs mostly end alike: succeeded, 0), not one per job; a claim
    named twice keeps the first end given for it."""
    first: dict[Any, tuple[str, int | None, str]] = {}
    for claim, state, exit_code, reason, _ in ends:
        if state in FINISHED_STATES:
            first.setdefault(claim.pk, (state, exit_code, reason[:300]))
    alike: dict[tuple[str, int | None, str], list[Any]] = {}
    for pk, end in first.items():
        alike.setdefault(end, []).append(pk)
    now = timezone.now()
    with transaction.atomic():
        UsageSample.objects.bulk_create([row for claim, *_, samples in ends for row in _usage_rows(claim, samples)])
        for (state, exit_code, reason), pks in alike.items():
            Claim.objects.filter(pk__in=pks, state=Claim.ClaimState.RUNNING).update(
                state=state, exit_code=exit_code, reason=reason, finished_at=now
            )
        if alike:
            workload_services.kick_worker()  # the ends recorded at once, and the room they leave used


def append_log(claim: Claim, chunk: str) -> None:
    with transaction.atomic():
        row = Claim.objects.select_for_update().get(pk=claim.pk)
        row.log = (row.log + chunk)[-MAX_LOG_CHARS:]
        row.save(update_fields=["log"])


def record_usage(claim: Claim, samples: list[dict[str, Any]]) -> int:
    rows = _usage_rows(claim, samples)
    UsageSample.objects.bulk_create(rows)
    return len(rows)


def _usage_rows(claim: Claim, samples: list[dict[str, Any]]) -> list[UsageSample]:
    return usage_rows(claim.workload_id, claim.gpus_milli, samples)


def usage_rows(workload_id: Any, gpus_milli: int, samples: list[dict[str, Any]]) -> list[UsageSample]:
    """The agent's readings of one workload as rows (at most 1,000 per call); TypeError or ValueError for one that
    is not a reading."""
    return [
        UsageSample(workload_id=workload_id, source=UsageSample.Source.AGENT, gpus_milli=gpus_milli, **reading(s))
        for s in samples[:1000]
    ]


def reading(sample: dict[str, Any]) -> dict[str, Any]:
    """An agent's reading's values (its time, else now; GPU use, GPU memory, CPU use, host memory), as UsageSample
    takes them; TypeError or ValueError for one that is not a reading. Its other fields are the caller's."""
    return {
        "at": _parse_at(sample.get("at")),
        "gpu_utilisation": _opt_float(sample.get("gpu_utilisation")),
        "gpu_memory_mib": _opt_int(sample.get("gpu_memory_mib")),
        "cpu_utilisation": _opt_float(sample.get("cpu_utilisation")),
        "memory_mib": _opt_int(sample.get("memory_mib")),
    }


def mark_lost(fabric_id: int, lost_after: float) -> list[AgentHost]:
    """Hosts silent for longer than `lost_after` seconds become lost, and so does the work they ran.

    Work in a preemptible queue is marked preempted, so the worker's sync puts it back in line; the
    rest fails when the worker next polls.
    """
    cutoff = timezone.now() - timedelta(seconds=lost_after)
    lost = list(
        AgentHost.objects.filter(fabric_id=fabric_id, state=AgentHost.HostState.ONLINE, last_heartbeat__lt=cutoff)
    )
    return [host for host in lost if lose(host, f"agent host {host.name} stopped heartbeating")]


def lose(host: AgentHost, reason: str) -> bool:
    """Give the host up (its heartbeats stopped, or its instance was reclaimed): the work it ran is lost, and
    goes back in line where its queue allows. False when it was given up already."""
    if not AgentHost.objects.filter(pk=host.pk, state=AgentHost.HostState.ONLINE).update(
        state=AgentHost.HostState.LOST
    ):
        return False
    for claim in Claim.objects.filter(host=host, state__in=LIVE).select_related("workload__queue"):
        Claim.objects.filter(pk=claim.pk, state=Claim.ClaimState.RUNNING).update(
            state=Claim.ClaimState.LOST, reason=reason, finished_at=timezone.now()
        )
        w = claim.workload
        if w.queue.preemptible and w.state in (State.DISPATCHING, State.RUNNING):
            workload_services.transition(w, State.PREEMPTED, reason=f"{reason}; back in line")
    log.warning("%s: marked lost", reason)
    return True


def workload_for(run_id: UUID, fabric_name: str) -> Workload | None:
    """The workload whose current run carries this id; None when there is none."""
    direct = Workload.objects.filter(pk=run_id).first()
    if direct is not None:
        return direct
    candidates = Workload.objects.filter(fabric__name=fabric_name, state=State.DISPATCHING, attempt__gt=0)
    return next((w for w in candidates if w.run_id == run_id), None)


def _parse_at(value: Any) -> Any:
    from datetime import datetime

    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return timezone.now()
        return parsed if parsed.tzinfo else timezone.now()
    return timezone.now()


def _opt_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else _count(value)


def _count(value: Any, high: int = 2**31 - 1) -> int:
    """A whole number a column can hold; ValueError otherwise (a negative one, or one past any real machine)."""
    number = int(value)
    if not 0 <= number <= high:
        raise ValueError(f"{number} is not a count between 0 and {high}")
    return number

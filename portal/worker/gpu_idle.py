"""Acting on idle GPUs, per queue (Queue.gpu_idle_action, IT's choice, audited like every queue change).

A running workload's GPUs are idle when they average below 80 % over the last whole idle window and its CPUs,
where read, below 10 % (portal.usage.idle_now: a job whose CPUs work is not idle, as the seed has it). Per its
queue's action:
- nothing: nothing;
- warn: the owner is told once per idle spell (a WorkloadEvent on the workload's page, and a notification
  where they asked for idle warnings); busy again, or no longer known, the warning is taken back;
- stop: warned the same way, and a notebook or VM lease still idle `gpu_idle_grace_minutes` after the
  warning is stopped (other work is only warned: a training run's GPUs may be idle while it reads data);
- preemptible: warned the same way, and while the warning stands the scheduler may preempt it for a team
  owed its reservation, before any borrowed work and even within its own team's reservation
  (scheduler.preemption). Busy again, the mark goes with the warning.
Work with no utilisation data is never acted on: unknown is not idle. `decide` is pure; `step` is the
worker's, in three queries plus one write per workload acted on.
"""

from __future__ import annotations

import enum
import logging
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q

from portal import words
from portal.accounts.models import Membership
from portal.notify import outbox
from portal.notify.models import Event
from portal.queues.models import Queue, WorkloadKind
from portal.usage.idle_now import MAX_LISTED, idle_spells
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State

log = logging.getLogger("gridlane.worker")

Action = Queue.GpuIdleAction
ACTING = (Action.WARN, Action.STOP, Action.PREEMPTIBLE)
STOPPABLE = frozenset({WorkloadKind.NOTEBOOK, WorkloadKind.VM})  # sessions someone holds, not runs that compute


MARKED = "a team owed its reserved GPUs may preempt it first (it then waits in line again)"


class Act(enum.StrEnum):
    NOTHING = "nothing"
    WARN = "warn"
    CLEAR = "clear"
    STOP = "stop"


def decide(now: datetime, idle: bool, warned_at: datetime | None, action: str, kind: str, grace: timedelta) -> Act:
    """What to do about one running workload now: `idle` its GPUs below the threshold over the last window,
    `warned_at` when its owner was warned of this spell (None: not warned)."""
    if action == Action.NOTHING or not idle:
        return Act.CLEAR if warned_at is not None else Act.NOTHING
    if warned_at is None:
        return Act.WARN
    if action == Action.STOP and kind in STOPPABLE and now >= warned_at + grace:
        return Act.STOP
    return Act.NOTHING


def step(now: datetime) -> dict[str, int]:
    """Warn, take back or stop as each running GPU workload's queue says; the counts of each. Never raises:
    a failure here must not stop scheduling."""
    try:
        return _step(now)
    except Exception:  # logged; the next cycle tries again
        log.exception("acting on idle GPUs failed")
        return {}


def _step(now: datetime) -> dict[str, int]:
    running = list(
        Workload.objects.filter(state=State.RUNNING, gpus_milli__gt=0, started_at__isnull=False)
        .filter(Q(queue__gpu_idle_action__in=ACTING) | Q(gpu_idle_warned_at__isnull=False))
        .select_related("queue", "owner")
        .defer("log_tail", "rendered", "command", "script")
        .order_by("started_at")[:MAX_LISTED]
    )
    spells = idle_spells(running, now)
    done = {act: 0 for act in Act}
    warned: list[tuple[Workload, int, float]] = []
    for w in running:
        grace = timedelta(minutes=w.queue.gpu_idle_grace_minutes)
        act = decide(now, w.pk in spells, w.gpu_idle_warned_at, w.queue.gpu_idle_action, w.kind, grace)
        if act == Act.WARN:
            since, average = spells[w.pk]
            idle_for = int((now - since).total_seconds() // 60)
            stops = w.queue.gpu_idle_action == Action.STOP and w.kind in STOPPABLE
            marked = w.queue.gpu_idle_action == Action.PREEMPTIBLE
            reason = f"GPUs idle: {average:.0f} % utilisation, below 80 % for {idle_for} min"
            reason += f"; stops at {now + grace:%H:%M} UTC unless they are used" if stops else ""
            reason += f"; {MARKED}" if marked else ""
            if services.do_warn_gpu_idle(w, now, reason):
                text = f"{w.name}'s GPUs have been idle for {idle_for} min ({average:.0f} % utilisation)."
                text += f" It stops at {now + grace:%Y-%m-%d %H:%M} UTC unless they are used." if stops else ""
                text += f" Until they are used, {MARKED}." if marked else ""
                outbox.tell(w, Event.IDLE, key=f"gpu-idle:{w.pk}:{now.isoformat()}", reason=text)
                warned.append((w, idle_for, average))
        elif act == Act.CLEAR:
            services.do_clear_gpu_idle(
                w, "GPUs or CPUs busy again, or their use no longer known: the idle warning is taken back"
            )
        elif act == Act.STOP:
            services.do_cancel(None, w, reason=f"stopped: its GPUs stayed idle {grace} after the warning")
            log.info("stopped %s: GPUs idle past the grace", w.pk)
        done[act] += 1
    _tell_leads(warned, now)
    return {str(act): n for act, n in done.items() if act != Act.NOTHING and n}


def _tell_leads(warned: list[tuple[Workload, int, float]], now: datetime) -> None:
    """The leads of each warned workload's team hear of its idle GPUs too, where they asked to (one query for the
    leads; the outbox's per message)."""
    if not warned:
        return
    leads: defaultdict[int, list[int]] = defaultdict(list)
    for group_id, user_id in Membership.objects.filter(
        group_id__in={w.group_id for w, _, _ in warned}, role=Membership.Role.LEAD
    ).values_list("group_id", "user_id"):
        leads[group_id].append(user_id)
    for w, idle_for, average in warned:
        told = [user_id for user_id in leads[w.group_id] if user_id != w.owner_id]  # the owner heard already
        if told:
            gpus = words.gpus(w.gpus_milli * w.nodes / 1000)
            text = (f"{w.owner.get_username()}'s {w.name} holds {gpus} of your team's, idle for {idle_for} min "
                    f"({average:.0f} % utilisation).")  # fmt: skip
            url = f"{settings.GRIDLANE_PUBLIC_URL}{w.get_absolute_url()}"
            outbox.tell_people(told, Event.TEAM_IDLE, f"team-idle:{w.pk}:{now.isoformat()}", f"Idle GPUs: {w.name}",
                               text, url)  # fmt: skip

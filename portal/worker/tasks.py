"""The worker's steps, each under a lock of its own, and the periodic cycle that runs them in order.

    sync      bring fabric status in (finished work frees its capacity)       skipped while another syncs
    capacity  ask fabrics what they have now, every GRIDLANE_CAPACITY_SECONDS  skipped while another asks
    admit     snapshot -> decide() -> apply, about 10 ms on a small site       waits for another admission
    dispatch  hand admitted work to its fabric                                asks a running dispatch to go again
    rollup    hourly rollups for the dashboards, every GRIDLANE_ROLLUP_SECONDS skipped while another rolls up
    budgets   count budgets' spend, hold work of spent ones, tell leads       after the rollup, as often
    gpuidle   warn of idle GPUs, stop idle notebooks and leases, per queue    after the rollup, as often
    objectives  wait objectives' burn rates; one alert per burn episode       after the rollup, as often
    burst     cloud instances for work that waits for capacity, ended idle    skipped while another scales
    samplers  start the GPU sampler inside native jobs that started to run    skipped while another starts them
    accounting  sacct's GPU-hours per team account, every GRIDLANE_ACCOUNTING_SECONDS  skipped while another asks
    kueue     Kueue queues follow quotas: on a change, every GRIDLANE_KUEUE_SYNC_SECONDS   skipped while another syncs
    retention delete raw samples, events, audit past their days, hourly      skipped while another prunes
    notify    outbox of people's notifications, handed to sender threads     skipped while another collects

A kick (a submit, a cancel) runs admit and dispatch at once, without waiting for a slow fabric's sync; the
periodic cycle runs them all (where the worker's listener takes kicks, its admit and dispatch are a kick too).
A cancel's kick syncs right after (that is where its job is stopped); a stream of submits' kicks syncs at most
once every FOLLOW_UP_SYNC_S (see FollowUp). Stale status can only make admit see more in use than there is,
never less.
"""

from __future__ import annotations

import functools
import gc
import logging
import math
import threading
import time
from collections.abc import Callable
from typing import Any

from django.conf import settings
from django.utils import timezone

from portal.budgets import step as budget_step
from portal.burst import autoscale as scaling
from portal.notify import outbox, send
from portal.objectives import evaluate as objectives
from portal.usage import rollup
from portal.worker import (
    accounting,
    apply,
    capacity,
    gpu_idle,
    kueue,
    pullback,
    retention,
    samplers,
    snapshot,
    stats,
    sync,
    usage,
    wake,
)
from portal.worker import dispatch as dispatching
from portal.worker.lock import cycle_lock
from scheduler import decide

log = logging.getLogger("gridlane.worker")

# How long an admission waits for another to finish; one takes milliseconds, so this is only reached when a
# worker hangs while holding the lock (and then the periodic cycle tries again).
ADMIT_WAIT_S = 5.0
# Rounds one admission may run while each admits a whole slice of candidates (a burst); the rest waits a tick.
MAX_ROUNDS = 20
# How a burst's slices grow from round to round, and the largest (decide() stays well under a second on it).
GROWTH = 4
MAX_CANDIDATES = 4096


def cycle(kick: bool = False) -> dict[str, Any]:
    """The periodic cycle (django-q2 runs it every GRIDLANE_CYCLE_SECONDS): every step in order.

    `kick`: the worker's listener takes kicks (it does on PostgreSQL), so the cycle asks it to admit and dispatch,
    as a submit does, instead of doing both here. The listener's admission reads only the workloads that changed
    since its last one, where this process's last snapshot is a period old: under a stream of submits, doing both
    here cost the worker a fifth of its CPU, for work the stream's own admissions take at once. The kick goes after
    this cycle's sync, so the admission still sees the capacity the sync freed."""
    started = time.perf_counter()
    synced = sync_fabrics()
    observe_capacity()
    summary: dict[str, Any] = {"synced": synced}
    if kick:
        wake.kick(wake.ADMIT)  # the sync is done: admit and dispatch only
        summary["kicked"] = True
    else:
        summary |= admit() | {"dispatched": dispatch()}
    if rollup.due(timezone.now()):
        with cycle_lock("rollup") as held:
            if held:
                rollup.step(timezone.now())
        with cycle_lock("budgets") as held:
            if held:
                summary |= budget_step.step(timezone.now())
        with cycle_lock("gpu-idle") as held:
            if held:
                summary |= {f"gpu idle {k}": v for k, v in gpu_idle.step(timezone.now()).items()}
        with cycle_lock("objectives") as held:
            if held:
                summary |= {f"objectives {k}": v for k, v in objectives.step(timezone.now()).items() if v}
    summary |= autoscale()
    with cycle_lock("samplers") as held:
        if held:
            summary |= {f"samplers {k}": v for k, v in samplers.step(timezone.now()).items() if v}
    with cycle_lock("accounting") as held:
        if held:
            accounting.check_all(timezone.now())
    with cycle_lock("kueue") as held:
        if held:
            kueue.step(timezone.now())
    with cycle_lock("retention") as held:
        if held:
            retention.step(timezone.now())
    with cycle_lock("notify") as held:
        if held:
            outbox.collect(timezone.now())
            send.deliver(timezone.now())
    stats.gauge(last_cycle_at=time.time())  # /readyz: the worker is alive and cycling
    summary["seconds"] = round(time.perf_counter() - started, 4)
    if synced or summary.get("admitted") or summary.get("preempted") or summary.get("dispatched"):
        log.info("cycle: %s", summary)
    return summary


def kicked() -> dict[str, Any]:
    """What a submit or a cancel asks for: admit now, then follow up."""
    return admit() | follow_up()


def follow_up(sync: bool = True) -> dict[str, Any]:
    """After a kick's admission: dispatch what it admitted, then (with `sync`) bring status in (where a cancelled
    job is stopped on its fabric)."""
    return {"dispatched": dispatch(), "synced": sync_fabrics() if sync else 0}


# A kick that only brought new work (wake.ADMIT: a submit) syncs after its dispatch at most this often. A sync
# polls every fabric for all its live work, so one per submit made a burst of N submits cost N polls of a
# backlog that grows with N; this keeps the prompt start of a lone submit (its sync is long due) at one poll a
# second under a stream, the periodic cycle syncing as ever.
FOLLOW_UP_SYNC_S = 1.0


class FollowUp:
    """The worker's follow-up thread's memory between kicks: whether a kick since its last round asked for a
    sync (`ask`, from the listener's thread), and when it last synced. `run` dispatches, and syncs when asked to
    or when the last sync is FOLLOW_UP_SYNC_S old."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.synced_at = -math.inf
        self._asked = False
        self._lock = threading.Lock()

    def ask(self, sync: bool) -> None:
        with self._lock:
            self._asked = self._asked or sync

    def run(self) -> dict[str, Any]:
        with self._lock:
            asked, self._asked = self._asked, False
        now = self.clock()
        sync = asked or now - self.synced_at >= FOLLOW_UP_SYNC_S
        done = follow_up(sync)
        if sync:
            self.synced_at = now
        return done


def sync_fabrics() -> int:
    with cycle_lock("sync") as held:
        # Moves first: a job a move took back must never be read as cancelled outside Gridlane (pullback.py).
        return pullback.step(timezone.now()) + sync.sync_all() if held else 0


def observe_capacity() -> int:
    """The periodic cycle's only: kicks never wait on a fabric's answer (an SSH round trip, say)."""
    with cycle_lock("capacity") as held:
        return capacity.observe_all(timezone.now()) if held else 0


def admit(wait_s: float = ADMIT_WAIT_S) -> dict[str, Any]:
    """One scheduling decision over a fresh snapshot, applied in one transaction. One at a time: a second
    waits for the first, so that its snapshot sees everything the first wrote."""
    with cycle_lock("scheduling-cycle", wait_s=wait_s) as held:
        if not held:
            return {"skipped": True}
        started = time.perf_counter()
        admitted = preempted = rounds = 0
        # A burst larger than a cycle's slice of candidates (GRIDLANE_CANDIDATES_PER_QUEUE per team, queue and
        # priority) is admitted in rounds back to back, not one slice per kick or tick. A round that admitted
        # a whole slice showed room for more: the next takes a slice GROWTH times larger (1,000 at once: two).
        candidates = settings.GRIDLANE_CANDIDATES_PER_QUEUE
        for rounds in range(1, MAX_ROUNDS + 1):  # noqa: B007 (counted)
            now = timezone.now()
            usage.bring_forward(now)  # each team's decayed GPU use (fair share's U)
            snap, rows = snapshot.build(now, candidates)
            _freeze_heap_once()
            decisions = decide(snap)
            applied = apply.apply(decisions, rows)
            admitted, preempted = admitted + applied.admitted, preempted + applied.preempted
            if applied.admitted < candidates:
                break
            candidates = min(candidates * GROWTH, MAX_CANDIDATES)
        seconds = time.perf_counter() - started
    stats.record(
        {"cycles": rounds, "cycle_seconds": seconds, "admissions": admitted, "preemptions": preempted},
        {"last_cycle_seconds": seconds},
    )
    return {"admitted": admitted, "preempted": preempted, "waiting": len(decisions.waiting)}


@functools.cache  # once per process
def _freeze_heap_once() -> None:
    """The collector's policy around decide(), which leaves the collector alone: before a process's first
    decision, everything alive then (Django, the imports, the first snapshot) is collected once and then frozen
    (gc.freeze), out of every later collection's sight. A collection in a cycle's middle then walks only what
    came after, not the whole process; the collector stays on, for every thread."""
    gc.collect()
    gc.freeze()


def autoscale() -> dict[str, int]:
    """The periodic cycle's only, after admit: it reads the reasons admit wrote. Providers answer in seconds."""
    with cycle_lock("burst") as held:
        return scaling.periodic(timezone.now()) if held else {}


def dispatch() -> int:
    """Hand admitted work to its fabric. When another process is dispatching, ask it to go round once more
    instead of waiting: its query may have run before this admission committed."""
    done = 0
    asked = False
    for _ in range(5):  # bounded: a steady stream of requests is served by the periodic cycle anyway
        with cycle_lock("dispatch") as held:
            if held:
                done += dispatching.dispatch_all()
        if not held:
            if asked:
                return done
            # Ask, then try once more ourselves: the holder may have let go between our try and our asking,
            # and then nobody would see the request.
            stats.gauge(dispatch_requested=1)
            asked = True
            continue
        if not stats.take_request("dispatch_requested"):  # asked for while we ran (or just as we let go)?
            break
    return done

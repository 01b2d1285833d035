"""One cycle's working state: the ledger, what this cycle decided so far, and when capacity comes back.

Every pass reads and writes the same Cycle: a job is admitted (it takes its need in the ledger), waits (with a
reason, and what it waits for), or is preempted (it gives its need back). Each pending job gets exactly one of
admitted or waiting; running work may be preempted once.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta
from operator import itemgetter

from scheduler import reasons
from scheduler.backfill import Plan
from scheduler.estimates import expected_runtime
from scheduler.ledger import Amount, Ledger, amount, need_on
from scheduler.limits import Limits, Why
from scheduler.model import Admit, Job, Preempt, Snapshot
from scheduler.preemption import may_preempt
from scheduler.reasons import Reason
from scheduler.reservations import Reservations
from scheduler.routes import Routes


class Cycle:
    """The state one cycle decides on and records into (see the module docstring)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.s = snapshot
        self.now = snapshot.now
        self.ledger = Ledger(snapshot)
        self.healthy = {fid for fid, f in snapshot.fabrics.items() if f.healthy}
        # Each fabric's size: what it holds in all when everything is up (work beyond it can never run there).
        self.sizes = {
            fid: self.ledger.capacity[fid] if f.size is None else amount(f.size) for fid, f in snapshot.fabrics.items()
        }
        self.routes = Routes(snapshot, self.ledger.sharing)
        self.reservations = Reservations(self.ledger, self.healthy)
        self.limits = Limits(snapshot, self.ledger)
        # The tiers whose work may preempt borrowed work of lower ones (the old classes never may).
        self.preempting = {slug: t for slug, t in snapshot.tiers.items() if t.may_preempt}
        self.running: defaultdict[int, list[Job]] = defaultdict(list)
        self.preemptible: defaultdict[int, list[Job]] = defaultdict(list)  # running work that may be preempted
        self.array_active: defaultdict[str, int] = defaultdict(int)  # array -> its elements holding capacity
        for job in snapshot.running:
            if job.fabric_id is not None:
                self.running[job.fabric_id].append(job)
                if may_preempt(snapshot, job):
                    self.preemptible[job.fabric_id].append(job)
            if job.array_id:
                self.array_active[job.array_id] += 1
        # fabric -> team -> GPUs (milli) of its running work there that may never be preempted (reclaim.lent_away)
        self.fixed: dict[int, dict[int, int]] = {}
        self.plans: dict[int, Plan] = {}  # fabric -> the reservations of the first work waiting there (backfill.py)
        # (fabric, need) -> the fabric's use when work of that need last found no room there, and why it waits.
        self.short: dict[tuple[int, Amount], tuple[Amount, Why]] = {}
        # -- what this cycle decided --
        self.admitted: list[Admit] = []
        self.admitted_on: defaultdict[int, list[Job]] = defaultdict(list)
        self.needs_on: defaultdict[int, list[Amount]] = defaultdict(list)  # their needs there, in the same order
        self.preempted: list[Preempt] = []
        self.gone: set[str] = set()  # preempted in this cycle
        # Why each waiting job waits, and what it waits for: a fabric's capacity, or a limit (its key).
        self.waiting: dict[str, Reason] = {}
        self.waits_on: dict[str, int] = {}
        self.waits_under: dict[str, tuple[int, int | None]] = {}
        # Runtime limits (s) -> as a timedelta, and when work started now ends at it (many jobs share one).
        self.spans: dict[int, timedelta] = {}
        self.ends: dict[int, datetime] = {}

    # -- recording -------------------------------------------------------------------------------------
    def admit(self, job: Job, fid: int, need: Amount) -> None:
        if job.array_id:
            self.array_active[job.array_id] += 1
        self.ledger.move(job, fid, need, 1)
        self.admitted.append(Admit(job.id, fid))
        self.admitted_on[fid].append(job)
        self.needs_on[fid].append(need)

    def wait(self, job: Job, why: Why) -> None:
        reason, fid, limit_key = why
        self.waiting[job.id] = reason
        if fid is not None:
            self.waits_on[job.id] = fid
        elif limit_key is not None:
            self.waits_under[job.id] = limit_key

    def preempt(self, victim: Job, reason: Reason) -> None:
        self.gone.add(victim.id)
        self.preempted.append(Preempt(victim.id, reason))

    def throttled(self, job: Job) -> bool:
        """Whether the job is an array element past its array's % limit (then it waits, with that reason)."""
        if not job.array_throttle or self.array_active[job.array_id] < job.array_throttle:
            return False
        self.waiting[job.id] = reasons.array_throttle(job.array_throttle)
        return True

    def name(self, fid: int) -> str:
        return self.s.fabrics[fid].name

    # -- when capacity comes back ----------------------------------------------------------------------
    def releases(self, fid: int, expected: bool = False) -> list[tuple[datetime, Amount]]:
        """When capacity comes back on a fabric, in time order: each job running or admitted there (and not
        preempted) at its runtime limit; with `expected` (estimates only), at its learned runtime where the
        snapshot has one (a run already past it: at its limit)."""
        sharing = self.ledger.sharing[fid]
        out = []
        for job in self.running[fid]:
            if job.id in self.gone:
                continue
            out.append((self.ends_at(job, expected), need_on(job, sharing)))
        ends, end = self.ends, self.end
        for job, need in zip(self.admitted_on[fid], self.needs_on[fid], strict=True):
            runtime = self.runtime_of(job) if expected else job.runtime_limit_s
            out.append((ends.get(runtime) or end(runtime), need))
        out.sort(key=itemgetter(0))
        return out

    def runtime_of(self, job: Job) -> int:
        """How long an estimate takes the job to run (estimates.expected_runtime)."""
        return expected_runtime(job, self.s.expected_runtimes)

    def ends_at(self, job: Job, expected: bool = False) -> datetime:
        """When running (or admitted) work ends: at its runtime limit, or with `expected` at its learned runtime
        while it has not run past that (then at its limit); never before now."""
        start = job.started_at or self.now
        end = start + self.span(job.runtime_limit_s)
        if expected:
            runtime = self.runtime_of(job)
            if runtime < job.runtime_limit_s and start + self.span(runtime) > self.now:
                end = start + self.span(runtime)
        return max(self.now, end)

    def span(self, seconds: int) -> timedelta:
        """A runtime limit as a timedelta."""
        span = self.spans.get(seconds)
        if span is None:
            span = self.spans[seconds] = timedelta(seconds=seconds)
        return span

    def end(self, seconds: int) -> datetime:
        """When work started now ends at its runtime limit."""
        end = self.ends.get(seconds)
        if end is None:
            end = self.ends[seconds] = self.now + self.span(seconds)
        return end

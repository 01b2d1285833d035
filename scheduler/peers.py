"""Two peers to measure Gridlane's policy against, each written from its own documentation, with decide()'s
interface (a snapshot in, decisions out) so that the simulator runs all three on the same trace.

**Kueue** (`kueue`): BestEffortFIFO ClusterQueues in a cohort, borrowing, and `reclaimWithinCohort: Any`.
- https://kueue.sigs.k8s.io/docs/concepts/cluster_queue/ (queueingStrategy, nominalQuota, borrowingLimit,
  cohort, preemption: reclaimWithinCohort / withinClusterQueue / borrowWithinCohort)
- https://kueue.sigs.k8s.io/docs/concepts/preemption/ and https://kueue.sigs.k8s.io/docs/concepts/cohort/
- the rules as the code applies them: kubernetes-sigs/kueue pkg/scheduler/scheduler.go (one head per
  ClusterQueue per cycle, entries that do not borrow first, then priority, then age) and
  pkg/scheduler/preemption/preemption.go (candidates, their order, minimal preemptions).

Each team is a ClusterQueue: nominalQuota = its reservation on the fabric (a ResourceFlavor), borrowingLimit
= its limit minus its reservation (none when it has no limit). Teams without a department share one cohort;
with `Snapshot.parents` each department is a cohort of its own (nominal: its reservation beyond its teams',
borrowingLimit from its limit) under a root cohort. The capacity nobody reserves is the root cohort's own
quota (Kueue's Cohort API lets a cohort hold quota), so Kueue can lend the whole pool, as Gridlane does.
Quotas cover GPUs; CPUs and memory are only checked against what the fabric has free. Kueue has no cap
across flavors, so team-wide (fabric_id None) quotas are not read.
- Within a ClusterQueue, workloads are ordered by priority, then creation time. BestEffortFIFO: a workload
  that does not fit is set aside and the next one becomes the head; it does not block the queue.
- A cycle takes the head of every ClusterQueue and tries them, those that fit without borrowing first, then
  by priority, then by age; an entry that needs preemption is skipped (tried again next cycle) when an
  earlier entry of its cohort borrowed or preempted in this cycle. Kueue runs cycles back to back, so one
  call here runs them until no head is left: the same instant, many Kueue cycles.
- Flavors in the queue's order (flavorFungibility defaults: take the first flavor where it fits, borrowing
  if need be; preempt only when no flavor fits).
- `reclaimWithinCohort: Any`, `withinClusterQueue: Never`, `borrowWithinCohort: Never`: a workload whose
  ClusterQueue is below its nominal quota, and that fits within that quota, preempts workloads of other
  ClusterQueues of the cohort that borrow, lowest priority first, then the most recently admitted; a
  candidate whose ClusterQueue has stopped borrowing is passed over; once it fits, candidates are put back
  in reverse order while it still fits (minimalPreemptions). The preemptor is admitted in the same call
  (in Kueue, once the victims have gone: a little later, never sooner).

**Slurm** (`slurm`): the multifactor priority plugin with classic fair share, and the backfill scheduler.
- https://slurm.schedmd.com/priority_multifactor.html (the factors, and its configuration example, whose
  weights and PriorityMaxAge are used here; PriorityDecayHalfLife 14 days as there)
- https://slurm.schedmd.com/classic_fair_share.html (F = 2^(-U/S); effective usage down an account tree)
- https://slurm.schedmd.com/sched_config.html and https://slurm.schedmd.com/slurm.conf.html
  (SchedulerType=sched/backfill: "lower priority jobs start if doing so does not delay the expected start
  time of any higher priority job"; bf_max_job_test=500; PreemptType=preempt/none; GrpTRES limits)

priority = 1000*age + 10000*fairshare + 1000*jobsize (+ QOS, weight 0 in that example; one partition, so its
factor is the same for all): age = min(1, wait / 14 days); fairshare = 2^(-UE/S), S the team's normalized
shares (its reservation; a department's share divides among its teams), UE its decayed GPU-seconds as a
fraction of everyone's (classic effective usage with departments as parent accounts); jobsize = the job's
GPUs / the cluster's (PriorityFavorSmall=NO). Usage decays with a half-life of 14 days; the policy keeps it
between calls, as slurmctld does, so each simulation needs a fresh one (`named("slurm")`).
Backfill as documented: jobs are walked in priority order; one that can start now on a partition (a target
fabric) without delaying any earlier job's reserved start does; one that cannot gets a reservation at its
earliest start (from running jobs' time limits), which later jobs must not delay. The whole time limit is
looked at (bf_window set at least as long as the longest time limit, as the docs advise). Team limits are
GrpTRES: a job over one waits (AssocGrpGRES) and reserves nothing. No preemption (preempt/none), and no team
floor: Slurm has no reservation in Gridlane's sense, so its "reservation violations" are counted as for
everyone (`reservation_violations`): a cycle's team with pending work that would fit in its unused
reservation, and that was not started.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from scheduler.ledger import Amount, Ledger, add, amount, fits, need_on, sub
from scheduler.model import QOS, UNLIMITED, Admit, Decisions, Job, Preempt, Snapshot, Waiting
from scheduler.reasons import Reason

PEERS = ("kueue", "slurm")
Policy = Callable[[Snapshot], Decisions]


def named(name: str) -> Policy:
    """A fresh policy by name (Slurm's keeps its decayed usage from one call to the next)."""
    if name == "kueue":
        return kueue
    if name == "slurm":
        return Slurm()
    raise ValueError(f"unknown peer {name!r}; have {', '.join(PEERS)}")


def reservation_violations(snapshot: Snapshot, decisions: Decisions) -> int:
    """Teams with pending work, not admitted in this cycle, that fits within the team's unused reservation on
    one of its queue's fabrics it may run on (its GPU models only) once the cycle's decisions are applied:
    counted the same way for every policy."""
    ledger = Ledger(snapshot)
    running = {j.id: j for j in snapshot.running}
    for p in decisions.preempt:
        job = running.get(p.job_id)
        if job is not None and job.fabric_id is not None:
            ledger.give(job, job.fabric_id, need_on(job, ledger.sharing[job.fabric_id]))
    admitted = {a.job_id: a.fabric_id for a in decisions.admit}
    for job in snapshot.pending:
        fid = admitted.get(job.id)
        if fid is not None:
            ledger.take(job, fid, need_on(job, ledger.sharing[fid]))
    short: set[int] = set()
    for job in snapshot.pending:
        if job.id in admitted or job.group_id in short:
            continue
        for fid in _targets(snapshot, job):
            if fid in ledger.sharing and ledger.within_reservation(
                job.group_id, fid, need_on(job, ledger.sharing[fid])
            ):
                short.add(job.group_id)
                break
    return len(short)


def _targets(snapshot: Snapshot, job: Job) -> tuple[int, ...]:
    queue = snapshot.queues.get(job.queue_id)
    if queue is None:
        return ()
    fids = queue.fabric_ids if job.only_on is None else tuple(f for f in queue.fabric_ids if f in job.only_on)
    return tuple(f for f in fids if f in snapshot.fabrics and snapshot.fabrics[f].healthy)


# -- Kueue ------------------------------------------------------------------------------------------------
FIT, PREEMPT, NO_FIT = 0, 1, 2


class _Tree:
    """One flavor's quota tree: ClusterQueues (teams) under cohorts (departments) under the root cohort.
    GPUs (milli) only; `used` is per node, summed up the tree."""

    def __init__(self, snapshot: Snapshot, fid: int, teams: set[int]) -> None:
        self.parent: dict[int | str, int | str] = {}
        self.quota: dict[int | str, int] = {}  # a node's subtree quota: its own plus its children's
        self.borrow: dict[int | str, int | None] = {}  # borrowingLimit; None: no limit
        self.used: defaultdict[int | str, int] = defaultdict(int)
        parents = snapshot.parents
        departments = {parents[g] for g in teams if g in parents}
        for node in [*teams, *departments]:
            q = snapshot.quotas.get((node, fid))
            reserved = q.reservation.gpus_milli if q else 0
            limit = q.limit.gpus_milli if q else UNLIMITED
            self.quota[node] = reserved
            self.borrow[node] = None if limit >= UNLIMITED else max(0, limit - reserved)
            self.parent[node] = parents.get(node, "root") if node in teams else "root"
        for d in departments:  # a department's own quota: its reservation beyond what its teams reserve
            own = max(0, self.quota[d] - sum(self.quota[g] for g in teams if parents.get(g) == d))
            self.quota[d] = own + sum(self.quota[g] for g in teams if parents.get(g) == d)
        capacity = snapshot.fabrics[fid].capacity.gpus_milli
        top = sum(self.quota[n] for n, p in self.parent.items() if p == "root")
        self.quota["root"] = max(capacity, top)  # the unreserved capacity is the root cohort's own quota
        self.borrow["root"] = 0
        self.nominal = {g: self.quota[g] for g in teams}

    def path(self, team: int) -> list[int | str]:
        out: list[int | str] = [team]
        while out[-1] != "root":
            out.append(self.parent[out[-1]])
        return out

    def move(self, team: int, gpus: int) -> None:
        for node in self.path(team):
            self.used[node] += gpus

    def fits(self, team: int, gpus: int, borrowing: bool) -> bool:
        """Within quota at every level: the ClusterQueue's nominal (plus its borrowingLimit when it may
        borrow), and each cohort's quota plus what it may borrow from above."""
        if not borrowing and self.used[team] + gpus > self.nominal[team]:
            return False
        for node in self.path(team):
            limit = self.borrow[node]
            if limit is not None and self.used[node] + gpus > self.quota[node] + limit:
                return False
        return True

    def borrows(self, team: int) -> bool:
        return self.used[team] > self.nominal[team]


def kueue(snapshot: Snapshot) -> Decisions:
    return _Kueue(snapshot).run()


class _Kueue:
    def __init__(self, snapshot: Snapshot) -> None:
        self.s = snapshot
        self.free = {fid: amount(f.capacity) for fid, f in snapshot.fabrics.items()}
        teams = {j.group_id for j in (*snapshot.pending, *snapshot.running)}
        self.trees = {fid: _Tree(snapshot, fid, teams) for fid in snapshot.fabrics}
        self.active: dict[int, list[Job]] = defaultdict(list)  # fabric -> admitted workloads
        for job in snapshot.running:
            if job.fabric_id in self.trees:
                self._take(job, job.fabric_id)
        self.admitted: list[Admit] = []
        self.preempted: list[Preempt] = []
        self.waiting: dict[str, Reason] = {}

    def run(self) -> Decisions:
        # 1. The ClusterQueues: each team's pending work by priority, then creation time.
        now = self.s.now
        queues: defaultdict[int, list[Job]] = defaultdict(list)
        for job in sorted(self.s.pending, key=lambda j: (-QOS.get(j.priority, 1), j.submitted_at or now, j.id)):
            queues[job.group_id].append(job)
        heads = {g: 0 for g in queues}
        # 2. Cycles back to back until every head has been admitted or set aside (BestEffortFIFO).
        while heads:
            entries = []
            for g, i in heads.items():
                job = queues[g][i]
                fid, mode, borrows = self._assign(job)
                entries.append((borrows, -QOS.get(job.priority, 1), job.submitted_at or self.s.now, job.id, job))
            entries.sort(key=lambda e: e[:4])
            used_cohorts: set[int | str] = set()  # cohorts where an entry borrowed or preempted this cycle
            for *_, job in entries:
                g = job.group_id
                fid, mode, borrows = self._assign(job)  # earlier entries of this cycle may have changed it
                cohort = self._cohort(g, fid)
                done = True
                if mode == FIT and fid is not None:
                    self._admit(job, fid)
                    if borrows:
                        used_cohorts.add(cohort)
                elif mode == PREEMPT and fid is not None:
                    if cohort in used_cohorts:
                        done = False  # "other workloads in the cohort were prioritized": next cycle
                    elif self._reclaim(job, fid):
                        self._admit(job, fid)
                        used_cohorts.add(cohort)
                    else:
                        self.waiting[job.id] = Reason("kueue_no_fit", "no candidates to preempt within the cohort")
                else:
                    self.waiting[job.id] = Reason("kueue_no_fit", "insufficient quota in the ClusterQueue and cohort")
                if done:
                    heads[g] += 1
                    if heads[g] == len(queues[g]):
                        del heads[g]
        waiting = tuple(Waiting(j.id, self.waiting[j.id]) for j in self.s.pending if j.id in self.waiting)
        return Decisions(admit=tuple(self.admitted), waiting=waiting, preempt=tuple(self.preempted))

    def _cohort(self, team: int, fid: int | None) -> int | str:
        return "root" if fid is None else self.trees[fid].path(team)[1]

    def _assign(self, job: Job) -> tuple[int | None, int, bool]:
        """The flavor (fabric) for the job and the mode: the first where it fits, borrowing if need be; else
        the first where it would fit within its ClusterQueue's nominal quota by preempting borrowers."""
        preempt_on = None
        for fid in _targets(self.s, job):
            need = need_on(job, self.s.fabrics[fid].gpu_sharing)
            tree = self.trees[fid]
            if fits(need, self.free[fid]) and tree.fits(job.group_id, need[0], borrowing=True):
                return fid, FIT, tree.used[job.group_id] + need[0] > tree.nominal[job.group_id]
            if preempt_on is None and tree.used[job.group_id] + need[0] <= tree.nominal[job.group_id]:
                preempt_on = fid
        return (preempt_on, PREEMPT, False) if preempt_on is not None else (None, NO_FIT, False)

    def _reclaim(self, job: Job, fid: int) -> bool:
        """reclaimWithinCohort: Any. Preempt borrowing workloads of other ClusterQueues of the cohort so that the
        job fits without borrowing; True when it then fits (the victims are recorded)."""
        tree = self.trees[fid]
        g = job.group_id
        need = need_on(job, self.s.fabrics[fid].gpu_sharing)
        if tree.used[g] >= tree.nominal[g]:
            return False  # only a ClusterQueue below its nominal quota reclaims
        # Running work of every other ClusterQueue of the cohort tree that borrows (all teams share the root
        # cohort); work admitted in this same call has not started yet, so it is not a candidate.
        candidates = [
            j for j in self.active[fid] if j.group_id != g and j.fabric_id is not None and tree.borrows(j.group_id)
        ]
        epoch = datetime.min.replace(tzinfo=self.s.now.tzinfo)
        candidates.sort(
            key=lambda j: (QOS.get(j.priority, 1), -((j.started_at or self.s.now) - epoch).total_seconds(), j.id)
        )
        targets: list[Job] = []
        fitted = False
        for victim in candidates:
            if not tree.borrows(victim.group_id):
                continue  # its ClusterQueue no longer borrows
            self._give(victim, fid)
            targets.append(victim)
            if self._fits_nominal(job, fid, need):
                fitted = True
                break
        if not fitted:
            for victim in targets:
                self._take(victim, fid)
            return False
        for victim in reversed(targets[:-1]):  # put back what is not needed, in reverse order
            self._take(victim, fid)
            if self._fits_nominal(job, fid, need):
                targets.remove(victim)
            else:
                self._give(victim, fid)
        for victim in targets:
            self.preempted.append(Preempt(victim.id, Reason("kueue_preempted", "InCohortReclamation")))
        return True

    def _fits_nominal(self, job: Job, fid: int, need: Amount) -> bool:
        return fits(need, self.free[fid]) and self.trees[fid].fits(job.group_id, need[0], borrowing=False)

    def _admit(self, job: Job, fid: int) -> None:
        self._take(job, fid)
        self.admitted.append(Admit(job.id, fid))

    def _take(self, job: Job, fid: int) -> None:
        need = need_on(job, self.s.fabrics[fid].gpu_sharing)
        self.free[fid] = sub(self.free[fid], need)
        self.trees[fid].move(job.group_id, need[0])
        self.active[fid].append(job)

    def _give(self, job: Job, fid: int) -> None:
        need = need_on(job, self.s.fabrics[fid].gpu_sharing)
        self.free[fid] = (self.free[fid][0] + need[0], self.free[fid][1] + need[1], self.free[fid][2] + need[2])
        self.trees[fid].move(job.group_id, -need[0])
        self.active[fid].remove(job)


# -- Slurm ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class SlurmConfig:
    """slurm.conf as in the multifactor plugin's configuration example (PriorityWeightQOS=0 there)."""

    weight_age: float = 1000
    weight_fairshare: float = 10000
    weight_jobsize: float = 1000
    weight_qos: float = 0
    max_age_s: float = 14 * 86400  # PriorityMaxAge=14-0
    decay_half_life_s: float = 14 * 86400  # PriorityDecayHalfLife=14-0
    bf_max_job_test: int = 500


def fairshare_factor(effective_usage: float, shares: float) -> float:
    """Classic fair share: 2^(-UE/S); a team with no shares gets 0."""
    return 0.0 if shares <= 0 else math.pow(2.0, -effective_usage / shares)


@dataclass
class Slurm:
    """slurmctld in miniature: decayed usage per team kept between calls, multifactor priority, backfill."""

    config: SlurmConfig = field(default_factory=SlurmConfig)
    usage: dict[int, float] = field(default_factory=dict)  # team -> decayed GPU-seconds
    last: datetime | None = None
    holding: dict[int, int] = field(default_factory=dict)  # team -> GPUs (milli) held after the last call

    def __call__(self, snapshot: Snapshot) -> Decisions:
        # 1. Usage: decay what was, and charge what each team held since the last call.
        self._charge(snapshot.now)
        # 2. Priority order (ties: submit time, then id).
        line = sorted(snapshot.pending, key=self._key(snapshot))
        # 3. Backfill over a time profile per partition.
        decisions = _Backfill(snapshot, self.config.bf_max_job_test).run(line)
        held: defaultdict[int, int] = defaultdict(int)
        gone = {p.job_id for p in decisions.preempt}
        pending = {j.id: j for j in snapshot.pending}
        for job in snapshot.running:
            if job.id not in gone:
                held[job.group_id] += job.total.gpus_milli
        for a in decisions.admit:
            held[pending[a.job_id].group_id] += pending[a.job_id].total.gpus_milli
        self.holding = dict(held)
        return decisions

    def _charge(self, now: datetime) -> None:
        if self.last is not None:
            dt = max(0.0, (now - self.last).total_seconds())
            decay = math.pow(0.5, dt / self.config.decay_half_life_s)
            for g in set(self.usage) | set(self.holding):
                self.usage[g] = self.usage.get(g, 0.0) * decay + self.holding.get(g, 0) / 1000 * dt
        self.last = now

    def priorities(self, snapshot: Snapshot) -> dict[str, float]:
        """Each pending job's multifactor priority (what `sprio` shows)."""
        key = self._key(snapshot)
        return {j.id: -key(j)[0] for j in snapshot.pending}

    def _key(self, snapshot: Snapshot) -> Callable[[Job], tuple[float, datetime, str]]:
        c = self.config
        now = snapshot.now
        cluster = sum(f.capacity.gpus_milli for f in snapshot.fabrics.values()) or 1
        fairshare = self._fairshare(snapshot)

        def key(job: Job) -> tuple[float, datetime, str]:
            submitted = job.submitted_at or now
            age = min(1.0, max(0.0, (now - submitted).total_seconds()) / c.max_age_s)
            size = min(1.0, job.total.gpus_milli / cluster)
            qos = QOS.get(job.priority, 1) / max(QOS.values())
            p = c.weight_age * age + c.weight_fairshare * fairshare.get(job.group_id, 0.0) + c.weight_jobsize * size
            return (-(p + c.weight_qos * qos), submitted, job.id)

        return key

    def _fairshare(self, snapshot: Snapshot) -> dict[int, float]:
        """Per team: 2^(-UE/S), with departments as parent accounts (classic effective usage)."""
        teams = {j.group_id for j in (*snapshot.pending, *snapshot.running)} | set(self.usage)
        raw: defaultdict[int, float] = defaultdict(float)  # an account's shares: its reservations' GPUs
        for (g, _fid), q in snapshot.quotas.items():
            raw[g] += q.reservation.gpus_milli
        parents = snapshot.parents
        accounts = teams | {parents[g] for g in teams if g in parents}
        if not any(raw[a] for a in accounts):
            raw.update(dict.fromkeys(accounts, 1.0))  # no reservations anywhere: equal shares
        total_usage = sum(self.usage.values()) or 1.0
        usage = defaultdict(float, {g: u / total_usage for g, u in self.usage.items()})
        for g in teams:
            if g in parents:
                usage[parents[g]] += usage[g]
        top = [a for a in accounts if a not in parents or a not in teams]
        top_shares = sum(raw[a] for a in top if a not in parents) or 1.0
        out: dict[int, float] = {}
        for g in teams:
            d = parents.get(g)
            if d is None:
                out[g] = fairshare_factor(usage[g], raw[g] / top_shares)
                continue
            siblings = sum(raw[t] for t in teams if parents.get(t) == d) or 1.0
            share = raw[g] / siblings * raw[d] / top_shares
            effective = usage[g] + (usage[d] - usage[g]) * raw[g] / siblings
            out[g] = fairshare_factor(effective, share)
        return out


class _Profile:
    """Free capacity on one partition from now on: free[i] holds from times[i] until times[i + 1]."""

    def __init__(self, now: datetime, free: Amount, releases: list[tuple[datetime, Amount]]) -> None:
        self.times, self.free = [now], [free]
        for when, amount_ in sorted(releases, key=lambda r: r[0]):
            when = max(when, now)
            if when == self.times[-1]:
                self.free[-1] = add(self.free[-1], amount_)
            else:
                self.times.append(when)
                self.free.append(add(self.free[-1], amount_))

    def earliest(self, need: Amount, runtime_s: int) -> datetime | None:
        """The earliest start from which `need` stays free for the whole time limit; None if never."""
        duration = timedelta(seconds=runtime_s)
        n = len(self.times)
        for i in range(n):
            if not fits(need, self.free[i]):
                continue
            end = self.times[i] + duration
            j = i + 1
            while j < n and self.times[j] < end and fits(need, self.free[j]):
                j += 1
            if j == n or self.times[j] >= end:
                return self.times[i]
        return None

    def hold(self, start: datetime, runtime_s: int, need: Amount) -> None:
        end = start + timedelta(seconds=runtime_s)
        for point in (start, end):
            k = _bisect(self.times, point)
            if k == len(self.times) or self.times[k] != point:
                self.times.insert(k, point)
                self.free.insert(k, self.free[k - 1])
        for k in range(_bisect(self.times, start), _bisect(self.times, end)):
            self.free[k] = sub(self.free[k], need)


def _bisect(times: list[datetime], point: datetime) -> int:
    lo, hi = 0, len(times)
    while lo < hi:
        mid = (lo + hi) // 2
        if times[mid] < point:
            lo = mid + 1
        else:
            hi = mid
    return lo


class _Backfill:
    def __init__(self, snapshot: Snapshot, max_job_test: int) -> None:
        self.s = snapshot
        self.max_job_test = max_job_test
        self.ledger = Ledger(snapshot)  # for GrpTRES: the teams' (and departments') limits
        releases: defaultdict[int, list[tuple[datetime, Amount]]] = defaultdict(list)
        for job in snapshot.running:
            if job.fabric_id is not None and job.fabric_id in snapshot.fabrics:
                end = (job.started_at or snapshot.now) + timedelta(seconds=job.runtime_limit_s)
                releases[job.fabric_id].append((end, need_on(job, snapshot.fabrics[job.fabric_id].gpu_sharing)))
        self.profiles = {fid: _Profile(snapshot.now, self.ledger.free(fid), releases[fid]) for fid in snapshot.fabrics}

    def run(self, line: list[Job]) -> Decisions:
        now = self.s.now
        admitted: list[Admit] = []
        waiting: list[Waiting] = []
        # The smallest GPU request from each position on: once no partition has that free now, nothing
        # further down the line can start, and only the waiting reasons remain to be written.
        smallest = [0] * (len(line) + 1)
        smallest[len(line)] = UNLIMITED
        for i in range(len(line) - 1, -1, -1):
            smallest[i] = min(smallest[i + 1], line[i].total.gpus_milli)
        tested = 0
        for i, job in enumerate(line):
            if tested >= self.max_job_test or all(p.free[0][0] < smallest[i] for p in self.profiles.values()):
                waiting.append(Waiting(job.id, Reason("slurm_priority", "Priority")))
                continue
            tested += 1
            best: tuple[datetime, int] | None = None
            limited = False
            for fid in _targets(self.s, job):
                need = need_on(job, self.s.fabrics[fid].gpu_sharing)
                if not self.ledger.within_limits(job, fid, need, None):
                    limited = True
                    continue
                start = self.profiles[fid].earliest(need, job.runtime_limit_s)
                if start is not None and (best is None or start < best[0]):
                    best = (start, fid)
            if best is None:
                code, text = ("slurm_limit", "AssocGrpGRES") if limited else ("slurm_resources", "Resources")
                waiting.append(Waiting(job.id, Reason(code, text)))
                continue
            start, fid = best
            need = need_on(job, self.s.fabrics[fid].gpu_sharing)
            self.profiles[fid].hold(start, job.runtime_limit_s, need)  # a start now, or a reservation later
            if start == now:
                self.ledger.take(job, fid, need)
                admitted.append(Admit(job.id, fid))
            else:
                waiting.append(Waiting(job.id, Reason("slurm_resources", "Resources"), start))
        return Decisions(admit=tuple(admitted), waiting=tuple(waiting))

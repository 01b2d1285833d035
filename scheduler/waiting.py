"""The cycle's result: what was admitted and preempted, and every waiting job with its reason, its place in its
queue's line, and an estimated start.

A job waiting for capacity on a fabric is estimated from when capacity frees up there; one waiting under a
team's (or department's) limit, from when that level's running work ends; each at its runtime limit (or its
learned runtime, where the snapshot has one), in line order (estimates.py), and only for the first MAX_PER_FABRIC
of each. Other waiting work has no estimate.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime
from operator import itemgetter

from scheduler.cycle import Cycle
from scheduler.estimates import MAX_PER_FABRIC, Profile
from scheduler.ledger import Amount, need_on, sub
from scheduler.model import Decisions, Job, Waiting

LimitKey = tuple[int, int | None]  # (level, fabric or None: across fabrics)


def decisions(c: Cycle, line: list[Job]) -> Decisions:
    """Every waiting job in line order, with its reason, place and estimated start (see the module docstring)."""
    profiles: dict[int, Profile] = {}
    limit_profiles: dict[LimitKey, Profile] = {}
    under_limits: dict[LimitKey, list[tuple[datetime, Amount]]] | None = None
    places: dict[int, int] = {}
    waiting = []
    reason_of, waits_on, waits_under = c.waiting.get, c.waits_on.get, c.waits_under.get
    sharing = c.ledger.sharing
    spans, span = c.spans, c.span
    learned = bool(c.s.expected_runtimes)  # estimates take learned runtimes where the snapshot has them
    runtime_of = c.runtime_of
    for job in line:
        reason = reason_of(job.id)
        if reason is None:
            continue
        place = places[job.queue_id] = places.get(job.queue_id, 0) + 1
        fid = waits_on(job.id)
        start = None
        # A profile past its MAX_PER_FABRIC estimates gives no more (estimates.py): not asked.
        if fid is not None:
            profile = profiles.get(fid)
            if profile is None:
                profile = profiles[fid] = Profile(c.now, c.ledger.free(fid), c.releases(fid, learned))
            if profile.estimated < MAX_PER_FABRIC:
                runtime = runtime_of(job) if learned else job.runtime_limit_s
                start = profile.earliest(need_on(job, sharing[fid]), runtime, spans.get(runtime) or span(runtime))
        else:
            key = waits_under(job.id)
            if key is not None:
                profile = limit_profiles.get(key)
                if profile is None:
                    if under_limits is None:
                        under_limits = _releases_under_limits(c, learned)
                    room = sub(c.ledger.limit[key[0]][key[1]], c.ledger.used_at(*key))
                    profile = limit_profiles[key] = Profile(c.now, room, under_limits.get(key, []))
                if profile.estimated < MAX_PER_FABRIC:
                    runtime = runtime_of(job) if learned else job.runtime_limit_s
                    start = profile.earliest(
                        need_on(job, sharing[key[1]] if key[1] is not None else True),
                        runtime,
                        spans.get(runtime) or span(runtime),
                    )
        waiting.append(Waiting(job.id, reason, start, place))
    return Decisions(admit=tuple(c.admitted), waiting=tuple(waiting), preempt=tuple(c.preempted))


def _releases_under_limits(c: Cycle, learned: bool = False) -> dict[LimitKey, list[tuple[datetime, Amount]]]:
    """For each limit that work waits under, when its level's use there comes down, in time order: each of the
    level's jobs running or admitted (on that fabric, or anywhere for a limit across fabrics) at its runtime
    limit (`learned`: as Cycle.ends_at has it)."""
    by_limit: defaultdict[LimitKey, list[tuple[datetime, Amount]]] = defaultdict(list)
    asked = set(c.waits_under.values())
    gone, sharing, ends_at = c.gone, c.ledger.sharing, c.ends_at
    releases = []  # (when, what, where, whose), in time order: each limit's share of it is in order too
    for fid, jobs in c.running.items():
        for job in jobs:
            if job.id not in gone:
                releases.append((ends_at(job, learned), need_on(job, sharing[fid]), fid, job.group_id))
    for fid, admitted in c.admitted_on.items():
        for job, need in zip(admitted, c.needs_on[fid], strict=True):
            if job.id not in gone:
                releases.append((ends_at(job, learned), need, fid, job.group_id))
    releases.sort(key=itemgetter(0))
    lineage = c.ledger.lineage
    limit_key: LimitKey
    for end, need, fid, group_id in releases:
        release = (end, need)
        for level in lineage(group_id):
            limit_key = (level, fid)
            if limit_key in asked:
                by_limit[limit_key].append(release)
            limit_key = (level, None)
            if limit_key in asked:
                by_limit[limit_key].append(release)
    return by_limit

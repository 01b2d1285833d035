"""What a policy document would change, as the what-if engine predicts it over the last days of real work.

The proposed site is read with the document's changes made inside a transaction that is then undone
(portal.policy.apply.run), so the engine sees exactly what apply would leave; both sites replay the same work
(portal.whatif.history, scheduler.replay). Priority tiers are not modelled by the replay yet.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from portal.policy import apply
from portal.whatif import history
from scheduler.replay import replay

TOP = 10  # teams named among those who gain and those who lose


def plan(text: str, days: int, now: datetime) -> dict[str, Any]:
    """The plan's report, with `whatif` (None when days is 0 or nothing changes)."""
    report, proposed = apply.run(text, commit=False, observe=lambda: history.site_now(now)[0])
    report["whatif"] = None
    if days > 0 and report["changes"]:
        report["whatif"] = predicted(proposed, days, now)
    return report


def predicted(proposed: Any, days: int, now: datetime) -> dict[str, Any]:
    """Waits, utilisation and who gains or loses, under the live policy and the proposed one."""
    past = history.load(days, now)
    before = replay(past.site, past.work, past.start, past.end)
    after = replay(proposed, past.work, past.start, past.end)
    teams = sorted(set(before["teams"]) | set(after["teams"]))
    moves = []
    for slug in teams:
        was, will = before["teams"].get(slug, {}), after["teams"].get(slug, {})
        moves.append({
            "team": slug,
            "p95_wait_s": [was.get("p95_wait_s", 0.0), will.get("p95_wait_s", 0.0)],
            "gpu_hours": [was.get("gpu_hours", 0.0), will.get("gpu_hours", 0.0)],
            "slo_breaches": [was.get("slo_breaches", 0), will.get("slo_breaches", 0)],
        })  # fmt: skip
    by_wait = sorted(moves, key=lambda m: m["p95_wait_s"][1] - m["p95_wait_s"][0])
    keys = ("p50_wait_s", "p95_wait_s", "utilisation", "gpu_hours", "preemptions", "slo_breaches")
    return {
        "days": days,
        "workloads": len(past.work),
        "overall": {k: [before["overall"].get(k), after["overall"].get(k)] for k in keys},
        "gain": [m for m in by_wait if m["p95_wait_s"][1] < m["p95_wait_s"][0]][:TOP],
        "lose": [m for m in reversed(by_wait) if m["p95_wait_s"][1] > m["p95_wait_s"][0]][:TOP],
        "not_modelled": ["priority tiers", "profiles", "burst pools"],
    }

"""What validating the single submit's body costs (WorkloadIn.parse): the fast path of portal/api/fast_parse.py
against DRF's own validation of the same body by the same kept serializer, in µs of CPU per body.

The body is the submit bench's (bench/bench_submit.py JOB). The fast path must stay well under DRF's: it is the
only reason it exists (45 -> 12.5 µs when it was made). Needs no database.
"""

from __future__ import annotations

import os
import statistics
import time
from typing import Any

ROUNDS = 7
CALLS = 2000


def per_call_us(call: Any) -> float:
    """The median over ROUNDS of the process CPU time of one call, in µs (CALLS calls a round)."""
    costs = []
    for _ in range(ROUNDS):
        started = time.process_time()
        for _ in range(CALLS):
            call()
        costs.append((time.process_time() - started) / CALLS * 1e6)
    return statistics.median(costs)


def run() -> dict[str, Any]:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    import django

    django.setup()
    from bench.bench_submit import JOB
    from portal.api import fast_parse
    from portal.api.serializers import WorkloadIn, request_of

    parser = WorkloadIn()
    if fast_parse.validated(parser, JOB) is None:
        raise SystemExit("bench parse: the submit bench's body no longer takes the fast path")
    fast = per_call_us(lambda: WorkloadIn.parse(JOB))
    drf = per_call_us(lambda: request_of(parser.run_validation(JOB), JOB["resources"]))
    results = {"fast_us": round(fast, 1), "drf_us": round(drf, 1), "ratio": round(drf / fast, 2)}
    print(f"submit parse: fast path {fast:.1f} µs, DRF {drf:.1f} µs per body ({drf / fast:.1f}x), CPU medians")
    return results


if __name__ == "__main__":
    run()

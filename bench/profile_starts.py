"""Where the road from admitted to started spends its time: cProfile over the worker's steps for one burst.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/gridlane .venv/bin/python -m bench.profile_starts [local|agents] [N]

Submits N workloads (default 1,000) in one bulk through the service, then runs in this process, each timed and
profiled on its own with the statements it sent: the admission (tasks.admit), the dispatch (tasks.dispatch:
on the local fabric, preparing the jobs and starting their supervisors; on the agent fabric, making them
claimable), for agents the claims a host with free slots takes (services.try_claim_many, as the claim endpoint
runs it), and the syncs that record the starts (tasks.sync_fabrics, until every one has started). This is how
the local fabric's one Python start-up per job, the agent's one round trip per claim and the sync's transaction
per start were found.
"""

from __future__ import annotations

import cProfile
import io
import pstats
import sys
import tempfile
import time
from decimal import Decimal
from typing import Any

from bench.bench_scheduler import django_setup


def profiled(what: str, step: Any, top: int = 25) -> Any:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    profile = cProfile.Profile()
    with CaptureQueriesContext(connection) as queries:
        started = time.perf_counter()
        profile.enable()
        result = step()
        profile.disable()
        seconds = time.perf_counter() - started
    print(f"\n=== {what}: {seconds:.3f} s, {len(queries.captured_queries)} statements -> {result}")
    out = io.StringIO()
    pstats.Stats(profile, stream=out).sort_stats("cumulative").print_stats(top)
    print(out.getvalue()[-6000:])
    return result


def main(argv: list[str]) -> int:
    fabric = argv[0] if argv else "local"
    n = int(argv[1]) if len(argv) > 1 else 1000
    django_setup()
    from django.contrib.auth import get_user_model

    from bench.bench_starts import cast
    from portal.agents import services as agents
    from portal.queues.models import Fabric
    from portal.worker import tasks
    from portal.workloads import services
    from portal.workloads.models import Workload

    with tempfile.TemporaryDirectory() as work:
        cast(work)
        alice = get_user_model().objects.get(username="alice")
        req = services.SubmitRequest(queue=fabric, kind="batch", name="burst", command="true", gpus=Decimal(0),
                                     cpus=Decimal("0.001"), memory_gb=Decimal("0.01"))  # fmt: skip
        services.submit_many(alice, [(req, None)] * n)
        host = None
        if fabric == "agents":
            facts = {"queues": ["agents"], "gpus": 0, "cpus": 2, "memory_mib": 10**6}
            host = agents.register(Fabric.objects.get(name="hosts"), "profile-1", facts)
        profiled("admit", tasks.admit)
        profiled("dispatch", tasks.dispatch)
        if host is not None:
            profiled(
                "claims, 4 of 256", lambda: sum(len(agents.try_claim_many(host, ["agents"], 256)) for _ in range(4))
            )
        rounds = 0
        while Workload.objects.filter(name="burst", started_at__isnull=True).exists() and rounds < 20:
            rounds += 1
            profiled(f"sync {rounds}", tasks.sync_fabrics)
            time.sleep(0.5)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

"""Liveness and readiness, for probes and for IT.

- /healthz: the process answers (no database, nothing else): a liveness probe restarts what fails it.
- /readyz: the database answers, the worker's last cycle is recent (stale past GRIDLANE_WORKER_STALE_CYCLES
  cycles), and when each fabric last answered. JSON with each check's detail; 200 when the database and the
  worker are fine, else 503. A fabric that does not answer is reported but does not make the portal unready:
  the portal still takes work for the other fabrics, and a probe that pulled every web process out of service
  over one cluster would lock everyone out. `?check=database` asks only for the database (the web
  processes' readiness probe: a web process can serve whatever state the worker is in).
- The checks' detail (fabric names, database errors) goes only to IT's networks or the scrape token
  (portal.ops_access); anyone else gets `{"ready": true|false}` with the same status code.

The same facts are Prometheus gauges on /metrics (portal.metrics).
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import DatabaseError, connection
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone

from portal import ops_access
from portal.queues.models import Fabric
from portal.worker import capacity
from portal.worker.models import WorkerStats

LAST_CYCLE = "last_cycle_at"  # the worker's gauge: when its last periodic cycle ended (Unix time)


@dataclass
class Facts:
    database: bool
    database_detail: str = ""
    worker_age_s: float | None = None  # seconds since the worker's last cycle; None: never, or unknown
    worker_stale_after_s: float = 0.0
    fabrics: list[dict[str, Any]] = field(default_factory=list)

    @property
    def worker(self) -> bool:
        return self.worker_age_s is not None and self.worker_age_s <= self.worker_stale_after_s

    @property
    def ready(self) -> bool:
        return self.database and self.worker


def stale_after_s() -> float:
    return max(settings.GRIDLANE_WORKER_STALE_CYCLES * settings.GRIDLANE_CYCLE_SECONDS, 30.0)


def gather() -> Facts:
    """What readiness and /metrics report; a database that does not answer leaves the rest unknown."""
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
        last = WorkerStats.objects.filter(name=LAST_CYCLE).values_list("value", flat=True).first()
        rows = list(Fabric.objects.filter(enabled=True).order_by("name"))
    except DatabaseError as error:
        with contextlib.suppress(DatabaseError):  # dead already
            connection.close()
        return Facts(database=False, database_detail=str(error).strip()[:300], worker_stale_after_s=stale_after_s())
    now = timezone.now()
    fabrics = [
        {
            "name": row.name,
            "kind": row.kind,
            "ok": row.healthy and capacity.fresh(row, now),
            "last_contact": row.observed_at.isoformat() if row.observed_at else None,
            "age_s": round((now - row.observed_at).total_seconds(), 1) if row.observed_at else None,
            "detail": row.health_detail or row.observed_detail,
        }
        for row in rows
    ]
    age = None if last is None else round(max(0.0, time.time() - last), 1)
    return Facts(database=True, worker_age_s=age, worker_stale_after_s=stale_after_s(), fabrics=fabrics)


def healthz(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok", content_type="text/plain")


def readyz(request: HttpRequest) -> HttpResponse:
    facts = gather()
    checks: dict[str, Any] = {"database": {"ok": facts.database, "detail": facts.database_detail}}
    ready = facts.database if request.GET.get("check") == "database" else facts.ready
    if not ops_access.allowed(request):  # a probe: the status code, nothing more
        return JsonResponse({"ready": ready}, status=200 if ready else 503)
    if request.GET.get("check") == "database":
        return JsonResponse({"ready": facts.database, "checks": checks}, status=200 if facts.database else 503)
    checks["worker"] = {
        "ok": facts.worker,
        "last_cycle_age_s": facts.worker_age_s,
        "stale_after_s": facts.worker_stale_after_s,
    }
    checks["fabrics"] = {f["name"]: {k: v for k, v in f.items() if k != "name"} for f in facts.fabrics}
    return JsonResponse({"ready": facts.ready, "checks": checks}, status=200 if facts.ready else 503)

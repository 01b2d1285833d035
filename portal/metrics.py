"""GET /metrics for Prometheus: read at scrape time from the database (the worker counts, the web serves).
Only for IT's networks or the scrape token (portal.ops_access); 403 for anyone else."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from django.db.models import Count
from django.http import HttpRequest, HttpResponse, JsonResponse
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import CollectorRegistry, CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector

from portal import health, ops_access
from portal.accounts.models import ResourceGroup
from portal.objectives.burn import WINDOWS
from portal.objectives.models import WaitObjective
from portal.worker.models import WaitBucket, WorkerStats
from portal.workloads.models import Workload
from portal.workloads.states import State


class GridlaneCollector(Collector):
    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily | HistogramMetricFamily]:
        workloads = GaugeMetricFamily(
            "gridlane_workloads", "Workloads by state, queue and team (live states only).",
            labels=["state", "queue", "group"],
        )  # fmt: skip
        live = [State.PENDING, State.ADMITTED, State.DISPATCHING, State.RUNNING, State.CANCELLING, State.PREEMPTED]
        rows = (
            Workload.objects.filter(state__in=live)
            .values_list("state", "queue__slug", "group__slug")
            .annotate(n=Count("pk"))
            .order_by()
        )
        for state, queue, group, n in rows:
            workloads.add_metric([state, queue, group], n)
        yield workloads

        counters = dict(WorkerStats.objects.values_list("name", "value"))
        for name, help_text in (
            ("cycles", "Scheduling cycles run."),
            ("admissions", "Workloads admitted by the scheduler."),
            ("preemptions", "Workloads preempted to give reservations back."),
            ("cycle_seconds", "Seconds spent in scheduling cycles."),
        ):
            yield CounterMetricFamily(f"gridlane_{name}", help_text, value=counters.get(name, 0.0))
        samples = CounterMetricFamily(
            "gridlane_usage_samples", "GPU samples from jobs' samplers that were refused, by why.", labels=["outcome"]
        )
        for outcome in ("limited", "rejected", "refused", "unknown"):
            samples.add_metric([outcome], counters.get(f"usage_samples_{outcome}", 0.0))
        yield samples
        yield GaugeMetricFamily(
            "gridlane_last_cycle_seconds", "Duration of the last cycle.", value=counters.get("last_cycle_seconds", 0.0)
        )

        wait = HistogramMetricFamily(
            "gridlane_queue_wait_seconds", "Time from submit to start, per team.", labels=["group"]
        )
        slugs = dict(ResourceGroup.objects.values_list("pk", "slug"))
        per_group: defaultdict[int, list[WaitBucket]] = defaultdict(list)
        for bucket in WaitBucket.objects.order_by("group_id", "le"):
            per_group[bucket.group_id].append(bucket)
        for group_id, buckets in per_group.items():
            cumulative, total, points = 0, 0.0, []
            for b in buckets:
                cumulative += b.count
                total += b.total_seconds
                points.append(("+Inf" if b.le == float("inf") else f"{b.le:g}", cumulative))
            if points[-1][0] != "+Inf":
                points.append(("+Inf", cumulative))
            wait.add_metric([slugs.get(group_id, str(group_id))], points, total)
        yield wait
        yield from objective_metrics()


def objective_metrics() -> Iterator[GaugeMetricFamily]:
    """Each enabled wait objective's last evaluation (portal.objectives.evaluate, after each rollup): the burn
    rate of each alert window, each alert's threshold, the error budget left and the objective's wait. The
    alert rules in deploy/prometheus/ compare them as the worker does (one query)."""
    burn = GaugeMetricFamily(
        "gridlane_wait_objective_burn_rate",
        "Share of a wait objective's work that waited too long in the window, over its error budget.",
        labels=["objective", "window"],
    )
    threshold = GaugeMetricFamily(
        "gridlane_wait_objective_burn_threshold",
        "The burn rate at which the alert fires when its long and short windows both reach it.",
        labels=["objective", "alert"],
    )
    left = GaugeMetricFamily(
        "gridlane_wait_objective_error_budget_remaining",
        "Share of the error budget left over the objective's days (1 untouched, 0 spent, below 0 overspent).",
        labels=["objective"],
    )
    wait = GaugeMetricFamily(
        "gridlane_wait_objective_wait_seconds",
        "The objective's percentile wait over its days (e.g. p95), estimated from the wait slices.",
        labels=["objective"],
    )
    for slug, status in WaitObjective.objects.filter(enabled=True).exclude(status={}).values_list("slug", "status"):
        for window in WINDOWS:
            burn.add_metric([slug, window], float(status.get("burn", {}).get(window, 0.0)))
        for alert, value in status.get("thresholds", {}).items():
            threshold.add_metric([slug, alert], float(value))
        left.add_metric([slug], float(status.get("budget_remaining", 1.0)))
        if status.get("wait_s") is not None:
            wait.add_metric([slug], float(status["wait_s"]))
    yield from (burn, threshold, left, wait)


class HealthCollector(Collector):
    """/readyz's facts as gauges: alert on gridlane_ready == 0, on a worker cycle older than a few periods,
    and on a fabric that has not answered."""

    def __init__(self, facts: health.Facts) -> None:
        self.facts = facts

    def collect(self) -> Iterator[GaugeMetricFamily]:
        facts = self.facts
        yield GaugeMetricFamily("gridlane_ready", "1 when the database and the worker are fine.", value=facts.ready)
        yield GaugeMetricFamily("gridlane_database_up", "1 when the database answers.", value=facts.database)
        if facts.database:
            yield GaugeMetricFamily(
                "gridlane_worker_up", "1 when the worker's last cycle is recent.", value=facts.worker
            )
            age = facts.worker_age_s
            yield GaugeMetricFamily(
                "gridlane_worker_last_cycle_age_seconds",
                "Seconds since the worker's last periodic cycle (+Inf: none yet).",
                value=float("inf") if age is None else age,
            )
        up = GaugeMetricFamily("gridlane_fabric_up", "1 when the fabric answered recently.", labels=["fabric"])
        since = GaugeMetricFamily(
            "gridlane_fabric_last_contact_age_seconds",
            "Seconds since the fabric last answered (+Inf: never).",
            labels=["fabric"],
        )
        for fabric in facts.fabrics:
            up.add_metric([fabric["name"]], float(fabric["ok"]))
            since.add_metric([fabric["name"]], float("inf") if fabric["age_s"] is None else fabric["age_s"])
        yield up
        yield since


def metrics(request: HttpRequest) -> HttpResponse:
    if not ops_access.allowed(request):
        words = "Metrics answer only from IT's networks (GRIDLANE_OPS_NETWORKS) or with the scrape token."
        return JsonResponse({"errors": {"authorization": [words]}}, status=403)
    facts = health.gather()
    registry = CollectorRegistry()
    registry.register(HealthCollector(facts))
    if facts.database:  # the rest is read from it
        registry.register(GridlaneCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)

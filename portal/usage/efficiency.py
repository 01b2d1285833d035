"""How a workload used what it held, for its owner (and its team's leads, and IT): the efficiency page and
`gridlane stats`, as HPC users know them from `seff` and `jobstats`.

Everything comes from the workload's samples, grouped in the database per idle window (never a scan of raw
samples in Python): per GPU (node and index) the average utilisation and the peak memory of each window;
for the job as a whole the window's average GPU utilisation, its idle share (GPU by GPU where the sampler
read GPU by GPU, portal.usage.rollup), its CPU utilisation where measured, and its peak host memory. A week of
an 8-GPU job at 30-minute windows is 336 windows x 8 GPUs: one query for the GPUs and the windows together
(a UNION), one for the actions taken (its events), on top of the workload's own row (with its sampler's start),
whatever the number of samples: three in all (four for a job on several nodes of Slurm or PBS: which of its
nodes sent readings, portal.usage.unread, whose words name those that sent none). When a workload finishes,
the worker keeps its summary (`keep_summaries`, UsageSummary), which its page shows once its samples are pruned.

Time held: from its start to its end (or now). Time used: the held time of its windows that were not idle;
windows without samples are unknown, neither used nor idle. An idle spell is a run of idle windows. The
sampler's start, for a native job (SamplerStart), says why its use is unknown when it could not start.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection
from django.db.models import (
    Avg,
    Case,
    DateTimeField,
    Exists,
    F,
    FloatField,
    IntegerField,
    Max,
    OuterRef,
    Subquery,
    Sum,
    Value,
    When,
)
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast, Extract, ExtractHour, ExtractMinute, Floor, NullIf, TruncDay

from portal.usage import gpu_windows
from portal.usage.models import SamplerStart, UsageGpuSample, UsageGpuWindow, UsageSample, UsageSummary
from portal.usage.samples import CPU_IDLE_BELOW, IDLE_BELOW
from portal.usage.unread import unread
from portal.workloads.models import Workload, WorkloadEvent

MAX_WINDOWS = 2 * 24 * 31  # a month of half-hour windows drawn at most; a longer run shows its last month


@dataclass(frozen=True)
class GpuSeries:
    node: str
    gpu: int
    at: list[datetime]
    utilisation: list[float | None]
    memory_mib: list[int | None]

    @property
    def label(self) -> str:
        return f"{self.node} GPU {self.gpu}" if self.node else f"GPU {self.gpu}"


@dataclass(frozen=True)
class Window:
    at: datetime
    gpu_utilisation: float | None
    idle_share: float | None  # of its GPUs read idle, where read GPU by GPU
    cpu_utilisation: float | None
    memory_mib: int | None

    @property
    def idle(self) -> bool | None:
        """Idle by the seed's rule: GPUs (one by one where known: most of them) and CPUs under their thresholds.
        A CPU-only job is judged on its CPUs. None: nothing read."""
        cpus_idle = None if self.cpu_utilisation is None else self.cpu_utilisation < CPU_IDLE_BELOW
        if cpus_idle is False:
            return False
        if self.gpu_utilisation is None:
            return cpus_idle
        if self.idle_share is not None:
            return self.idle_share >= 0.5
        return self.gpu_utilisation < IDLE_BELOW


@dataclass
class Efficiency:
    workload: Workload
    now: datetime
    window: timedelta
    gpus: list[GpuSeries] = field(default_factory=list)
    windows: list[Window] = field(default_factory=list)
    actions: list[WorkloadEvent] = field(default_factory=list)
    sampler_started: bool | None = None
    sampler_reason: str = ""
    kept: dict[str, Any] | None = None  # its summary, kept when it finished (UsageSummary)
    unread: list[str] = field(default_factory=list)  # its nodes that sent no reading, and why (portal.usage.unread)

    @property
    def ended(self) -> datetime:
        return self.workload.finished_at or self.now

    @property
    def held_s(self) -> float:
        started = self.workload.started_at
        return max(0.0, (self.ended - started).total_seconds()) if started else 0.0

    def _seconds(self, pick: Any) -> float:
        started = self.workload.started_at
        if started is None:
            return 0.0
        total = 0.0
        for w in self.windows:
            if pick(w):
                low, high = max(w.at, started), min(w.at + self.window, self.ended)
                total += max(0.0, (high - low).total_seconds())
        return total

    @property
    def used_s(self) -> float:
        return self._seconds(lambda w: w.idle is False)

    @property
    def idle_s(self) -> float:
        return self._seconds(lambda w: w.idle is True)

    @property
    def unknown_s(self) -> float:
        return max(0.0, self.held_s - self.used_s - self.idle_s)

    def idle_spells(self) -> list[tuple[datetime, datetime]]:
        """Runs of idle windows, each as (from, to), clipped to the time it held its GPUs."""
        spells: list[tuple[datetime, datetime]] = []
        started = self.workload.started_at or self.now
        for w in self.windows:
            if w.idle is not True:
                continue
            low, high = max(w.at, started), min(w.at + self.window, self.ended)
            if spells and spells[-1][1] >= low:
                spells[-1] = (spells[-1][0], high)
            else:
                spells.append((low, high))
        return spells

    def summary(self) -> dict[str, Any]:
        """The figures as plain data (the API's answer, the CLI's table, and the page's numbers); once its samples
        are pruned, the summary kept when it finished."""
        if self.kept is not None and not self.windows and not self.gpus:
            return self.kept
        w = self.workload
        gpu_known = [x.gpu_utilisation for x in self.windows if x.gpu_utilisation is not None]
        cpu_known = [x.cpu_utilisation for x in self.windows if x.cpu_utilisation is not None]
        memory = [x.memory_mib for x in self.windows if x.memory_mib is not None]
        per_gpu = [
            {
                "node": s.node,
                "gpu": s.gpu,
                "utilisation_percent": _mean([u for u in s.utilisation if u is not None]),
                "peak_memory_mib": max([m for m in s.memory_mib if m is not None], default=None),
                "idle": _gpu_idle(s),
            }
            for s in self.gpus
        ]
        return {
            "id": str(w.pk),
            "name": w.name,
            "state": w.state,
            "gpus_held": w.gpus_milli * w.nodes / 1000,
            "nodes": w.nodes,
            "held_seconds": round(self.held_s),
            "used_seconds": round(self.used_s),
            "idle_seconds": round(self.idle_s),
            "unknown_seconds": round(self.unknown_s),
            "gpu_utilisation_percent": _mean(gpu_known),
            "gpus_idle": sum(1 for g in per_gpu if g["idle"] is True),
            "cpu_efficiency_percent": _mean(cpu_known),
            "peak_memory_mib": max(memory, default=None),
            "memory_requested_mib": w.memory_mib * w.nodes,
            "per_gpu": per_gpu,
            "idle_spells": [{"from": a.isoformat(), "to": b.isoformat()} for a, b in self.idle_spells()],
            "actions": [{"at": e.at.isoformat(), "state": e.to_state, "reason": e.reason} for e in self.actions],
            "sampler": None
            if self.sampler_started is None
            else {"started": self.sampler_started, "reason": self.sampler_reason},
            "why_unknown": self.why_unknown(),
            "nodes_unread": self.unread,
        }

    def why_unknown(self) -> str:
        """Why the use is not known, when it is not ("" when some of it is)."""
        if any(x.gpu_utilisation is not None for x in self.windows):
            return ""
        if self.sampler_started is False and self.sampler_reason:
            return f"the sampler could not start: {self.sampler_reason}"
        if self.workload.gpus_milli == 0:
            return "it holds no GPU"
        return "no sample of its GPUs has arrived"


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 1) if values else None


def _gpu_idle(series: GpuSeries) -> bool | None:
    known = [u for u in series.utilisation if u is not None]
    return None if not known else sum(known) / len(known) < IDLE_BELOW


def with_sampler(queryset: Any) -> Any:
    """The workloads with their sampler's start (native jobs) and their fabric's kind and agent fabric (whose
    agents read a PBS fabric's jobs) annotated: no query of its own."""
    starts = SamplerStart.objects.filter(workload=OuterRef("pk"))
    kept = UsageSummary.objects.filter(workload=OuterRef("pk"))
    return queryset.annotate(
        fabric_kind=F("fabric__kind"),
        agent_fabric=KeyTextTransform("agent_fabric", "fabric__settings"),
        sampler_started=Subquery(starts.values("started")[:1]),
        sampler_reason=Subquery(starts.values("reason")[:1]),
        kept_summary=Subquery(kept.values("data")[:1]),
    )


def efficiency(w: Workload, now: datetime, window: timedelta) -> Efficiency:
    """The workload's efficiency: two queries (its GPUs and its own readings per window; its events), and one for
    a job on several nodes of Slurm or PBS (which of them sent readings)."""
    found = Efficiency(w, now, window)
    found.sampler_started = getattr(w, "sampler_started", None)
    found.sampler_reason = getattr(w, "sampler_reason", None) or ""
    found.kept = getattr(w, "kept_summary", None)
    if w.started_at is None:
        found.actions = list(w.events.order_by("at", "pk"))
        return found
    since = max(w.started_at, found.ended - window * MAX_WINDOWS)
    begins = _window_start(since, window)
    found.gpus, found.windows = _series(w, begins, found.ended + window, window)
    found.actions = list(w.events.exclude(reason="").order_by("at", "pk"))
    found.unread = unread(w)
    return found


def _window_start(at: datetime, window: timedelta) -> datetime:
    day = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return day + ((at - day) // window) * window


EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _day_and_slot(window: timedelta, field: str = "at") -> tuple[Any, Any]:
    """The grouping of a row's `at` into its window: the window's day and number within the day. Where the window
    divides a day (windows never straddle midnight) and the database is PostgreSQL, one cheap expression, the
    window's number since the epoch (day: the epoch), instead of three time-zone conversions a row; the same
    windows either way."""
    seconds = int(window.total_seconds())
    if connection.vendor == "postgresql" and seconds > 0 and 86400 % seconds == 0:
        since_epoch = Cast(Floor(Extract(field, "epoch") / Value(float(seconds))), IntegerField())
        return Value(EPOCH, output_field=DateTimeField()), since_epoch
    return TruncDay(field, tzinfo=UTC), _slot(window, field)


def _slot(window: timedelta, field: str = "at") -> Any:
    minutes = int(window.total_seconds() // 60)
    since_midnight = ExtractHour(field, tzinfo=UTC) * 60 + ExtractMinute(field, tzinfo=UTC)
    return Cast(Floor(since_midnight / Value(float(minutes))), IntegerField())


WHOLE = -1  # the gpu column of the job's own rows in the one query (a GPU's index is never negative)


def _series(w: Workload, start: datetime, until: datetime, window: timedelta) -> tuple[list[GpuSeries], list[Window]]:
    """Per GPU and per window, and for the whole job per window: one query (a UNION of the two groupings)."""
    share = Case(
        When(gpus_read__gt=0, then=Cast(F("gpus_idle"), FloatField()) / Cast(F("gpus_read"), FloatField())),
        default=None,
        output_field=FloatField(),
    )
    day, slot = _day_and_slot(window)
    gpus = _per_gpu(w, start, until, window)
    whole = (
        UsageSample.objects.filter(workload_id=w.pk, at__gte=start, at__lt=until)
        .annotate(day=day, slot=slot, n=Value(""), g=Value(WHOLE))
        .values("n", "g", "day", "slot")
        .annotate(a=Avg("gpu_utilisation"), b=Avg(share), c=Avg("cpu_utilisation"), peak=Max("memory_mib"))
        .values_list("n", "g", "day", "slot", "a", "b", "c", "peak")
        .order_by()
    )
    series: dict[tuple[str, int], GpuSeries] = {}
    windows: list[Window] = []
    for node, gpu, day, slot, a, b, c, peak in sorted(
        gpus.union(whole, all=True), key=lambda r: (r[0], r[1], r[2], r[3])
    ):
        at = day + int(slot) * window
        if gpu == WHOLE:
            windows.append(Window(at, _float(a), _float(b), _float(c), None if peak is None else int(peak)))
            continue
        s = series.setdefault((node, gpu), GpuSeries(node, gpu, [], [], []))
        s.at.append(at)
        s.utilisation.append(None if a is None else round(float(a), 1))
        s.memory_mib.append(None if peak is None else int(peak))
    return list(series.values()), sorted(windows, key=lambda x: x.at)


def _per_gpu(w: Workload, start: datetime, until: datetime, window: timedelta) -> Any:
    """Per GPU and window: from its five-minute sums (UsageGpuWindow) where the window is made of whole five
    minutes (a week of 8 GPUs: 16,128 rows to group), else from every reading."""
    day, slot = _day_and_slot(window)
    nothing = Value(None, output_field=FloatField())
    rows: Any
    if int(window.total_seconds()) % gpu_windows.BUCKET_S == 0:
        day, slot = _day_and_slot(window, "start")
        rows = (
            UsageGpuWindow.objects.filter(workload_id=w.pk, start__gte=start, start__lt=until)
            .annotate(day=day, slot=slot)
            .values("node", "gpu", "day", "slot")
            .annotate(
                a=Cast(Sum("utilisation_sum"), FloatField()) / NullIf(Cast(Sum("readings"), FloatField()), Value(0.0)),
                b=nothing,
                c=nothing,
                peak=Max("memory_peak_mib"),
            )
        )
    else:
        rows = (
            UsageGpuSample.objects.filter(workload_id=w.pk, at__gte=start, at__lt=until)
            .annotate(day=day, slot=slot)
            .values("node", "gpu", "day", "slot")
            .annotate(a=Avg("utilisation"), b=nothing, c=nothing, peak=Max("memory_mib"))
        )
    return rows.values_list("node", "gpu", "day", "slot", "a", "b", "c", "peak").order_by()


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


MAX_KEPT_PER_CYCLE = 50


def keep_summaries(now: datetime, window: timedelta) -> int:
    """Keep the summary of every workload that finished in the last day and has none yet (at most
    MAX_KEPT_PER_CYCLE a cycle: each takes two queries, three on several nodes of Slurm or PBS, and an insert).
    Returns how many were kept."""
    kept = UsageSummary.objects.filter(workload=OuterRef("pk"))
    finished = list(
        with_sampler(Workload.objects.filter(finished_at__gte=now - timedelta(days=1), started_at__isnull=False))
        .exclude(Exists(kept))
        .select_related("owner")
        .order_by("finished_at")[:MAX_KEPT_PER_CYCLE]
    )
    rows = [UsageSummary(workload_id=w.pk, at=now, data=efficiency(w, now, window).summary()) for w in finished]
    UsageSummary.objects.bulk_create(rows, ignore_conflicts=True)
    return len(rows)

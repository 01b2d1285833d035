"""The efficiency page of one workload (portal.usage.efficiency): its owner's, its team's leads' and IT's.

GPU utilisation and memory per GPU over time (plotly, as the dashboards draw), CPU efficiency, peak memory
against the request, time held against time used, idle spells and the actions taken on the workload. Four
queries for its owner (the workload with its sampler's start, its GPUs, its windows, its events), and one more
for a job on several nodes of Slurm or PBS (which of them sent readings); a lead's access check reads no more (it
is part of the first).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from portal import access
from portal.dashboards.figures import ACCENT, Figure, chart_layout
from portal.usage.efficiency import Efficiency, GpuSeries, efficiency, with_sampler


def per_gpu(series: list[GpuSeries], title: str, y_title: str, values: str, top: float | None = None) -> Figure:
    """One line per GPU over time (`values`: "utilisation" or "memory_mib"). Pure."""
    data = [
        {"type": "scatter", "mode": "lines+markers", "name": s.label, "x": [a.isoformat() for a in s.at],
         "y": [v / 1024 if v is not None and values == "memory_mib" else v for v in getattr(s, values)]}
        for s in series
    ]  # fmt: skip
    layout = chart_layout(title, y_title)
    layout["xaxis"] = layout["xaxis"] | {"type": "date", "hoverformat": "%Y-%m-%d %H:%M UTC"}
    if top is not None:
        layout["yaxis"] = layout["yaxis"] | {"range": [0, top], "autorange": False}
    return {"data": data, "layout": layout}


def held_and_used(found: Efficiency) -> Figure:
    """Hours held, split into used, idle and unknown. Pure."""
    parts = [("used", found.used_s, ACCENT), ("idle", found.idle_s, "#b42318"), ("unknown", found.unknown_s, "#5b6475")]
    data = [
        {"type": "bar", "orientation": "h", "name": name, "y": ["held"], "x": [round(seconds / 3600, 2)],
         "marker": {"color": colour}}
        for name, seconds, colour in parts
    ]  # fmt: skip
    layout = chart_layout("Time held, and how it was used", "", barmode="stack", height=180)
    layout["xaxis"] = layout["xaxis"] | {"title": {"text": "hours"}}
    return {"data": data, "layout": layout}


def figures(found: Efficiency) -> dict[str, Figure]:
    return {
        "gpu": per_gpu(found.gpus, "GPU utilisation per GPU", "percent", "utilisation", top=100),
        "memory": per_gpu(found.gpus, "GPU memory per GPU (peak per window)", "GiB", "memory_mib"),
        "time": held_and_used(found),
    }


@login_required
def page(request: HttpRequest, pk: UUID) -> HttpResponse:
    workload = access.access_efficiency(request.user, pk, annotate=with_sampler)
    window = timedelta(minutes=settings.GRIDLANE_IDLE_WINDOW_MINUTES)
    found = efficiency(workload, timezone.now(), window)
    context: dict[str, Any] = {
        "w": workload,
        "e": found,
        "s": found.summary(),
        "figures": figures(found),
        "window_minutes": settings.GRIDLANE_IDLE_WINDOW_MINUTES,
    }
    return render(request, "dashboards/efficiency.html", context)

"""The what-if page's figures and table as pure functions of a run's result (plotly figure dicts, drawn by
static/dashboards/charts.js with the locally served plotly.js like every other chart)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from portal.dashboards.figures import ACCENT, MUTED, OK, Figure, chart_layout

COLUMNS = (("actual", "Actual", MUTED), ("current", "Current policy, replayed", ACCENT), ("proposed", "Proposed", OK))
METRICS = (
    ("p50_wait_s", "p50 wait"),
    ("p95_wait_s", "p95 wait"),
    ("utilisation", "Utilisation"),
    ("preemptions", "Preemptions"),
    ("slo_breaches", "SLO breaches"),
)


def describe(change: dict[str, Any]) -> str:
    """The change in words: "vision's quota on local: reservation 4 GPUs, limit 6 GPUs"."""
    if not change:
        return "No change: the current policy replayed"
    ((kind, args),) = change.items()
    if kind == "capacity":
        return f"{args['fabric']} with {_gpus(args['gpus'])}"
    if kind == "weight":
        return f"{args['team']}'s fair-share weight {args['fair_share_weight']}"
    where = args.get("fabric") or "all fabrics"
    limit = "no limit" if args.get("gpu_limit") is None else f"limit {_gpus(args['gpu_limit'])}"
    return f"{args['team']}'s quota on {where}: reservation {_gpus(args.get('gpu_reservation') or 0)}, {limit}"


def _gpus(value: float) -> str:
    return f"{value:g} GPU{'' if value == 1 else 's'}"


def columns(result: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [c for c in COLUMNS if result.get(c[0]) is not None]


def wait(seconds: float) -> str:
    """A wait as people read it: seconds under a minute, minutes under two hours, else hours."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def _cell(metric: str, value: Any) -> str:
    if value is None:
        return "—"
    if metric.endswith("_wait_s"):
        return wait(value)
    if metric == "utilisation":
        return f"{value * 100:.1f} %"
    return str(value)


def team_rows(result: dict[str, Any]) -> list[dict[str, Any]]:
    """One row per team, then the whole site: per metric, the value in each column, as the page shows it."""
    cols = columns(result)
    slugs = sorted({slug for key, _, _ in cols for slug in result[key]["teams"]})
    rows = []
    for slug in [*slugs, ""]:
        cells = []
        for metric, _ in METRICS:
            for key, _, _ in cols:
                figures = result[key]["overall"] if not slug else result[key]["teams"].get(slug, {})
                cells.append(_cell(metric, figures.get(metric)))
        rows.append({"team": slug or "All teams", "cells": cells, "overall": not slug})
    return rows


def p95_wait(result: dict[str, Any]) -> Figure:
    """p95 wait per team in hours, as grouped bars: actual, current policy replayed, proposed."""
    cols = columns(result)
    slugs = sorted({slug for key, _, _ in cols for slug in result[key]["teams"]})
    data = [
        {"type": "bar", "name": name, "x": slugs, "marker": {"color": color},
         "y": [round(result[key]["teams"].get(s, {}).get("p95_wait_s", 0) / 3600, 3) for s in slugs]}
        for key, name, color in cols
    ]  # fmt: skip
    return {"data": data, "layout": chart_layout("p95 wait per team", "hours", barmode="group", height=320)}


def in_use(result: dict[str, Any], series: str = "in_use") -> Figure:
    """GPUs in use (or waiting) per hour over the whole site: one line per column."""
    start = datetime.fromisoformat(result["start"])
    data = []
    for key, name, color in columns(result):
        per_team = result[key][series].values()
        hours = result[key]["hours"]
        total = [round(sum(t[h] for t in per_team), 3) for h in range(hours)]
        x = [(start + timedelta(hours=h)).isoformat() for h in range(hours)]
        data.append({"type": "scatter", "mode": "lines", "name": name, "x": x, "y": total,
                     "line": {"color": color, "width": 2}})  # fmt: skip
    title = "GPUs in use, all teams" if series == "in_use" else "GPUs waiting, all teams"
    return {
        "data": data,
        "layout": chart_layout(title, "GPUs", height=320, xaxis={"type": "date", "gridcolor": "#eef0f4"}),
    }

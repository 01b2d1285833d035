"""A wait objective's charts as plotly figure dicts (pure): the share of its work that waited too long per hour
against the error budget, and the burn rate of each alert window against the alert's threshold."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from portal.dashboards.figures import ACCENT, BAD, MUTED, WARN, Figure, chart_layout

LABELS = {"fast_long": "fast: 1 h", "fast_short": "fast: 5 min", "slow_long": "slow: 6 h", "slow_short": "slow: 30 min"}


def over_per_hour(hours: Sequence[datetime], shares: Sequence[float | None], budget: float) -> Figure:
    """Per hour, the percentage of the work that started then and had waited longer than the threshold (None:
    nothing started), with the error budget as a dashed line: above it, the hour burned the budget."""
    y = [None if s is None else round(s * 100, 2) for s in shares]
    line = round(budget * 100, 2)
    data: list[dict[str, Any]] = [
        {"type": "bar", "name": "Waited too long", "x": [h.isoformat() for h in hours], "y": y,
         "marker": {"color": [BAD if v is not None and v > line else ACCENT for v in y]}},
    ]  # fmt: skip
    top = max([line * 2, *(v for v in y if v is not None)])
    layout = chart_layout(
        "Work that waited longer than the objective, per hour",
        "% of starts",
        shapes=[{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "yref": "y", "y0": line, "y1": line,
                 "line": {"color": WARN, "dash": "dash", "width": 2}}],
        annotations=[{"xref": "paper", "x": 1, "xanchor": "right", "yref": "y", "y": line, "yanchor": "bottom",
                      "text": f"error budget {line:g} %", "showarrow": False, "font": {"color": WARN}}],
    )  # fmt: skip
    layout["yaxis"] = layout["yaxis"] | {"range": [0, min(100.0, top * 1.15) or 1.0], "autorange": False}
    layout["xaxis"] = layout["xaxis"] | {"type": "date", "hoverformat": "%Y-%m-%d %H:%M UTC"}
    return {"data": data, "layout": layout}


def burn_rates(burn: Mapping[str, float], thresholds: Mapping[str, float]) -> Figure:
    """The burn rate of each window (bars), and each alert's threshold (its two windows must both reach it)."""
    names = list(LABELS)
    x = [LABELS[n] for n in names]
    data: list[dict[str, Any]] = [
        {"type": "bar", "name": "Burn rate", "x": x, "y": [burn.get(n, 0.0) for n in names],
         "marker": {"color": [BAD if burn.get(n, 0.0) >= thresholds.get(n.split("_")[0], 1.0) else ACCENT
                              for n in names]}},
        {"type": "scatter", "mode": "markers", "name": "Alert threshold", "x": x,
         "y": [thresholds.get(n.split("_")[0]) for n in names],
         "marker": {"symbol": "line-ew-open", "size": 28, "color": MUTED, "line": {"width": 3}}},
    ]  # fmt: skip
    return {"data": data, "layout": chart_layout("Burn rate per window (1: the budget lasts exactly)", "x budget")}

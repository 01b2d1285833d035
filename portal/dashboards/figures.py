"""Plotly figures as plain dicts ({"data": [...], "layout": {...}}): pure functions of the numbers they
draw, tested without a browser. The page hands each dict to Plotly.newPlot (static/dashboards/charts.js)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

Figure = dict[str, Any]

INK = "#1d2330"
ACCENT = "#2f5bea"
OK = "#1d7a46"
WARN = "#9a6700"
BAD = "#b42318"
MUTED = "#5b6475"
HALF_HOUR = timedelta(minutes=30)


def chart_layout(title: str, y_title: str, **extra: Any) -> dict[str, Any]:
    """Every Gridlane chart's layout (the dashboards' and the what-if's); `extra` overrides or adds keys."""
    layout: dict[str, Any] = {
        # Left-aligned, so that plotly's toolbar (top right, and hidden on phones: charts.js) never covers it.
        "title": {"text": title, "font": {"size": 15}, "x": 0, "xanchor": "left", "xref": "paper"},
        "margin": {"l": 56, "r": 16, "t": 44, "b": 40},
        "height": 300,
        "font": {"family": "system-ui, sans-serif", "color": INK},
        "paper_bgcolor": "#fff",
        "plot_bgcolor": "#fff",
        "legend": {"orientation": "h", "y": -0.2},
        # Plain numbers: no SI prefixes ("100\u03bc" GPUs), at most two decimals.
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero", "gridcolor": "#eef0f4",
                  "exponentformat": "none", "tickformat": ",.2~f", "hoverformat": ",.3~f"},
        "xaxis": {"gridcolor": "#eef0f4"},
    }  # fmt: skip
    layout.update(extra)
    return layout


def _hourly(layout: dict[str, Any], hours: Sequence[datetime], *ys: Sequence[float | None]) -> dict[str, Any]:
    """An hourly x axis over the whole window (one point is not stretched to "12:59:59.999"), ticks as the
    window wants them (hours and minutes within a day and a half, else days), and a y axis from 0 to at least
    1 so that small values are not blown up to fill it."""
    if hours:
        first, last = hours[0] - HALF_HOUR, hours[-1] + HALF_HOUR
        long = (hours[-1] - hours[0]) > timedelta(hours=36)
        layout["xaxis"] = layout["xaxis"] | {
            "type": "date",
            "range": [first.isoformat(), last.isoformat()],
            "tickformat": "%b %-d" if long else "%H:%M",
            "hoverformat": "%Y-%m-%d %H:%M UTC",
            "nticks": 8,
        }
    top = max([0.0, *(v for y in ys for v in y if v is not None)])
    layout["yaxis"] = layout["yaxis"] | {"range": [0, max(1.0, top * 1.15)], "autorange": False}
    return layout


def _iso(hours: Sequence[datetime]) -> list[str]:
    return [h.isoformat() for h in hours]


def use_against_quota(
    hours: Sequence[datetime],
    used: Sequence[float],
    reserved: Sequence[float],
    limit: float | Sequence[float | None] | None,
    granted: Sequence[float] | None = None,
) -> Figure:
    """GPUs in use per hour (GPU-hours in that hour; now for the current hour) against the team's reservation
    and its limit: one figure, or one per hour (None where no limit was in force: drawn as a gap). `granted`:
    GPUs temporary grants add to both per hour, drawn as a band over each where any is."""
    x = _iso(hours)
    limits = [limit] * len(x) if limit is None or isinstance(limit, int | float) else list(limit)
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": "In use", "x": x, "y": list(used), "fill": "tozeroy",
         "line": {"color": ACCENT, "width": 2}},
        {"type": "scatter", "mode": "lines", "name": "Reservation", "x": x, "y": list(reserved),
         "line": {"color": OK, "dash": "dash", "width": 2}},
    ]  # fmt: skip
    if any(v is not None for v in limits):
        # A value with no neighbour (a fresh site's first hour with a quota) draws no line: a marker shows it.
        data.append(
            {"type": "scatter", "mode": "lines+markers", "name": "Limit", "x": x, "y": limits, "connectgaps": False,
             "line": {"color": BAD, "dash": "dot", "width": 2},
             "marker": {"color": BAD, "size": _alone_markers(limits)}}
        )  # fmt: skip
    tops: list[list[float | None]] = []
    if granted is not None and any(granted):
        # Temporary grants as a shaded band over each line: an invisible copy of the line, then the line raised
        # by the grants, filled down to it (plotly fills "tonexty" to the trace just before).
        for name, base, color in (("Reservation", list(reserved), OK), ("Limit", limits, BAD)):
            if not any(v is not None for v in base):
                continue
            top = [None if b is None else b + g for b, g in zip(base, granted, strict=True)]
            data.append(
                {
                    "type": "scatter",
                    "mode": "lines",
                    "name": f"{name} (base)",
                    "x": x,
                    "y": base,
                    "showlegend": False,
                    "hoverinfo": "skip",
                    "line": {"width": 0, "color": color},
                }
            )
            data.append({"type": "scatter", "mode": "lines", "name": f"{name} with temporary grants", "x": x,
                         "y": top, "fill": "tonexty", "fillcolor": _TINT[color], "connectgaps": False,
                         "line": {"color": color, "width": 1}})  # fmt: skip
            tops.append(top)
    layout = chart_layout("GPUs in use against reservation and limit", "GPUs")
    return {"data": data, "layout": _hourly(layout, hours, used, reserved, limits, *tops)}


def _alone_markers(values: Sequence[float | None]) -> list[int]:
    """Marker sizes: 7 for a value whose neighbours are both missing (a line needs two points), else 0."""
    n = len(values)

    def missing(i: int) -> bool:
        return i < 0 or i >= n or values[i] is None

    return [7 if v is not None and missing(i - 1) and missing(i + 1) else 0 for i, v in enumerate(values)]


_TINT = {OK: "rgba(29, 122, 70, 0.15)", BAD: "rgba(180, 35, 24, 0.12)"}


def gpu_hours_by(title: str, totals: Mapping[str, float]) -> Figure:
    """A horizontal bar per name (member or queue), biggest on top."""
    ordered = sorted(totals.items(), key=lambda kv: (kv[1], kv[0]))
    bar = {"type": "bar", "orientation": "h", "name": "GPU-hours", "x": [round(v, 3) for _, v in ordered],
           "y": [k for k, _ in ordered], "marker": {"color": ACCENT}}  # fmt: skip
    layout = chart_layout(title, "")
    layout["xaxis"] = {"title": {"text": "GPU-hours"}, "rangemode": "tozero", "gridcolor": "#eef0f4"}
    layout["yaxis"] = {"automargin": True}
    layout["height"] = max(220, 60 + 28 * len(ordered))
    return {"data": [bar], "layout": layout}


def idle_gpu_hours(
    hours: Sequence[datetime], used: Sequence[float], idle: Sequence[float], unknown: Sequence[float] | None = None
) -> Figure:
    """GPU-hours per hour, split into busy, idle (below 80 % average utilisation over the idle window) and
    unknown (no utilisation data: hatched, so that it reads as neither busy nor idle, and never as zero)."""
    x = _iso(hours)
    unknown = list(unknown) if unknown is not None else [0.0] * len(used)
    busy = [max(0.0, u - i - n) for u, i, n in zip(used, idle, unknown, strict=True)]
    hatched = {"color": "#ffffff", "line": {"color": MUTED, "width": 1}, "pattern": {"shape": "/", "fgcolor": MUTED}}
    return {
        "data": [
            {"type": "bar", "name": "Busy", "x": x, "y": busy, "marker": {"color": ACCENT}},
            {"type": "bar", "name": "Idle (< 80 % utilisation)", "x": x, "y": list(idle), "marker": {"color": WARN}},
            {"type": "bar", "name": "Unknown (no utilisation data)", "x": x, "y": unknown, "marker": hatched},
        ],
        "layout": _hourly(chart_layout("Idle GPU-hours", "GPU-hours", barmode="stack"), hours, list(used)),
    }


def wait_against_slo(waits: Mapping[str, tuple[Sequence[datetime], Sequence[float | None], Sequence[float | None]]],
                     slo_seconds: float, hours: Sequence[datetime] = ()) -> Figure:  # fmt: skip
    """p50 and p95 queue wait per queue and hour, in minutes, with the team's SLO drawn as a line; the axis
    spans the window's `hours` where given."""
    data: list[dict[str, Any]] = []
    for queue, (hours, p50, p95) in sorted(waits.items()):
        x = _iso(hours)
        data.append({"type": "scatter", "mode": "lines+markers", "name": f"{queue} p95", "x": x,
                     "y": [_minutes(v) for v in p95], "connectgaps": False})  # fmt: skip
        data.append({"type": "scatter", "mode": "lines", "name": f"{queue} p50", "x": x,
                     "y": [_minutes(v) for v in p50], "line": {"dash": "dot"}, "connectgaps": False})  # fmt: skip
    slo = round(slo_seconds / 60, 2)
    layout = chart_layout(
        "Queue wait (p50, p95) against the SLO",
        "minutes",
        shapes=[
            {
                "type": "line",
                "xref": "paper",
                "x0": 0,
                "x1": 1,
                "yref": "y",
                "y0": slo,
                "y1": slo,
                "line": {"color": BAD, "dash": "dash", "width": 2},
            }
        ],
        annotations=[
            {
                "xref": "paper",
                "x": 1,
                "xanchor": "right",
                "yref": "y",
                "y": slo,
                "yanchor": "bottom",
                "text": f"SLO p95 {slo:g} min",
                "showarrow": False,
                "font": {"color": BAD},
            }
        ],
    )
    minutes = [[_minutes(v) for v in p95] for _, _, p95 in waits.values()]
    return {"data": data, "layout": _hourly(layout, hours, [slo], *minutes)}


def pending_demand(hours: Sequence[datetime], pending: Sequence[float]) -> Figure:
    """GPUs waiting per hour (pending GPU-hours in that hour)."""
    trace = {"type": "scatter", "mode": "lines", "name": "GPUs waiting", "x": _iso(hours), "y": list(pending),
             "fill": "tozeroy", "line": {"color": WARN, "width": 2}}  # fmt: skip
    return {"data": [trace], "layout": _hourly(chart_layout("Pending demand", "GPUs waiting"), hours, pending)}


def demand_against_capacity(
    hours: Sequence[datetime], used: Sequence[float], pending: Sequence[float], capacity: float, title: str
) -> Figure:
    """IT's buy-or-burst view for one fabric or flavor: use plus waiting demand stacked under its capacity."""
    x = _iso(hours)
    return {
        "data": [
            {
                "type": "scatter",
                "mode": "lines",
                "name": "In use",
                "x": x,
                "y": list(used),
                "stackgroup": "d",
                "line": {"color": ACCENT},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "Waiting",
                "x": x,
                "y": list(pending),
                "stackgroup": "d",
                "line": {"color": WARN},
            },
            {
                "type": "scatter",
                "mode": "lines",
                "name": "Capacity",
                "x": x,
                "y": [capacity] * len(x),
                "line": {"color": BAD, "dash": "dash", "width": 2},
            },
        ],
        "layout": _hourly(
            chart_layout(title, "GPUs"), hours, [u + p for u, p in zip(used, pending, strict=True)], [capacity]
        ),
    }


def _minutes(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds / 60, 2)

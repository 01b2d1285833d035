"""`gridlane stats ID`: how a workload used what it held, in the terminal (as `seff` and `jobstats` show it).
Reads GET /api/v1/workloads/ID/efficiency/; --json prints the answer as it came."""

from __future__ import annotations

from typing import Any


def hours(seconds: Any) -> str:
    return f"{(seconds or 0) / 3600:.2f} h"


def percent(value: Any) -> str:
    return "unknown" if value is None else f"{value:.1f} %"


def render(s: dict[str, Any]) -> str:
    """The summary as lines of text."""
    lines = [
        f"{s['name']} ({s['id']}), {s['state']}",
        f"GPUs held:        {s['gpus_held']:g} on {s['nodes']} node(s)",
        f"Time held:        {hours(s['held_seconds'])}",
        f"  used / idle / no data: {hours(s['used_seconds'])} / {hours(s['idle_seconds'])} / "
        f"{hours(s['unknown_seconds'])}",
        f"GPU utilisation:  {percent(s['gpu_utilisation_percent'])} ({s['gpus_idle']} of {len(s['per_gpu'])} "
        "GPUs read idle)",
        f"CPU efficiency:   {percent(s['cpu_efficiency_percent'])}",
        "Peak memory:      "
        + ("unknown" if s["peak_memory_mib"] is None else f"{s['peak_memory_mib']} MiB")
        + f" of {s['memory_requested_mib']} MiB requested",
    ]
    if s.get("why_unknown"):
        lines.append(f"GPU use unknown:  {s['why_unknown']}")
    for words in s.get("nodes_unread", []):  # a portal of an earlier version gives none
        lines.append(f"Node unread:      {words}")
    if s["per_gpu"]:
        lines.append("Per GPU:          node  gpu  utilisation  peak memory")
        for g in s["per_gpu"]:
            memory = "unknown" if g["peak_memory_mib"] is None else f"{g['peak_memory_mib']} MiB"
            idle = " idle" if g["idle"] else ""
            lines.append(
                f"                  {g['node'] or '-'}  {g['gpu']}  {percent(g['utilisation_percent'])}  {memory}{idle}"
            )
    for spell in s["idle_spells"]:
        lines.append(f"Idle:             {spell['from']} to {spell['to']}")
    for action in s["actions"]:
        lines.append(f"Action:           {action['at']} {action['state']}: {action['reason']}")
    return "\n".join(lines) + "\n"

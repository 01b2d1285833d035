"""How Gridlane says numbers, amounts and times to people: plural-aware, in human units.

Pure functions (no Django) used by templates (portal/workloads/templatetags/words.py), services' messages and
the dashboards, so that a page, an event and an error all say "1 GPU", "0.25 GPU", "2 hours", "just now".
"""

from __future__ import annotations

from datetime import datetime
from decimal import Decimal

# Work kinds as people name them ("Vm" is what a plain .title() makes of "vm").
KIND_LABELS = {"notebook": "Notebook", "training": "Training run", "batch": "Batch job", "vm": "VM lease"}


def number(value: Decimal | float | int | None, places: int = 3) -> str:
    """A number without trailing zeros: 0.250 -> "0.25", 1.000 -> "1", 2.5 -> "2.5"; "" for None."""
    if value is None:
        return ""
    text = f"{Decimal(str(value)):.{places}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text


def count(value: Decimal | float | int | None, singular: str, plural: str | None = None) -> str:
    """An amount with its noun, singular up to one: "1 GPU", "0.25 GPU", "2 GPUs", "0 GPUs"."""
    if value is None:
        return ""
    many = plural or f"{singular}s"
    return f"{number(value)} {singular if 0 < Decimal(str(value)) <= 1 else many}"


def gpus(value: Decimal | float | int | None) -> str:
    return count(value, "GPU")


def cpus(value: Decimal | float | int | None) -> str:
    return count(value, "CPU")


DURATION_UNITS = (("d", 86_400), ("h", 3600), ("min", 60), ("s", 1))


def duration(seconds: int | float | None) -> str:
    """A length of time as people say it, in its two largest units that are not zero: 90 -> "1 min 30 s",
    10800 -> "3 h"; "" for None."""
    if seconds is None:
        return ""
    left = max(0, int(seconds))
    parts = []
    for unit, size in DURATION_UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count} {unit}")
    return " ".join(parts[:2]) or "0 s"


def hours(seconds: float | int | None) -> str:
    """Seconds as hours: 3600 -> "1 hour", 5400 -> "1.5 hours", 900 -> "0.25 hours"; "" for None."""
    if seconds is None:
        return ""
    amount = Decimal(str(seconds)) / 3600
    text = number(amount, places=2)
    return f"{text} hour" if text == "1" else f"{text} hours"


def resources(gpu: Decimal, cpu: Decimal, memory_gb: Decimal, nodes: int = 1) -> str:
    """A request: "1 GPU, 4 CPUs, 16 GB", and "per node x 2 nodes" (with a times sign) for a gang."""
    text = f"{gpus(gpu)}, {cpus(cpu)}, {number(memory_gb, 2)} GB"
    return f"{text} per node \u00d7 {nodes} nodes" if nodes > 1 else text


def ago(then: datetime | None, now: datetime) -> str:
    """How long ago, in the largest unit: "just now" under a minute, "1 minute ago", "3 hours ago"."""
    if then is None:
        return ""
    seconds = int((now - then).total_seconds())
    if seconds < 60:
        return "just now"
    for unit, size in (("day", 86_400), ("hour", 3600), ("minute", 60)):
        if seconds >= size:
            return f"{count(seconds // size, unit)} ago"
    return "just now"  # unreachable: seconds >= 60 matched a minute


def left(until: datetime | None, now: datetime) -> str:
    """Time left before `until`: "2 h 5 min left", "under a minute left", "ended"; "" for None."""
    if until is None:
        return ""
    seconds = int((until - now).total_seconds())
    if seconds <= 0:
        return "ended"
    if seconds < 60:
        return "under a minute left"
    days, rest = divmod(seconds, 86_400)
    h, rest = divmod(rest, 3600)
    m = rest // 60
    parts = [f"{days} d" if days else "", f"{h} h" if h else "", f"{m} min" if m and not days else ""]
    return " ".join(p for p in parts if p) + " left"


def kind_label(kind: str) -> str:
    return KIND_LABELS.get(kind, kind.capitalize())


def ordinal(n: int) -> str:
    """1 -> "1st", 2 -> "2nd", 11 -> "11th", 23 -> "23rd"."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def in_line(position: int, queue_name: str) -> str:
    """A waiting workload's place: "next in line on Training", "3rd in line on Training"; "" when unknown."""
    if position <= 0:
        return ""
    return f"{'next' if position == 1 else ordinal(position)} in line on {queue_name}"

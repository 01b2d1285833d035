"""`{{ seconds|duration }}`: a length of time as people say it (90 -> "1 min 30 s", 10800 -> "3 h")."""

from __future__ import annotations

from django import template

register = template.Library()

UNITS = (("d", 86_400), ("h", 3600), ("min", 60), ("s", 1))


@register.filter
def duration(seconds: int | float | None) -> str:
    """The two largest units that are not zero; "" for None."""
    if seconds is None:
        return ""
    left = max(0, int(seconds))
    parts = []
    for unit, size in UNITS:
        count, left = divmod(left, size)
        if count:
            parts.append(f"{count} {unit}")
    return " ".join(parts[:2]) or "0 s"

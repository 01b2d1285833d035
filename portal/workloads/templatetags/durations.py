"""`{{ seconds|duration }}`: a length of time as people say it (90 -> "1 min 30 s", 10800 -> "3 h")."""

from __future__ import annotations

from typing import Any

from django import template
from django.utils import timezone

from portal import words

register = template.Library()


@register.filter
def duration(seconds: int | float | None) -> str:
    """The two largest units that are not zero; "" for None."""
    return words.duration(seconds)


@register.filter
def ran_for(w: Any) -> str:
    """How long the workload ran: from its start to its end (or to now while it runs); "" before it started."""
    if w.started_at is None:
        return ""
    return duration(((w.finished_at or timezone.now()) - w.started_at).total_seconds())


@register.filter
def waited_for(w: Any) -> str:
    """How long it waited from its submit to its start; "" when it never started."""
    if w.started_at is None or w.submitted_at is None:
        return ""
    return duration((w.started_at - w.submitted_at).total_seconds())

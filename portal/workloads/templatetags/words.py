"""`{% load words %}`: portal.words as template filters (`{{ w.gpus|gpus }}`, `{{ w.submitted_at|ago }}`)."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

from django import template
from django.utils import timezone
from django.utils.html import format_html

from portal import words
from portal.workloads import calibration

register = template.Library()

register.filter("number", words.number)
register.filter("gpus", words.gpus)
register.filter("cpus", words.cpus)
register.filter("hours", words.hours)
register.filter("kind_label", words.kind_label)
register.filter("ordinal", words.ordinal)


@register.filter
def local(when: datetime | None, form: str = "short") -> str:
    """A time as UTC in the page ("14:05 UTC", or "2026-12-06 14:05 UTC" for form "long"), in a <time> that
    gridlane.js shows in the viewer's own time zone, with the UTC time on hover; "" for None."""
    if when is None:
        return ""
    utc = timezone.localtime(when, UTC)
    text = f"{utc:%Y-%m-%d %H:%M} UTC" if form == "long" else f"{utc:%H:%M} UTC"
    return format_html(
        '<time class="local" data-form="{}" datetime="{}" title="{} UTC">{}</time>',
        form, utc.isoformat(), f"{utc:%Y-%m-%d %H:%M}", text,
    )  # fmt: skip


@register.filter
def plus(value: float | int | None, more: float | int | None) -> float | None:
    """`value` and `more` added (None stays None: no limit raised is still no limit)."""
    return None if value is None else float(value) + float(more or 0)


@register.filter
def in_line(w: Any) -> str:
    """A waiting workload's place in its queue's line, in words."""
    return words.in_line(w.queue_position, w.queue.name) if w.state == "pending" else ""


@register.filter
def estimate_band(w: Any) -> str:
    """The band around a waiting workload's estimated start, from its queue's recent errors: "usually within
    -3/+12 min"; "" without an estimate or a band (one query, kept a minute: calibration.band_for)."""
    if w.state != "pending" or w.estimated_start is None:
        return ""
    return calibration.band_words(calibration.band_for(w.queue_id))


register.filter("calibration", calibration.calibration_words)


@register.filter
def estimate_error(w: Any) -> str:
    """How far its start was from the latest estimate it was shown: "4 min later than estimated"."""
    return calibration.error_words(w.estimate_error_s)


@register.filter
def ago(then: datetime | None) -> str:
    return words.ago(then, timezone.now())


@register.filter
def left(until: datetime | None) -> str:
    return words.left(until, timezone.now())


@register.filter
def plural(value: Decimal | float | int | None, nouns: str) -> str:
    """`{{ n|plural:"node,nodes" }}` -> "1 node", "3 nodes"."""
    singular, _, many = nouns.partition(",")
    return words.count(value, singular, many or None)


@register.filter
def resources(w: Any) -> str:
    """A workload's request in words."""
    return words.resources(w.gpus, w.cpus, w.memory_gb, w.nodes)

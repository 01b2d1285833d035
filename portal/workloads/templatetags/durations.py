"""`{{ seconds|duration }}`: a length of time as people say it (portal.words.duration)."""

from __future__ import annotations

from django import template

from portal import words

register = template.Library()


@register.filter
def duration(seconds: int | float | None) -> str:
    """The two largest units that are not zero; "" for None."""
    return words.duration(seconds)

"""`{% load policy_words %}`: milli-GPUs in words (`{{ 1500|milli_gpus }}` -> "1.5 GPUs")."""

from __future__ import annotations

from django import template

from portal import words

register = template.Library()


@register.filter
def milli_gpus(value: int | None) -> str:
    return words.gpus((value or 0) / 1000)

"""The single submit's validation fast path, beside the plain path it mirrors (WorkloadIn.parse in
portal/api/serializers.py, which tries `validated` first and lets DRF validate whatever it leaves).

The rule it keeps: it takes only what DRF would take as it is and makes of it exactly what DRF makes (the same
validated data); for any other body it answers None and DRF validates it, so every error, and every value DRF
would convert, is DRF's own. It reads each field's kind and settings off the serializer's declared fields (a
plan per serializer class), never a copy of them: DRF's declarations stay the one source of the shape.

What it earns: the bench's single submit body validated in 12.5 us instead of DRF's 45 us (WorkloadIn.parse,
measured alone). bench/bench_parse.py measures both paths on that body and tests/api/test_parse.py (hypothesis)
holds the fast path to DRF's answer for any body.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.core.validators import (
    MaxLengthValidator,
    MaxValueValidator,
    MinValueValidator,
    ProhibitNullCharactersValidator,
)
from rest_framework import serializers
from rest_framework.exceptions import ValidationError
from rest_framework.fields import empty
from rest_framework.validators import ProhibitSurrogateCharactersValidator


def validated(parser: serializers.Serializer[Any], data: Any) -> dict[str, Any] | None:
    """The serializer's validated data for a body of the common shape, worked out without DRF's machinery (a third
    of the web process's own time for a submit), or None for DRF to validate it. The common shape: a dict of
    fields the serializer declares, each of a kind read off the field itself (_plan): text DRF takes as it is
    (ASCII, no NUL, nothing to trim, not blank where that is refused, within the length), a whole number within
    the field's bounds, a number through its own DecimalField (quantized as DRF quantizes it), a nested
    serializer's dict of the same; what the body leaves out takes the field's default. Anything else (a null, a
    bad value, a field of another kind) goes DRF's way: the same answer, or its errors. tests/api/test_parse.py
    holds it to a new WorkloadIn's answer for any body."""
    kind = type(parser)
    if kind not in _PLANS:  # worked out once per class (None: DRF validates all its bodies)
        _PLANS[kind] = _plan(parser)
    return _by_plan(_PLANS[kind], data)


# A serializer's plan (_plan): for each field it can validate, its kind and settings; the defaults of those a body
# may leave out; the fields a body must give. None where the serializer validates more than its fields one by one.
@dataclass(frozen=True)
class _Plan:
    kinds: dict[str, tuple[str, Any]]
    defaults: dict[str, Any]
    required: frozenset[str]


_PLANS: dict[type, _Plan | None] = {}
_TEXT_CHECKS = (MaxLengthValidator, ProhibitNullCharactersValidator, ProhibitSurrogateCharactersValidator)
_BOUND_CHECKS = (MaxValueValidator, MinValueValidator)


def _plan(serializer: serializers.Serializer[Any]) -> _Plan | None:
    if type(serializer).validate is not serializers.Serializer.validate or serializer.validators:
        return None  # its own checks across fields
    kinds: dict[str, tuple[str, Any]] = {}
    defaults: dict[str, Any] = {}
    for name, field in serializer.fields.items():
        if field.read_only or field.source != name:
            return None
        if getattr(field.default, "requires_context", False):
            return None  # a default that reads the serializer (the request's user, say)
        if field.default is not empty:
            defaults[name] = field.default
        checks = [type(v) for v in field.validators]
        if type(field) is serializers.CharField and all(c in _TEXT_CHECKS for c in checks):
            kinds[name] = ("text", field)
        elif type(field) is serializers.IntegerField and all(c in _BOUND_CHECKS for c in checks):
            kinds[name] = ("whole", field)
        elif type(field) is serializers.DecimalField and not checks:
            kinds[name] = ("decimal", field)
        elif isinstance(field, serializers.Serializer) and (nested := _plan(field)) is not None:
            kinds[name] = ("nested", nested)
    required = frozenset(name for name, field in serializer.fields.items() if field.required)
    return _Plan(kinds, defaults, required)


def _by_plan(plan: _Plan | None, data: Any) -> dict[str, Any] | None:
    if plan is None or type(data) is not dict or not plan.required <= data.keys():
        return None
    valid = {name: default() if callable(default) else default for name, default in plan.defaults.items()}
    for name, value in data.items():
        kind, how = plan.kinds.get(name, ("", None))
        if _as_it_is(kind, how, value):
            valid[name] = value
        elif kind == "decimal" and (type(value) is int or type(value) is float):
            try:
                valid[name] = how.to_internal_value(value)  # quantized as DRF quantizes it
            except ValidationError:
                return None
        elif kind == "nested" and (nested := _by_plan(how, value)) is not None:
            valid[name] = nested
        else:  # DRF's to say: a value of another kind, a field of another kind, or one the serializer lacks
            return None
    return valid


def _as_it_is(kind: str, field: Any, value: Any) -> bool:
    """Whether DRF's field of this kind takes the value as it is: text it takes whole, a whole number within its
    bounds (a null goes DRF's way)."""
    if kind == "text":
        return _taken_as_is(value, field.max_length, field.trim_whitespace, field.allow_blank)
    return kind == "whole" and _whole(value, field.min_value, field.max_value)


def _taken_as_is(value: Any, max_length: int | None, trimmed: bool, blank: bool) -> bool:
    return (
        type(value) is str
        and value.isascii()  # (no surrogate, refused by DRF)
        and "\x00" not in value
        and (blank or value != "")
        and (max_length is None or len(value) <= max_length)
        and (not trimmed or value == value.strip())
    )


def _whole(value: Any, least: int | None, most: int | None) -> bool:
    return type(value) is int and (least is None or least <= value) and (most is None or value <= most)

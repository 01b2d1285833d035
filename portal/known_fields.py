"""Unknown fields are refused: a body that names a field the serializer does not declare is a 400 naming it
(`{"errors": {"gpu": ["Unknown field; did you mean resources.gpus?"]}}`), never dropped in silence, so that a
typo cannot run with the defaults. An allowlist: the serializer's own writable fields are what is known.

`KnownFieldsOnly` goes first among a serializer's bases; a nested serializer that has it refuses its own unknown
fields under its name (`resources.gpu`). `refuse_unknown` checks a plain dict against the names given (for
bodies read without a serializer).
"""

from __future__ import annotations

import difflib
from collections.abc import Collection, Mapping
from typing import Any

from rest_framework import serializers
from rest_framework.exceptions import ValidationError

MAX_NAMED = 20  # the most unknown names one answer lists (a body of thousands of keys gets a short answer)


def _known(serializer: serializers.Serializer[Any]) -> dict[str, Any]:
    return {name: field for name, field in serializer.fields.items() if not field.read_only}


def _nested_names(known: Mapping[str, Any]) -> dict[str, str]:
    """Each nested serializer's field names, as the dotted name a body gives them under (gpus -> resources.gpus)."""
    out: dict[str, str] = {}
    for name, field in known.items():
        if isinstance(field, serializers.Serializer):
            for inner, f in field.fields.items():
                if not f.read_only:
                    out.setdefault(inner, f"{name}.{inner}")
    return out


def message(name: str, known: Collection[str], nested: Mapping[str, str] | None = None) -> str:
    """What an unknown field is told: the closest known name when one is near (a field of a nested object
    included: "gpu" -> resources.gpus), else the names this body may give."""
    nested = nested or {}
    close = difflib.get_close_matches(name, [*known, *nested], n=1, cutoff=0.75)
    if close:
        return f"Unknown field; did you mean {nested.get(close[0], close[0])}?"
    return f"Unknown field; this body takes {', '.join(sorted(known))}."


def unknown_errors(data: Any, known: Collection[str], nested: Mapping[str, str] | None = None) -> dict[str, list[str]]:
    """{name: [message]} for each key of `data` (a dict) not in `known`; {} for anything else."""
    if not isinstance(data, Mapping):
        return {}
    unknown = sorted((str(k) for k in data if k not in known), key=str)
    return {name[:50]: [message(name, known, nested)] for name in unknown[:MAX_NAMED]}


def refuse_unknown(data: Any, known: Collection[str]) -> None:
    """Raise the 400 naming each field of `data` not in `known` (nothing for a body that is not a dict)."""
    errors = unknown_errors(data, known)
    if errors:
        raise ValidationError(errors)


class KnownFieldsOnly(serializers.Serializer[Any]):
    """A serializer mixin: a body with a field the serializer does not declare (or declares read-only) is
    refused, each such field named, before any field is validated."""

    def to_internal_value(self, data: Any) -> Any:
        known = _known(self)
        errors = unknown_errors(data, known, _nested_names(known))
        if errors:
            raise ValidationError(errors)
        return super().to_internal_value(data)

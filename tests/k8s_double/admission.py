"""Schema admission: a body against its kind's schema, as kube-apiserver decodes and validates it.

Built-in kinds go by the official client's models (models.py); Kueue's kinds by the CRD of the version the
request names (crds.py). Unknown fields are dropped, or refused with 400 when the request asks for
fieldValidation=Strict (kubectl's default since 1.27, and Gridlane's); a wrong JSON type is a 400; a missing
required field, an enum, a bound or a CEL rule broken is a 422 naming the field.
"""

from __future__ import annotations

from typing import Any

from tests.k8s_double import crds, models
from tests.k8s_double.objects import Kind, bad_request, invalid

Causes = list[tuple[str, str]]


def admit(
    kind: Kind, version: str, obj: dict[str, Any], *, strict: bool, old: dict[str, Any] | None = None
) -> tuple[dict[str, Any], Causes]:
    """The object as stored (unknown fields gone, CRD defaults in) and the required fields it lacks (422 causes,
    which validation.py may word more closely); ApiError for what the API server refuses outright."""
    name = (obj.get("metadata") or {}).get("name", "")
    if kind.group == crds.GROUP:
        checker = crds.Checker(old)
        body = {k: v for k, v in obj.items() if k != "status"}
        checked = checker.check(body, crds.schema(kind.plural, version), "", old)
        if checker.unknown and strict:
            raise _strict(checker.unknown)
        if checker.causes:
            raise invalid(kind, name, checker.causes)
        if "status" in obj:
            checked["status"] = obj["status"]
        return dict(checked), []
    if not kind.model:
        return obj, []
    problems = models.check(kind.model, obj)
    if problems.types:
        path, found, go_type = problems.types[0]
        raise bad_request(
            f'{kind.kind} in version "{kind.version}" cannot be handled as a {kind.kind}: json: cannot unmarshal '
            f"{found} into Go struct field {kind.kind}.{path} of type {go_type}"
        )
    if problems.unknown and strict:
        raise _strict(problems.unknown)
    return obj, [(path, "Required value") for path in problems.missing]


def merged(causes: Causes, missing: Causes) -> Causes:
    """validation.py's causes, then each missing field no cause already names."""
    named = {path for path, _ in causes}
    return causes + [cause for cause in missing if cause[0] not in named]


def _strict(unknown: list[str]) -> Exception:
    return bad_request("strict decoding error: " + ", ".join(f'unknown field "{path}"' for path in unknown))

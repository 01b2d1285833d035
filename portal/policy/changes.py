"""Changing one policy object: check_* validates (with the admin's own form), do_* writes.

Both the admin API and `gridlane policy apply` come through here, so an object is valid on one road exactly when
it is on the other and on the admin page. Writes are recorded in the audit log by its model signals
(portal.accounts.audit), with the request's user as the actor.

A version is a digest of what `Kind.read` shows of an object: a caller that read version V may change the
object only while it still reads V (else `Stale`, a 409): the check runs on the row locked for the write.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from django import forms
from django.db.models import ProtectedError

from portal.policy.kinds import Kind

META_FIELDS = ("key", "version")  # what an answer carries besides the form's fields; ignored when sent back


class Refused(Exception):
    """A change that may not be made, with `{field: [message]}` (400), or a stale version (409)."""

    status = 400

    def __init__(self, errors: Mapping[str, list[str]]) -> None:
        super().__init__(errors)
        self.errors = dict(errors)


class Stale(Refused):
    status = 409


class Unversioned(Refused):
    status = 428


def digest(value: Any) -> str:
    """A short, stable digest of a plain JSON value (keys sorted)."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def version(kind: Kind, obj: Any) -> str:
    return digest(kind.read(obj))


def shown(kind: Kind, obj: Any) -> dict[str, Any]:
    """The object as the API answers it: its key, its version and its fields."""
    fields = kind.read(obj)
    return {"key": kind.key(obj), "version": digest(fields), **fields}


def check_fields(kind: Kind, values: Mapping[str, Any]) -> None:
    """Refuse any field the kind's form does not have, naming each."""
    known = set(kind.defaults()) | set(META_FIELDS)
    unknown = sorted(str(k) for k in values if k not in known)
    if unknown:
        raise Refused({name: [f"Unknown field; {kind.name} take: {', '.join(sorted(kind.defaults()))}."]
                       for name in unknown})  # fmt: skip


def check_version(kind: Kind, obj: Any, expected: str | None) -> None:
    """Stale when the object no longer reads as the version the caller read."""
    if expected is None:
        raise Unversioned({"version": ["Send the version you read (the If-Match header or a version field)."]})
    now = version(kind, obj)
    if expected.strip('"') != now:
        raise Stale({"version": [f"Changed since you read it (version {expected} is now {now}): read it again."]})


def check_save(kind: Kind, values: Mapping[str, Any], obj: Any = None, partial: bool = False) -> forms.ModelForm[Any]:
    """The admin's form bound with the values, valid, ready to save; Refused with its errors otherwise.

    A new object starts from the model's defaults; `partial` keeps an existing one's fields that are not given."""
    check_fields(kind, values)
    base = kind.read(obj) if obj is not None and partial else kind.defaults()
    merged = {**base, **{k: v for k, v in values.items() if k not in META_FIELDS}}
    if obj is not None:
        fixed = [f for f in kind.fixed if merged.get(f) != kind.read(obj).get(f)]
        if fixed:
            raise Refused({f: ["It cannot change once the object exists."] for f in fixed})
    form = kind.bind(merged, instance=obj)
    if not form.is_valid():
        raise Refused(form_errors(form))
    return form


def form_errors(form: forms.BaseForm) -> dict[str, list[str]]:
    """The form's errors by field; those of no field under "detail", as everywhere in the API."""
    return {("detail" if name == "__all__" else name): [str(m) for m in messages]
            for name, messages in form.errors.items()}  # fmt: skip


def do_save(form: forms.ModelForm[Any]) -> Any:
    return form.save()


def check_delete(kind: Kind, obj: Any) -> None:
    """What keeps the admin from deleting it keeps the API from it too; and, with no confirmation page to list
    what would go with it, a team that still has people is not deleted from here (a mistyped slug in a policy
    document must not take a team's memberships with it)."""
    if kind.name == "teams" and obj.memberships.exists():
        raise Refused({"detail": [f"{obj.slug} still has members: remove them in the admin first."]})
    unfinished = getattr(obj, "unfinished_work", None)
    if unfinished is not None:
        n = unfinished()
        if n:
            raise Refused({"detail": [f"{n} workload(s) that have not ended are at this tier: move them first."]})


def do_delete(kind: Kind, obj: Any) -> None:
    """Delete it; Refused when other objects still need it (a fabric that queues target, a department with teams)."""
    try:
        obj.delete()
    except ProtectedError as error:
        names = sorted({str(o) for o in error.protected_objects})[:5]
        raise Refused({"detail": [f"Still needed by: {', '.join(names)}."]}) from None

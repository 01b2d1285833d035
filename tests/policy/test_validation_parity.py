"""The admin API refuses exactly what the admin's forms refuse, field by field, with the same message."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django import forms

from portal.policy.kinds import KINDS, Kind

URL = "/api/v1/admin/"
NOTHING_TO_REFUSE = (forms.BooleanField,)  # a box is ticked or not: every value is valid
BAD_TEXT = {("targets", "template"): "echo $no_such_name"}  # free text: what its own check refuses


def bad_value(field: forms.Field) -> Any:
    """A value the field cannot take (None where no such value exists)."""
    if isinstance(field, NOTHING_TO_REFUSE):
        return None
    if isinstance(field, forms.ModelMultipleChoiceField):
        return ["no-such"]
    if isinstance(field, forms.ModelChoiceField):
        return "no-such"
    if isinstance(field, forms.MultipleChoiceField):
        return ["nope"]
    if isinstance(field, forms.ChoiceField):
        return "nope"
    if isinstance(field, forms.IntegerField | forms.DecimalField | forms.FloatField):
        return "many"
    if isinstance(field, forms.JSONField):
        return "{not json"
    if isinstance(field, forms.SlugField):
        return "not a slug!"
    if isinstance(field, forms.URLField):
        return "not a url"
    if isinstance(field, forms.CharField):
        return "x" * (field.max_length + 1) if field.max_length else ("" if field.required else None)
    raise AssertionError(f"no bad value for {type(field).__name__}")


def as_admin_posts(kind: Kind, obj: Any) -> dict[str, Any]:
    """What the admin's change page posts for the object, unchanged (relations by id, JSON as text)."""
    bound = kind.form(instance=obj)
    data: dict[str, Any] = {}
    for name, field in bound.fields.items():
        value = bound.get_initial_for_field(field, name)
        if isinstance(field, forms.ModelMultipleChoiceField):
            value = [getattr(o, "pk", o) for o in value]
        elif isinstance(field, forms.JSONField):
            value = json.dumps(value)
        if value is None or value is False:
            continue
        data[name] = value
    return data


def cases() -> list[tuple[str, str]]:
    return [(kind.name, name) for kind in KINDS.values() for name in kind.defaults()]


@pytest.mark.parametrize(("kind_name", "field"), cases())
def test_the_api_and_the_admin_form_refuse_the_same_value_alike(kind_name, field, site, api_as):
    kind = KINDS[kind_name]
    obj = kind.queryset().order_by("-pk").first()
    bad = BAD_TEXT.get((kind_name, field)) or bad_value(kind.form(instance=obj).fields[field])
    client = api_as(site["it"])
    key = kind.key(obj)
    version = client.get(f"{URL}{kind.name}/{key}/").json()["version"]
    if bad is None:  # nothing to refuse: the API takes both values, as the form does
        assert isinstance(kind.form(instance=obj).fields[field], NOTHING_TO_REFUSE)
        for value in (True, False):
            answer = client.patch(f"{URL}{kind.name}/{key}/", {field: value, "version": version}, format="json")
            assert answer.status_code == 200, answer.json()
            assert answer.json()[field] is value
            version = answer.json()["version"]
        return
    if field in kind.fixed:  # the admin shows it read-only once the object exists; the API refuses a change
        answer = client.patch(f"{URL}{kind.name}/{key}/", {field: "other", "version": version}, format="json")
        assert answer.json()["errors"] == {field: ["It cannot change once the object exists."]}
        return
    admin = kind.form(data={**as_admin_posts(kind, obj), field: bad}, instance=obj)
    assert not admin.is_valid()
    answer = client.patch(f"{URL}{kind.name}/{key}/", {field: bad, "version": version}, format="json")
    assert answer.status_code == 400, answer.json()
    api_errors = answer.json()["errors"]
    admin_errors = {("detail" if k == "__all__" else k): [str(m) for m in v] for k, v in admin.errors.items()}
    if field in kind.relations:  # the admin names the related object by id, the API by its natural key
        assert set(api_errors) == set(admin_errors) == {field}
        codes = {e.code for e in admin.errors.as_data()[field]}
        assert codes <= {"invalid_choice", "invalid_pk_value"}
        assert any("valid" in m for m in api_errors[field])
    else:
        assert api_errors == admin_errors

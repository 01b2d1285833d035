"""Text that cannot be kept (a NUL, a lone surrogate, bytes that are not UTF-8) is refused naming its field, in
a single submit, in a bulk submit's item, and in the forms, like every other refusal."""

from __future__ import annotations

import pytest

from portal.workloads.models import Workload

pytestmark = pytest.mark.django_db

JOB = b'"queue": "train", "kind": "training", "resources": {"gpus": 1}'


@pytest.mark.parametrize(
    ("body", "want"),
    [
        (b'{' + JOB + b', "name": "a\\u0000b", "command": "x"}', {"name"}),
        (b'{' + JOB + b', "name": "ok", "command": "run \\u0000"}', {"command"}),
        (b'{"queue": "train", "kind": "training", "script": "#!/bin/bash\\n\\u0000"}', {"script"}),
        (b'{' + JOB + b', "name": "\\ud800", "command": "x"}', {"name"}),
        (b'{' + JOB + b', "name": "caf\xe9", "command": "x"}', {"name"}),
        (b'{' + JOB + b', "name": "ok", "command": "\xff\xfe"}', {"command"}),
        (b'{"queue": "train", "kind": "training", "resources": {"gpus": 1, "image": "a\\u0000"}, "command": "x"}',
         {"resources.image"}),
        (b'{' + JOB + b', "na\\u0000me": "x", "command": "x"}', {"detail"}),
    ],
)  # fmt: skip
def test_a_submit_with_unfit_text_is_refused_naming_the_field(api_as, alice, body, want):
    response = api_as(alice).post("/api/v1/workloads/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    errors = response.json()["errors"]
    assert set(errors) == want, errors
    assert not Workload.objects.exists()


def test_a_bulk_item_with_unfit_text_is_named_by_its_index_and_field(api_as, alice):
    good = b"{" + JOB + b', "name": "ok", "command": "x"}'
    bad = b"{" + JOB + b', "name": "ok", "command": "x\\u0000"}'
    body = b'{"items": [' + b", ".join([good, good, good, bad]) + b"]}"
    response = api_as(alice).post("/api/v1/workloads/bulk/", body, content_type="application/json")
    assert response.status_code == 400, response.content
    assert response.json() == {"errors": {"items": {"3": {"command": ["Text may not contain NUL characters."]}}}}
    latin = b'{"items": [' + good + b", " + b"{" + JOB + b', "name": "caf\xe9", "command": "x"}' + b"]}"
    response = api_as(alice).post("/api/v1/workloads/bulk/", latin, content_type="application/json")
    assert set(response.json()["errors"]["items"]["1"]) == {"name"}
    assert not Workload.objects.exists()


def test_the_submit_form_names_the_field_of_a_nul(client, alice):
    client.force_login(alice)
    page = client.post("/workloads/new/", {"queue": "train", "kind": "training", "name": "a\x00b", "command": "x"})
    assert page.status_code in (200, 400, 422)
    form = page.context["form"]
    assert "name" in form.errors, form.errors
    assert not Workload.objects.exists()

"""REST API v1 for workloads and queues, driven as scripts and agents drive it."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

import pytest
from rest_framework.test import APIClient

from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State

URL = "/api/v1/workloads/"
BODY = {
    "queue": "train",
    "kind": "training",
    "name": "llama-ft",
    "command": "python train.py",
    "resources": {"gpus": 2, "cpus": 16, "memory_gb": 64, "nodes": 1},
    "runtime_limit_minutes": 240,
    "priority": "normal",
}


def post(client, body=None, **extra):
    return client.post(URL, json.dumps(body or BODY), content_type="application/json", **extra)


def test_create_answers_201_with_the_workload(api_as, alice):
    response = post(api_as(alice))
    assert response.status_code == 201, response.content
    data = response.json()
    assert data["state"] == "pending"
    assert data["resources"] == {"gpus": 2, "cpus": 16, "memory_gb": 64, "nodes": 1}
    assert (data["queue"], data["group"], data["owner"], data["runtime_limit_minutes"]) == (
        "train",
        "vision",
        "alice",
        240,
    )
    assert [e["to_state"] for e in data["events"]] == ["pending"]


def test_fractional_gpus_round_trip(api_as, alice):
    response = post(api_as(alice), BODY | {"resources": {"gpus": 0.25}})
    assert response.status_code == 201
    assert response.json()["resources"]["gpus"] == 0.25
    assert Workload.objects.get().gpus_milli == 250


@pytest.mark.parametrize(
    ("body", "field"),
    [
        (BODY | {"resources": {"gpus": -1}}, "resources.gpus"),
        (BODY | {"resources": {"gpus": 1e12}}, "resources.gpus"),
        (BODY | {"resources": {"gpus": 0.0001}}, "resources.gpus"),
        (BODY | {"resources": {"cpus": "many"}}, "resources.cpus"),
        (BODY | {"resources": {"nodes": 10**12}}, "resources.nodes"),
        (BODY | {"resources": {"memory_gb": 10**6}}, "resources.memory_gb"),
        (BODY | {"queue": "no-such-queue"}, "queue"),
        (BODY | {"command": "x" * 70_000}, "command"),
        (BODY | {"name": "../../etc/passwd"}, "name"),
        (BODY | {"runtime_limit_minutes": -5}, "runtime_limit_minutes"),
        ({k: v for k, v in BODY.items() if k != "name"}, "name"),
    ],
)
def test_bad_input_answers_400_with_field_errors(api_as, alice, body, field):
    response = post(api_as(alice), body)
    assert response.status_code == 400
    errors = response.json()["errors"]
    assert field in errors, errors
    assert all(isinstance(m, str) and m for m in errors[field])
    assert not Workload.objects.exists()


def test_a_body_that_is_not_utf8_answers_400_naming_the_field(api_as, alice):
    raw = b'{"queue": "train", "kind": "training", "name": "\xff\xfe", "command": "true"}'
    response = api_as(alice).post(URL, raw, content_type="application/json")
    assert response.status_code == 400
    assert list(response.json()["errors"]) == ["name"]
    assert not Workload.objects.exists()


def test_a_queue_the_caller_may_not_use_answers_403(api_as, charlie):
    from portal.queues.models import Queue

    Queue.objects.get(slug="train").allowed_groups.remove(charlie.memberships.get().group)
    response = post(api_as(charlie))
    assert response.status_code == 403
    assert response.json()["errors"]["detail"]


def test_without_a_token_the_api_answers_401(cast):
    response = post(APIClient())
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_revoked_token_answers_401(alice):
    from django.utils import timezone

    from portal.accounts.models import ApiToken

    token, plaintext = ApiToken.issue(alice, "old")
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert client.get(URL).status_code == 401


def test_tokens_are_stored_hashed_and_record_their_use(api_as, alice):
    from portal.accounts.models import ApiToken

    client = api_as(alice)
    assert client.get(URL).status_code == 200
    token = ApiToken.objects.get(user=alice)
    plaintext = client._credentials["HTTP_AUTHORIZATION"].split()[1]
    assert plaintext not in (token.digest, token.hint)
    assert len(token.digest) == 64
    assert token.last_used_at is not None


def test_another_teams_workload_answers_404(api_as, alice, charlie, submit):
    workload = submit(alice)
    client = api_as(charlie)
    assert client.get(f"{URL}{workload.pk}/").status_code == 404
    assert client.post(f"{URL}{workload.pk}/cancel/").status_code == 404
    assert client.get(URL).json()["count"] == 0
    assert Workload.objects.get().state == State.PENDING


def test_list_filters(api_as, alice, bob, submit):
    submit(alice, name="a1")
    done = submit(alice, name="a2")
    done.state = State.SUCCEEDED
    done.save()
    submit(bob, name="b1", kind="batch")
    client = api_as(alice)

    def names(query):
        response = client.get(URL + query)
        assert response.status_code == 200
        return sorted(w["name"] for w in response.json()["results"])

    assert names("") == ["a1", "a2", "b1"]
    assert names("?mine=true") == ["a1", "a2"]
    assert names("?state=succeeded") == ["a2"]
    assert names("?kind=batch") == ["b1"]
    assert names("?queue=train&group=vision") == ["a1", "a2", "b1"]
    assert names("?queue=notebooks") == []
    assert client.get(URL + "?state=bogus").status_code == 400


def test_cancel_through_the_api(api_as, alice, submit):
    workload = submit(alice)
    response = api_as(alice).post(f"{URL}{workload.pk}/cancel/")
    assert response.status_code == 200
    assert response.json()["state"] == "cancelled"


def test_a_member_may_not_cancel_a_teammates_work(api_as, alice, bob, submit):
    workload = submit(bob)
    assert api_as(alice).post(f"{URL}{workload.pk}/cancel/").status_code == 403
    assert Workload.objects.get().state == State.PENDING


def test_the_idempotency_key_header_makes_submit_safe_to_retry(api_as, alice):
    client = api_as(alice)
    first = post(client, HTTP_IDEMPOTENCY_KEY="retry-me")
    second = post(client, HTTP_IDEMPOTENCY_KEY="retry-me")
    assert (first.status_code, second.status_code) == (201, 200)
    assert first.json()["id"] == second.json()["id"]
    conflict = post(client, BODY | {"name": "changed"}, HTTP_IDEMPOTENCY_KEY="retry-me")
    assert conflict.status_code == 422
    assert Workload.objects.count() == 1


@pytest.mark.parametrize("n", [1, 20])
def test_listing_takes_the_same_number_of_queries_for_1_or_20_workloads(
    api_as, alice, submit, n, django_assert_num_queries
):
    for i in range(n):
        submit(alice, name=f"job-{i}")
    client = api_as(alice)
    client.get(URL)  # the first request records the token's use: one extra write
    # token lookup, count, page
    with django_assert_num_queries(3):
        assert len(client.get(URL).json()["results"]) == n


def test_detail_takes_a_fixed_number_of_queries(api_as, alice, submit, django_assert_num_queries):
    workload = submit(alice)
    client = api_as(alice)
    client.get(URL)
    # token lookup, workload with its relations, events
    with django_assert_num_queries(3):
        assert client.get(f"{URL}{workload.pk}/").status_code == 200


def test_the_answer_s_fields_are_worked_out_once_and_each_answer_binds_copies_of_its_own(
    api_as, alice, submit, monkeypatch
):
    from rest_framework import serializers

    from portal.api.serializers import ModelOut, WorkloadDetailOut

    workload = submit(alice, name="first")
    built: list[str] = []
    real = serializers.ModelSerializer.build_field

    def build_field(*args):
        built.append(args[1])  # (the serializer, the field's name, ...)
        return real(*args)

    monkeypatch.setattr(serializers.ModelSerializer, "build_field", build_field)
    monkeypatch.setattr(ModelOut, "_built", {})
    first = WorkloadDetailOut(workload)
    assert "state" in first.fields
    assert "state" in built  # the first worked them out from the model
    second, before = WorkloadDetailOut(submit(alice, name="second")), len(built)
    assert "state" in second.fields
    assert len(built) == before  # the second did not
    assert first.fields["state"] is not second.fields["state"]
    assert first.fields["state"].parent is first
    assert second.fields["state"].parent is second
    assert (first.data["name"], second.data["name"]) == ("first", "second")
    assert api_as(alice).get(f"{URL}{workload.pk}/").json() == {**first.data, "id": str(workload.pk)}


def test_an_answer_from_the_plan_is_what_drf_itself_would_answer(alice, bob, submit):
    """ModelOut answers from a plan made once per class; DRF's own field-by-field answer is the reference, for
    workloads in every shape an answer takes (an array with its elements, a finished one, a notebook's lease
    and link, one placed on a fabric) and for readers with and without the right to its link."""
    from datetime import timedelta

    from django.utils import timezone
    from rest_framework import serializers
    from rest_framework.test import APIRequestFactory

    from portal.api.serializers import WorkloadDetailOut, WorkloadOut
    from portal.queues.models import Fabric

    plain = submit(alice, name="plain")
    array = submit(alice, queue="train", kind="batch", name="sweep", array="0-2")
    done = submit(alice, name="done")
    Workload.objects.filter(pk=done.pk).update(
        state=State.FAILED, exit_code=3, finished_at=timezone.now(), fabric=Fabric.objects.first(),
        connect_url="http://testserver/connect/x/", shared_with_team=True,
        lease_ends_at=timezone.now() + timedelta(hours=2), estimated_start=timezone.now(),
    )  # fmt: skip
    nb = submit(alice, queue="notebooks", kind="notebook", name="nb", command="", lease_hours=Decimal("1.5"),
                runtime_limit_minutes=60)  # fmt: skip
    Workload.objects.filter(pk=nb.pk).update(connect_url="http://testserver/connect/nb/")
    workloads = list(
        Workload.objects.filter(pk__in=[plain.pk, array.pk, done.pk, nb.pk])
        .select_related("queue", "group", "owner", "fabric")
        .prefetch_related("events")
    )
    assert len(workloads) == 4
    for reader in (alice, bob):
        request = APIRequestFactory().get("/")
        request.user = reader
        for shape in (WorkloadOut, WorkloadDetailOut):
            for w in workloads:
                ours = shape(w, context={"request": request})
                drfs = shape(w, context={"request": request})
                reference = serializers.Serializer.to_representation(drfs, w)
                assert ours.to_representation(w) == reference
                assert list(ours.to_representation(w)) == list(reference)  # in the same order
    answered = {w.name: WorkloadDetailOut(w).data for w in workloads}
    assert answered["sweep"]["elements"] == {"pending": 3}
    assert answered["done"]["exit_code"] == 3
    assert answered["done"]["fabric"] == Fabric.objects.first().name
    assert answered["nb"]["lease_hours"] == 1.5
    assert [e["to_state"] for e in answered["plain"]["events"]] == ["pending"]


def test_the_plan_binds_what_is_not_plain_for_each_answer_and_leaves_out_what_drf_leaves_out(alice, submit):
    """A field that reads its serializer's context (a related field, say) is bound afresh for each answer, so
    it sees the context of the serializer answering; an optional attribute the instance lacks is left out."""
    from rest_framework import serializers

    from portal.api.serializers import ModelOut

    class Context(serializers.Field):
        def to_representation(self, value):
            return f"{value}@{self.context['where']}"

    class Shape(ModelOut[Workload]):
        seen = Context(source="name")
        owner: serializers.PrimaryKeyRelatedField[Any] = serializers.PrimaryKeyRelatedField(read_only=True)
        nickname = serializers.CharField(required=False)  # no such attribute: left out
        said = serializers.CharField(source="get_state_display")  # a method: DRF calls it
        queue_slug = serializers.CharField(source="queue.slug")

        class Meta:
            model = Workload
            fields = ["id", "seen", "owner", "nickname", "said", "queue_slug"]

    workload = submit(alice, name="ctx")
    first, second = Shape(workload, context={"where": "one"}).data, Shape(workload, context={"where": "two"}).data
    slug = workload.queue.slug
    said = {"said": "Pending", "queue_slug": slug}
    assert first == {"id": str(workload.pk), "seen": "ctx@one", "owner": alice.pk} | said
    assert second["seen"] == "ctx@two"
    assert dict(first) == serializers.Serializer.to_representation(Shape(workload, context={"where": "one"}), workload)


def test_a_list_of_plain_rows_is_answered_from_its_plan_and_one_that_reads_its_context_is_bound_afresh(
    alice, submit, monkeypatch
):
    """A workload's events (a list of a ModelOut with plain fields alone) are answered item by item from their
    own plan, with nothing copied for each answer; a list whose rows read the serializer's context is bound
    afresh for each answer, as DRF does, and sees the context of the serializer answering."""
    import copy

    from rest_framework import serializers

    from portal.api.serializers import EventOut, ModelOut

    class Seen(ModelOut[WorkloadEvent]):
        where = serializers.SerializerMethodField()

        class Meta:
            model = WorkloadEvent
            fields = ["to_state", "where"]

        def get_where(self, event):
            return self.context["where"]

    class Shape(ModelOut[Workload]):
        events = EventOut(many=True, read_only=True)
        seen = Seen(many=True, read_only=True, source="events")

        class Meta:
            model = Workload
            fields = ["name", "events", "seen"]

    workload = submit(alice, name="listed")
    Shape(workload, context={"where": "zero"}).to_representation(workload)  # the plan made
    real = copy.deepcopy
    for where in ("one", "two"):
        copied: list[str] = []  # the lists copied for this answer, by the kind of row in them

        def deepcopy(x, *args, copied=copied):
            if isinstance(x, serializers.ListSerializer):
                copied.append(type(x.child).__name__)
            return real(x, *args)

        with monkeypatch.context() as patch:
            patch.setattr(copy, "deepcopy", deepcopy)
            answer = Shape(workload, context={"where": where}).to_representation(workload)
        assert copied == ["Seen"]  # the list that reads its context; the events' list is not copied
        reference = serializers.Serializer.to_representation(Shape(workload, context={"where": where}), workload)
        assert answer == reference
        assert answer["seen"] == [{"to_state": "pending", "where": where}]
        assert [e["to_state"] for e in answer["events"]] == ["pending"]


def test_copied_fields_bind_to_their_own_serializer_and_a_field_with_a_child_gets_a_child_of_its_own():
    from rest_framework import serializers

    from portal.api.serializers import CopiedFields, WorkloadIn, copied

    class Shape(CopiedFields):
        tags = serializers.ListField(child=serializers.CharField(max_length=3))
        name = serializers.CharField(max_length=5)

    one, two = Shape(data={"tags": ["abc"], "name": "ok"}), Shape(data={"tags": ["abcd"], "name": "too long"})
    assert one.is_valid(), one.errors
    assert not two.is_valid()
    assert set(two.errors) == {"tags", "name"}  # the shared length checks still hold for each
    assert one.fields["name"] is not two.fields["name"]
    assert one.fields["name"].parent is one
    tags, declared_tags = one.fields["tags"], Shape._declared_fields["tags"]
    assert isinstance(tags, serializers.ListField)
    assert isinstance(declared_tags, serializers.ListField)
    assert tags.child is not declared_tags.child
    assert vars(tags.child)["parent"] is tags  # (the stubs type a parent as a serializer)
    declared = WorkloadIn._declared_fields
    fresh = copied(declared)
    assert fresh["resources"] is not declared["resources"]
    resources, other = fresh["resources"], WorkloadIn().fields["resources"]
    assert isinstance(resources, serializers.Serializer)
    assert isinstance(other, serializers.Serializer)
    assert resources.fields["gpus"] is not other.fields["gpus"]
    assert all(f.parent is None for f in declared.values())  # what is copied is never bound itself


def test_queues_list_what_the_caller_may_use_with_figures(api_as, alice, submit, django_assert_num_queries):
    from portal.queues.models import Queue

    submit(alice)
    for slug in ("notebooks", "scripts"):
        Queue.objects.get(slug=slug).allowed_groups.clear()
    client = api_as(alice)
    client.get("/api/v1/queues/")
    with django_assert_num_queries(4):  # token, queues, counts, waits
        response = client.get("/api/v1/queues/")
    assert [(q["slug"], q["backlog"], q["running"]) for q in response.json()] == [("train", 1, 0)]


def test_the_openapi_schema_describes_the_contract(api_as, alice):
    response = api_as(alice).get("/api/v1/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert response.status_code == 200
    schema = json.loads(response.content)
    assert {
        "/api/v1/workloads/",
        "/api/v1/workloads/{id}/",
        "/api/v1/workloads/{id}/cancel/",
        "/api/v1/workloads/{id}/extend/",
        "/api/v1/queues/",
    } <= set(schema["paths"])
    assert schema["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"


def test_a_notebooks_connect_link_is_its_owners_until_shared_with_the_team(api_as, alice, bob, submit):
    workload = submit(alice)
    link = f"http://testserver/connect/{workload.pk}/lab"
    Workload.objects.filter(pk=workload.pk).update(connect_url=link)
    assert api_as(alice).get(f"{URL}{workload.pk}/").json()["connect_url"] == link
    assert api_as(bob).get(f"{URL}{workload.pk}/").json()["connect_url"] == ""
    assert api_as(bob).get(URL).json()["results"][0]["connect_url"] == ""
    Workload.objects.filter(pk=workload.pk).update(shared_with_team=True)
    assert api_as(bob).get(URL).json()["results"][0]["connect_url"] == link


def notebook(submit, user):
    return submit(user, queue="notebooks", kind="notebook", name="nb", command="", lease_hours=Decimal(1),
                  runtime_limit_minutes=60)  # fmt: skip


def extend(client, workload, body):
    return client.post(f"{URL}{workload.pk}/extend/", json.dumps(body), content_type="application/json")


def test_extend_a_lease_through_the_api(api_as, alice, submit):
    workload = notebook(submit, alice)
    response = extend(api_as(alice), workload, {"hours": 2})
    assert response.status_code == 200
    assert response.json()["events"][-1]["reason"] == "lease extended by 2 hours, to 3 hours in all"
    assert response.json()["runtime_limit_minutes"] == 180


@pytest.mark.parametrize(
    ("body", "field"),
    [({}, "hours"), ({"hours": "many"}, "hours"), ({"hours": 0}, "hours"), ({"hours": 48}, "hours")],
)
def test_a_bad_extension_answers_400_on_hours(api_as, alice, submit, body, field):
    response = extend(api_as(alice), notebook(submit, alice), body)
    assert response.status_code == 400
    assert list(response.json()["errors"]) == [field]


def test_extend_answers_403_to_a_teammate_404_to_another_team_and_409_when_it_is_over(
    api_as, alice, bob, charlie, submit
):
    workload = notebook(submit, bob)
    assert extend(api_as(alice), workload, {"hours": 1}).status_code == 403
    assert extend(api_as(charlie), workload, {"hours": 1}).status_code == 404
    Workload.objects.filter(pk=workload.pk).update(state=State.SUCCEEDED)
    response = extend(api_as(bob), workload, {"hours": 1})
    assert response.status_code == 409
    assert response.json() == {"errors": {"detail": ["It has already succeeded; there is no lease left to extend."]}}


def patch(client, workload, body):
    return client.patch(f"{URL}{workload.pk}/", json.dumps(body), content_type="application/json")


def test_patch_makes_a_lease_longer_as_the_contract_says(api_as, alice, submit):
    workload = notebook(submit, alice)
    response = patch(api_as(alice), workload, {"lease_hours": 3})
    assert response.status_code == 200
    assert response.json()["lease_hours"] == 3
    assert response.json()["runtime_limit_minutes"] == 180
    assert response.json()["events"][-1]["reason"] == "lease extended by 2 hours, to 3 hours in all"


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ({"lease_hours": 1}, "lease_hours", "can only be made longer: it is 1 hour now"),
        ({"lease_hours": 0.5}, "lease_hours", "can only be made longer"),
        ({"lease_hours": 48}, "lease_hours", "allows leases of at most"),
        ({}, "detail", "Send priority, lease_hours or both."),
        ({"priority": "urgent"}, "priority", "Choose a priority tier team vision may use: low, normal, high."),
    ],
)
def test_a_bad_patch_answers_400_and_changes_nothing(api_as, alice, submit, body, field, words):
    workload = notebook(submit, alice)
    response = patch(api_as(alice), workload, body)
    assert response.status_code == 400
    assert words in " ".join(response.json()["errors"][field])
    workload.refresh_from_db()
    assert (workload.lease_s, workload.priority) == (3600, "normal")


def test_a_lead_patches_priority_and_lease_together_and_a_member_may_not_raise_priority(api_as, alice, bob, submit):
    workload = notebook(submit, alice)
    assert patch(api_as(alice), workload, {"priority": "high", "lease_hours": 2}).status_code == 403
    workload.refresh_from_db()
    assert (workload.lease_s, workload.priority) == (3600, "normal")  # checked first, so nothing changed
    response = patch(api_as(bob), workload, {"priority": "high", "lease_hours": 2})
    assert response.status_code == 200
    assert (response.json()["priority"], response.json()["lease_hours"]) == ("high", 2)

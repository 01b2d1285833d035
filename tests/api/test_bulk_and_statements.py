"""The submit path at agent scale: a submit's statements pinned, bulk submits all or nothing, tokens under a
keyed digest (and those issued before it still work)."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest

from portal.accounts.models import ApiToken, AuditEvent, _digest
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State

URL = "/api/v1/workloads/"
BULK = "/api/v1/workloads/bulk/"
JOB = {"queue": "train", "kind": "training", "name": "job", "command": "true", "resources": {"gpus": 1}}


def post(client, url, body, **extra):
    return client.post(url, json.dumps(body), content_type="application/json", **extra)


def items(n, **fields):
    return [JOB | {"name": f"job-{i}"} | fields for i in range(n)]


# --- One submit -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("key", [None, "retry-me"])
def test_a_submit_takes_five_statements_with_the_kick_among_them(
    api_as, alice, settings, key, django_assert_num_queries
):
    settings.GRIDLANE_KICK_WORKER = True
    client = api_as(alice)
    client.get(URL)  # the token's use this minute is recorded once (two writes), not on every request
    extra = {"HTTP_IDEMPOTENCY_KEY": key} if key else {}
    # token (with its user and agent), rate-limit upsert, queue with targets and fabrics, the caller's teams
    # for it, and one statement that inserts the workload and its event and sends the NOTIFY. The budget is 6.
    with django_assert_num_queries(5) as captured:
        response = post(client, URL, JOB, **extra)
    assert response.status_code == 201, response.content
    assert "pg_notify" in captured.captured_queries[-1]["sql"]
    data = response.json()
    assert [e["to_state"] for e in data["events"]] == ["pending"]
    assert (data["queue"], data["group"], data["owner"], data["state"]) == ("train", "vision", "alice", "pending")
    stored = Workload.objects.get(pk=data["id"])
    assert stored.events.get().reason == "submitted"
    assert stored.idempotency_key == key


def test_a_submitted_workload_saves_as_an_update(alice, submit):
    workload = submit(alice)
    workload.name = "renamed"
    workload.save()
    assert Workload.objects.get(pk=workload.pk).name == "renamed"


def test_a_tokens_first_use_in_a_minute_costs_one_statement_more_and_stays_within_six(
    api_as, alice, django_assert_num_queries
):
    client = api_as(alice)
    with django_assert_num_queries(6) as captured:  # last-used time and its audit event in one statement
        assert post(client, URL, JOB).status_code == 201
    assert 'INSERT INTO "accounts_auditevent"' in captured.captured_queries[1]["sql"]
    assert AuditEvent.objects.filter(action="token.used", actor=alice).count() == 1


def test_an_agents_submit_takes_five_statements_too(api_as, agent, django_assert_num_queries):
    client = api_as(agent.user)
    client.get(URL)
    with django_assert_num_queries(5):
        assert post(client, URL, JOB).status_code == 201


def test_a_repeated_key_answers_with_the_first_workload_even_after_its_queue_closed(api_as, alice):
    from portal.queues.models import Queue

    client = api_as(alice)
    first = post(client, URL, JOB, HTTP_IDEMPOTENCY_KEY="k")
    Queue.objects.filter(slug="train").update(enabled=False)
    again = post(client, URL, JOB, HTTP_IDEMPOTENCY_KEY="k")
    assert (first.status_code, again.status_code) == (201, 200)
    assert again.json()["id"] == first.json()["id"]
    assert post(client, URL, JOB, HTTP_IDEMPOTENCY_KEY="other").status_code == 400


def test_the_answer_to_a_submit_is_what_a_get_answers(api_as, alice):
    client = api_as(alice)
    created = post(client, URL, JOB | {"lease_hours": None}).json()
    assert client.get(f"{URL}{created['id']}/").json() == created


# --- Tokens ---------------------------------------------------------------------------------------------


def test_a_token_issued_under_the_bare_sha256_still_works_and_is_rewritten_under_the_keyed_digest(alice, api_as):
    token, plaintext = ApiToken.issue(alice, "old")
    keyed = token.digest
    assert keyed != hashlib.sha256(plaintext.encode()).hexdigest()
    ApiToken.objects.filter(pk=token.pk).update(digest=hashlib.sha256(plaintext.encode()).hexdigest())
    client = api_as(alice)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert client.get(URL).status_code == 200
    token.refresh_from_db()
    assert token.digest == keyed
    assert client.get(URL).status_code == 200


def test_a_token_survives_a_rotated_secret_key_kept_as_a_fallback(alice, api_as, settings):
    token, plaintext = ApiToken.issue(alice, "before")
    settings.SECRET_KEY_FALLBACKS = [settings.SECRET_KEY]
    settings.SECRET_KEY = "a-new-secret-key-for-this-test-only-0123456789"
    client = api_as(alice)
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    assert client.get(URL).status_code == 200
    token.refresh_from_db()
    assert token.digest == _digest(plaintext)  # rewritten under the new key at its first use
    settings.SECRET_KEY_FALLBACKS = []
    assert client.get(URL).status_code == 200


def test_concurrent_first_uses_of_a_token_record_one_audit_event(alice, api_as):
    from portal.accounts import tokens

    _token, plaintext = ApiToken.issue(alice, "twice")
    seen_by_both = ApiToken.lookup(plaintext), ApiToken.lookup(plaintext)
    request = type("R", (), {"method": "GET", "path": URL, "META": {}})()
    for copy in seen_by_both:
        assert copy is not None
        tokens.note_use(copy, request)
    assert AuditEvent.objects.filter(action="token.used").count() == 1


# --- Bulk -----------------------------------------------------------------------------------------------


def test_a_bulk_submit_creates_every_item_in_order(api_as, alice, django_assert_max_num_queries):
    client = api_as(alice)
    client.get(URL)
    body = {"items": [*items(3), JOB | {"name": "keyed", "idempotency_key": "b-1"}]}
    # token, rate limit, the keys, queue, teams, a savepoint, workloads, events, kick, release
    with django_assert_max_num_queries(10):
        response = post(client, BULK, body)
    assert response.status_code == 201, response.content
    got = response.json()["items"]
    assert [i["name"] for i in got] == ["job-0", "job-1", "job-2", "keyed"]
    assert all(i["created"] and i["state"] == "pending" for i in got)
    assert Workload.objects.count() == 4
    assert WorkloadEvent.objects.filter(to_state=State.PENDING, reason="submitted").count() == 4
    assert Workload.objects.get(name="keyed").idempotency_key == "b-1"


def test_a_thousand_workloads_take_a_bounded_number_of_statements(api_as, alice, django_assert_max_num_queries):
    client = api_as(alice)
    client.get(URL)
    with django_assert_max_num_queries(12):
        response = post(client, BULK, {"items": items(1000)})
    assert response.status_code == 201
    assert Workload.objects.filter(owner=alice).count() == 1000


def test_one_bad_item_rejects_the_whole_batch_and_names_its_index(api_as, alice):
    body = {"items": [*items(2), JOB | {"resources": {"gpus": -1}}, JOB | {"name": ""}, *items(1)]}
    response = post(api_as(alice), BULK, body)
    assert response.status_code == 400
    errors = response.json()["errors"]["items"]
    assert set(errors) == {"2", "3"}
    assert "resources.gpus" in errors["2"]
    assert "name" in errors["3"]
    assert Workload.objects.count() == 0


def test_an_item_the_service_refuses_is_named_too_and_nothing_is_created(api_as, alice):
    body = {"items": [*items(2), JOB | {"runtime_limit_minutes": 10**6}]}
    response = post(api_as(alice), BULK, body)
    assert response.status_code == 400
    assert list(response.json()["errors"]["items"]) == ["2"]
    assert "runtime_limit_minutes" in response.json()["errors"]["items"]["2"]
    assert Workload.objects.count() == 0


def test_1001_items_are_a_400(api_as, alice):
    response = post(api_as(alice), BULK, {"items": items(1001)})
    assert response.status_code == 400
    assert "items" in response.json()["errors"]
    assert Workload.objects.count() == 0


def test_no_items_are_a_400(api_as, alice):
    assert post(api_as(alice), BULK, {"items": []}).status_code == 400


def test_a_key_twice_in_one_batch_is_refused(api_as, alice):
    body = {"items": [JOB | {"idempotency_key": "same"}, JOB | {"name": "b", "idempotency_key": "same"}]}
    response = post(api_as(alice), BULK, body)
    assert response.status_code == 400
    assert response.json()["errors"]["items"] == {"1": {"idempotency_key": ["Item 0 has the same key."]}}
    assert Workload.objects.count() == 0


def test_each_item_is_idempotent_by_its_key(api_as, alice):
    client = api_as(alice)
    first = post(client, BULK, {"items": [JOB | {"idempotency_key": "a"}]})
    assert first.status_code == 201
    again = post(
        client, BULK, {"items": [JOB | {"idempotency_key": "a"}, JOB | {"name": "new", "idempotency_key": "b"}]}
    )
    assert again.status_code == 201
    got = again.json()["items"]
    assert got[0] == first.json()["items"][0] | {"created": False}
    assert got[1]["created"]
    replayed = post(
        client, BULK, {"items": [JOB | {"idempotency_key": "a"}, JOB | {"name": "new", "idempotency_key": "b"}]}
    )
    assert replayed.status_code == 200
    assert Workload.objects.count() == 2
    changed = post(client, BULK, {"items": [JOB | {"name": "other", "idempotency_key": "a"}]})
    assert changed.status_code == 400
    assert "idempotency_key" in changed.json()["errors"]["items"]["0"]


def test_a_queue_the_caller_may_not_use_is_a_403_naming_the_item(api_as, charlie):
    from portal.queues.models import Queue

    Queue.objects.get(slug="train").allowed_groups.remove(charlie.memberships.get().group)
    response = post(api_as(charlie), BULK, {"items": [JOB, JOB | {"name": "two"}]})
    assert response.status_code == 403
    assert set(response.json()["errors"]["items"]) == {"0", "1"}
    assert "may not use" in response.json()["errors"]["items"]["0"]["queue"][0]
    assert Workload.objects.count() == 0


def test_a_bulk_submit_counts_once_against_the_rate_limit(api_as, alice, settings):
    settings.GRIDLANE_SUBMIT_RATE_LIMIT = 1
    client = api_as(alice)
    assert post(client, BULK, {"items": items(5)}).status_code == 201
    refused = post(client, BULK, {"items": items(5)})
    assert refused.status_code == 429
    assert "Retry-After" in refused
    assert Workload.objects.count() == 5


def test_the_bulk_endpoint_is_in_the_schema(api_as, alice):
    schema = api_as(alice).get("/api/v1/schema/", HTTP_ACCEPT="application/json").json()
    assert "post" in schema["paths"]["/api/v1/workloads/bulk/"]


def test_a_thousand_workloads_are_two_copies_in_a_fixed_number_of_statements(
    api_as, alice, settings, django_assert_num_queries
):
    settings.GRIDLANE_KICK_WORKER = True
    client = api_as(alice)
    client.get(URL)
    # token, rate limit, queue with targets and fabrics, the caller's teams, a savepoint, the workloads' COPY,
    # the events' COPY, the kick, the release: the same for 1 item as for 1,000.
    with django_assert_num_queries(9) as captured:
        response = post(client, BULK, {"items": [*items(999), JOB | {"name": "last", "resources": {"gpus": 2}}]})
    assert response.status_code == 201, response.content
    copies = [q["sql"] for q in captured.captured_queries if q["sql"].startswith("COPY")]
    assert copies == [
        'COPY "workloads_workload" (' + copies[0].split("(", 1)[1].split(")", 1)[0] + ") FROM STDIN (1000 rows)",
        'COPY "workloads_workloadevent" ("workload_id", "at", "actor_id", "from_state", "to_state", "reason") '
        "FROM STDIN (1000 rows)",
    ]
    stored = Workload.objects.filter(owner=alice)
    assert stored.count() == 1000
    assert set(stored.values_list("state", flat=True)) == {"pending"}
    assert stored.get(name="last").gpus_milli == 2000
    assert stored.get(name="job-7").gpus_milli == 1000
    assert WorkloadEvent.objects.filter(workload__owner=alice, reason="submitted", actor=alice).count() == 1000


BAD_ITEMS = [
    JOB | {"name": ""},
    JOB | {"name": "-starts-with-a-dash"},
    JOB | {"command": "   "},
    JOB | {"command": ""},
    JOB | {"name": "", "resources": {"gpus": -1}},
    JOB | {"name": "x" * 300, "runtime_limit_minutes": 10**6},
    JOB | {"command": " ", "priority": "no-such-tier"},
]


@pytest.mark.parametrize("bad", BAD_ITEMS, ids=range(len(BAD_ITEMS)))
def test_an_item_of_a_shape_seen_before_gets_the_errors_a_single_submit_gets(api_as, alice, bad):
    """Items are checked once per shape (all but their name and command), each name and command on its own:
    the errors of a bad item are those the same body gets alone, whether its shape came before or not."""
    client = api_as(alice)
    alone = post(client, URL, bad)
    assert alone.status_code == 400
    response = post(client, BULK, {"items": [*items(2), bad, JOB | {"name": "after"}, bad]})
    assert response.status_code == 400
    errors = response.json()["errors"]["items"]
    assert errors == {"2": alone.json()["errors"], "4": alone.json()["errors"]}
    assert Workload.objects.count() == 0


def test_items_of_different_shapes_keep_their_own_requests_and_fingerprints(api_as, alice):
    """Each keyed item keeps the fingerprint of its own request (what a repeat of its key is compared with); an
    item without a key is never replayed, and keeps none."""
    from portal.api.serializers import BulkItemIn

    shapes: list[dict[str, Any]] = [
        JOB | {"name": "small", "resources": {"gpus": 0.5}, "idempotency_key": "small"},
        JOB | {"name": "big", "resources": {"gpus": 4, "cpus": 8}, "idempotency_key": "big"},
        JOB | {"name": "small-2", "command": "python other.py", "resources": {"gpus": 0.5}, "idempotency_key": "s2"},
        JOB | {"name": "long", "runtime_limit_minutes": 120, "idempotency_key": "long"},
        JOB | {"name": "unkeyed", "resources": {"gpus": 0.5}},
    ]
    response = post(api_as(alice), BULK, {"items": shapes})
    assert response.status_code == 201, response.content
    stored = {w.name: w for w in Workload.objects.all()}
    assert [(stored[n].gpus_milli, stored[n].cpus_milli) for n in ("small", "big", "small-2")] == [
        (500, 1000),
        (4000, 8000),
        (500, 1000),
    ]
    assert stored["small-2"].command == "python other.py"
    assert stored["long"].runtime_limit_s == 7200
    assert len({w.pk for w in stored.values()}) == 5
    for body in shapes[:4]:  # each as a single submit of the same body with a key would have fingerprinted it
        assert stored[body["name"]].request_fingerprint == BulkItemIn.parse(body).fingerprint()
    assert stored["unkeyed"].request_fingerprint == ""

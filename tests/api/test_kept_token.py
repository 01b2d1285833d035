"""The single submit's token, kept by a web process for a moment (portal.api.auth.kept): the
next submit with it sends no statement of its own, and is confirmed by the statement that records it, which
writes only while the generation is the one the token was read under. Whatever would end the token's use, by a
write (revoked, its user deactivated, its agent disabled: any writer) or by the clock (expired), is seen by the
very next request; and nothing else is answered to, or counted for, a token kept unconfirmed until it is looked up
again. The clock is frozen wherever a test relies on the token being kept."""

from __future__ import annotations

import importlib
import json
import re
from datetime import timedelta
from typing import Any

import pytest
import time_machine
from django.conf import settings
from django.contrib.auth.models import update_last_login
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.test import APIClient

from portal.accounts import tokens
from portal.accounts.models import ApiToken, AuditEvent, RateLimitWindow, ServiceIdentity
from portal.api import auth
from portal.workloads import context
from portal.workloads.models import Workload

generation_migration = importlib.import_module("portal.workloads.migrations.0013_submit_generation")
credentials_migration = importlib.import_module("portal.workloads.migrations.0014_credentials_move_the_generation")

URL = "/api/v1/workloads/"
JOB = {"queue": "train", "kind": "training", "command": "true", "resources": {"gpus": 1}}


def client_of(user: Any, expires_at: Any = None) -> tuple[ApiToken, APIClient]:
    token, plaintext = ApiToken.issue(user, "kept", expires_at=expires_at)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {plaintext}")
    return token, client


def post(client: APIClient, name: str, **fields: Any) -> Any:
    return client.post(URL, json.dumps(JOB | {"name": name} | fields), content_type="application/json")


def generation() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {context.GENERATION_SQL}")
        return int(cursor.fetchone()[0])


def counted(user: Any) -> int:
    return sum(RateLimitWindow.objects.filter(key=f"submit:{user.pk}").values_list("count", flat=True))


@pytest.fixture
def frozen() -> Any:
    with time_machine.travel(timezone.now(), tick=False) as traveller:
        yield traveller


@pytest.fixture
def kept(alice: Any, frozen: Any, django_assert_num_queries: Any) -> tuple[ApiToken, APIClient]:
    """alice's token, kept with her context by a first submit: the next one sends one statement."""
    token, client = client_of(alice)
    assert post(client, "first").status_code == 201
    with django_assert_num_queries(1):
        assert post(client, "kept").status_code == 201
    return token, client


def nothing_more(user: Any, workloads: int = 2, count: int = 2) -> None:
    """Nothing written or counted past the two submits of `kept`."""
    assert Workload.objects.filter(owner=user).count() == workloads
    assert counted(user) == count


def revoke_with_sql(token: ApiToken) -> None:
    with connection.cursor() as cursor:
        cursor.execute(f'UPDATE "{ApiToken._meta.db_table}" SET revoked_at = now() WHERE id = %s', [token.pk])  # noqa: S608


ENDINGS = {
    "revoked": lambda token: tokens.revoke(token, by=None),
    "revoked by raw SQL": revoke_with_sql,
    "expiry set to the past": lambda token: ApiToken.objects.filter(pk=token.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    ),
    "deleted": lambda token: ApiToken.objects.filter(pk=token.pk).delete(),
    "its user deactivated": lambda token: type(token.user).objects.filter(pk=token.user_id).update(is_active=False),
}


@pytest.mark.parametrize("ending", list(ENDINGS))
def test_a_write_that_ends_a_kept_tokens_use_is_seen_by_the_next_submit(ending, alice, kept):
    token, client = kept
    ENDINGS[ending](token)
    answer = post(client, "after")
    assert answer.status_code == 401, answer.content
    nothing_more(alice)


def test_a_kept_agents_token_stops_when_its_agent_is_disabled(agent, frozen, django_assert_num_queries):
    _, client = client_of(agent.user)
    assert post(client, "first").status_code == 201
    with django_assert_num_queries(1):
        assert post(client, "kept").status_code == 201
    ServiceIdentity.objects.filter(pk=agent.pk).update(disabled_at=timezone.now())
    answer = post(client, "after")
    assert answer.status_code == 401, answer.content
    assert "agent" in answer.json()["errors"]["detail"][0]
    nothing_more(agent.user)


def test_a_kept_token_that_expires_by_the_clock_is_refused_at_once(alice, frozen, django_assert_num_queries):
    _, client = client_of(alice, expires_at=timezone.now() + timedelta(seconds=context.KEEP_S / 2))
    assert post(client, "first").status_code == 201
    frozen.shift(timedelta(seconds=context.KEEP_S / 4))
    with django_assert_num_queries(1):
        assert post(client, "kept").status_code == 201
    frozen.shift(timedelta(seconds=context.KEEP_S / 2))  # past its expiry, still within the keep
    with django_assert_num_queries(1):  # looked up, and refused
        answer = post(client, "expired")
    assert answer.status_code == 401, answer.content
    nothing_more(alice)


def test_a_kept_agents_token_stops_when_its_agent_expires_by_the_clock(agent, frozen):
    soon = timezone.now() + timedelta(seconds=context.KEEP_S / 2)
    ServiceIdentity.objects.filter(pk=agent.pk).update(expires_at=soon)
    _, client = client_of(agent.user)
    assert post(client, "first").status_code == 201
    frozen.shift(timedelta(seconds=context.KEEP_S * 3 / 4))
    answer = post(client, "expired")
    assert answer.status_code == 401, answer.content
    nothing_more(agent.user, workloads=1, count=1)


BAD = {
    "a body that is not JSON": lambda client: client.post(URL, "{", content_type="application/json"),
    "a type of body the API does not take": lambda client: client.post(URL, "queue: train", content_type="text/yaml"),
    "a body too large": lambda client: post(client, "x" * (settings.DATA_UPLOAD_MAX_MEMORY_SIZE + 1)),
    "a body the serializer refuses": lambda client: post(client, "bad", resources={"gpus": "many"}),
    "a queue that does not exist": lambda client: post(client, "nowhere", queue="no-such-queue"),
    "a request its kept context refuses": lambda client: post(client, "too big", resources={"gpus": 4096}),
    "a bad Idempotency-Key": lambda client: client.post(
        URL, json.dumps(JOB | {"name": "k"}), content_type="application/json", HTTP_IDEMPOTENCY_KEY="\x01"
    ),
}


@pytest.mark.parametrize("bad", list(BAD))
def test_a_revoked_kept_token_hears_401_before_anything_about_its_request(bad, alice, kept):
    token, client = kept
    tokens.revoke(token, by=None)
    answer = BAD[bad](client)
    assert answer.status_code == 401, answer.content
    nothing_more(alice)


@pytest.mark.parametrize("bad", list(BAD))
def test_a_live_kept_token_hears_what_is_wrong_with_its_request(bad, alice, kept):
    _, client = kept
    answer = BAD[bad](client)
    assert answer.status_code in {400, 403, 413, 415}, answer.content
    assert Workload.objects.filter(owner=alice).count() == 2
    # a refused body counts, once; a header or a kind or size of body the API refuses before reading it, not
    uncounted = {"a bad Idempotency-Key", "a type of body the API does not take", "a body too large"}
    assert counted(alice) == (2 if bad in uncounted else 3)


def test_a_read_with_a_kept_token_looks_it_up(alice, kept):
    token, client = kept
    tokens.revoke(token, by=None)
    assert client.get(URL).status_code == 401


def test_a_kept_tokens_use_is_still_recorded_once_a_minute(alice, frozen):
    token, client = client_of(alice)
    started = timezone.now()
    assert post(client, "first").status_code == 201  # its use recorded now
    frozen.shift(tokens.LAST_USED_RESOLUTION - timedelta(seconds=context.KEEP_S / 4))
    assert post(client, "read again").status_code == 201  # kept again, its use recorded a minute ago
    frozen.shift(timedelta(seconds=context.KEEP_S / 2))  # still kept, but a minute has passed: recorded again
    assert post(client, "a minute on").status_code == 201
    token.refresh_from_db()
    assert token.last_used_at == started + tokens.LAST_USED_RESOLUTION + timedelta(seconds=context.KEEP_S / 4)
    assert AuditEvent.objects.filter(action="token.used", target=tokens.label(token)).count() == 2


def test_the_kept_token_is_the_one_its_plaintext_names(alice, bob, frozen, django_assert_num_queries):
    _, alices = client_of(alice)
    _, bobs = client_of(bob)
    for client in (alices, bobs):
        assert post(client, "first").status_code == 201
    with django_assert_num_queries(1):
        assert post(bobs, "bobs").json()["owner"] == "bob"
    with django_assert_num_queries(1):
        assert post(alices, "alices").json()["owner"] == "alice"
    stranger = APIClient()
    stranger.credentials(HTTP_AUTHORIZATION="Bearer glt_not-a-token")
    assert post(stranger, "nobody").status_code == 401


def test_what_a_process_forgets_is_read_again_and_kept_again(alice, kept, django_assert_num_queries):
    _, client = kept
    context.forget()  # the context read again, under the same generation; the token too
    with django_assert_num_queries(5):  # the token (with the generation), count, queue, teams, insert
        assert post(client, "read again").status_code == 201
    with django_assert_num_queries(1):
        assert post(client, "kept again").status_code == 201


def test_other_requests_look_the_token_up_each_time(alice, kept):
    _, client = kept
    for _ in range(2):
        with CaptureQueriesContext(connection) as captured:
            assert client.get(URL).status_code == 200
        assert ApiToken._meta.db_table in captured.captured_queries[0]["sql"]


# --- What moves the generation --------------------------------------------------------------------------


def _tables(statements: list[dict[str, str]]) -> set[str]:
    return {t for q in statements for t in re.findall(r'(?:FROM|JOIN) "(\w+)"', q["sql"])}


def test_every_table_the_tokens_look_up_reads_moves_the_generation(alice, agent):
    for user in (alice, agent.user):
        _, plaintext = ApiToken.issue(user, "tables")
        with CaptureQueriesContext(connection) as captured:
            assert ApiToken.lookup(plaintext, read_with=("generation", context.GENERATION_SQL)) is not None
        read = _tables(captured.captured_queries) - {context.GENERATION_TABLE}
        watched = set(generation_migration.WATCHED) | set(credentials_migration.WATCHED_COLUMNS)
        assert read <= watched, read - watched


@pytest.mark.parametrize(
    ("table", "column"), [(t, c) for t, columns in credentials_migration.WATCHED_COLUMNS.items() for c in columns]
)
def test_a_write_of_a_column_a_token_is_decided_by_moves_the_generation(table, column, db):
    before = generation()
    with connection.cursor() as cursor:
        cursor.execute(f'UPDATE "{table}" SET "{column}" = "{column}" WHERE false')  # noqa: S608 (the migration's)
    assert generation() > before
    before = generation()
    with connection.cursor() as cursor:
        cursor.execute(f'DELETE FROM "{table}" WHERE false')  # noqa: S608
    assert generation() > before


def test_recording_a_use_or_a_sign_in_moves_nothing(alice, rf):
    token, _ = ApiToken.issue(alice, "quiet")
    before = generation()
    tokens.note_use(ApiToken.objects.select_related("user").get(pk=token.pk), rf.post(URL))
    update_last_login(type(alice), alice)
    assert ApiToken.objects.get(pk=token.pk).last_used_at is not None
    assert generation() == before


def test_a_token_is_unconfirmed_only_when_it_was_taken_from_what_is_kept(alice, rf, frozen):
    token, plaintext = ApiToken.issue(alice, "now")
    first = Request(rf.post(URL, HTTP_AUTHORIZATION=f"Bearer {plaintext}"))
    authenticated = auth.BearerTokenAuthentication(keep=True).authenticate(first)
    assert authenticated is not None
    user, found = authenticated
    assert (user, found.pk, auth.unconfirmed(first)) == (alice, token.pk, None)
    again = Request(rf.post(URL, HTTP_AUTHORIZATION=f"Bearer {plaintext}"))
    assert auth.BearerTokenAuthentication(keep=True).authenticate(again) == (user, found)
    assert auth.unconfirmed(again) == generation()
    auth.confirm(again)
    assert auth.unconfirmed(again) is None
    assert again.auth is not found  # read again
    assert again.auth.pk == token.pk


DRY_RUN = "/api/v1/workloads/dry-run/"


def dry_run(client: APIClient) -> Any:
    return client.post(DRY_RUN, json.dumps(JOB | {"name": "probe"}), content_type="application/json")


def test_a_dry_run_takes_its_token_from_what_the_process_keeps_confirmed_by_the_generation_it_reads(
    kept: Any, django_assert_num_queries: Any
) -> None:
    """Its one statement of its own is the generation it reads anyway: the kept token was kept under it."""
    _, client = kept
    assert dry_run(client).status_code == 200  # (the dry run's first snapshot, its own statements)
    with django_assert_num_queries(1):
        answer = dry_run(client)
    assert answer.status_code == 200, answer.content
    assert answer.json()["outcome"] == "admit"


def test_a_dry_run_on_a_kept_token_revoked_since_is_refused(kept: Any) -> None:
    """The revocation moved the generation: the dry run looks the token up again, and hears 401, not an answer."""
    token, client = kept
    assert dry_run(client).status_code == 200
    ApiToken.objects.filter(pk=token.pk).update(revoked_at=timezone.now())
    refused = dry_run(client)
    assert refused.status_code == 401
    assert "outcome" not in refused.json()

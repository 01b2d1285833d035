"""Identity mapping: who a job runs as on a fabric (portal/accounts/posix.py), refused before anything is queued.

The cast: alice (vision) and charlie (fraud) sign in at the provider; the demo's `local` fabric is behind
the queue `train`. A POSIX policy on it means every job there runs under its owner's own account.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from portal.accounts import posix
from portal.accounts.models import (
    AuditEvent,
    ExternalIdentity,
    PosixAccount,
    PosixPolicy,
    ResourceGroup,
    SchedulerAccount,
)
from portal.queues.models import Fabric
from portal.workloads import services
from portal.workloads.models import Workload


@pytest.fixture
def local(cast: dict[str, Any]) -> Fabric:
    return Fabric.objects.get(name="local")


@pytest.fixture
def corp_policy(local: Fabric) -> PosixPolicy:
    """On `local`: the person's e-mail-like preferred_username, without the corporate domain."""
    return PosixPolicy.objects.create(
        fabric=local, claim="preferred_username", pattern=r"^(.*)@corp\.example$", replacement=r"\1"
    )


def signed_in(user: Any, **claims: Any) -> None:
    """As oidc.sign_in stores them: the claims of the user's last sign-in."""
    ExternalIdentity.objects.update_or_create(
        user=user, defaults={"issuer": "https://idp.test", "subject": f"sub-{user.pk}", "claims": claims}
    )


def run_as(user: Any, fabric: Fabric, team: str = "vision") -> posix.RunAs:
    return posix.run_as(user.pk, ResourceGroup.objects.get(slug=team).pk, fabric.pk)


def test_a_fabric_without_a_policy_runs_jobs_as_its_own_account(alice, local):
    assert run_as(alice, local) == posix.RunAs(user="", account="", refusal="")


def test_the_claim_is_rewritten_by_the_policys_pattern(alice, local, corp_policy):
    signed_in(alice, preferred_username="alice.w@corp.example")  # a dot: no portable user name
    assert "'alice.w' is not a POSIX user name" in run_as(alice, local).refusal
    signed_in(alice, preferred_username="alice_w@corp.example")
    assert run_as(alice, local) == posix.RunAs(user="alice_w")


def test_a_name_that_is_no_posix_user_name_is_refused_with_the_reason(alice, local, corp_policy):
    signed_in(alice, preferred_username="Alice W; rm -rf ~@corp.example")
    found = run_as(alice, local)
    assert found.user == ""
    assert "is not a POSIX user name" in found.refusal


def test_root_is_never_a_mapping(alice, local, corp_policy):
    signed_in(alice, preferred_username="root@corp.example")
    assert "Nothing runs as root" in run_as(alice, local).refusal
    PosixAccount.objects.create(user=alice, fabric=local, posix_user="alice")
    PosixAccount.objects.filter(user=alice).update(posix_user="root")  # a row written past the form's validation
    posix.forget()
    assert "Nothing runs as root" in run_as(alice, local).refusal


def test_a_claim_that_does_not_match_the_pattern_maps_to_nobody(alice, local, corp_policy):
    signed_in(alice, preferred_username="alice@elsewhere.example")
    assert "does not match the pattern" in run_as(alice, local).refusal


def test_a_missing_claim_says_which_claim(alice, local, corp_policy):
    signed_in(alice, uid="alice")
    assert "no 'preferred_username' claim for local" in run_as(alice, local).refusal


def test_the_uid_claim_or_the_gridlane_username_may_name_the_person(alice, local, corp_policy):
    signed_in(alice, uid="u1042")
    PosixPolicy.objects.filter(pk=corp_policy.pk).update(claim="uid", pattern="^(.*)$")
    posix.forget()
    assert run_as(alice, local).user == "u1042"
    PosixPolicy.objects.filter(pk=corp_policy.pk).update(claim="")
    posix.forget()
    assert run_as(alice, local).user == "alice"


def test_an_explicit_account_wins_and_a_fabrics_own_wins_over_every_fabrics(alice, local, corp_policy):
    signed_in(alice, preferred_username="alice@corp.example")
    PosixAccount.objects.create(user=alice, fabric=None, posix_user="awong")
    assert run_as(alice, local).user == "awong"
    PosixAccount.objects.create(user=alice, fabric=local, posix_user="awong2")
    assert run_as(alice, local).user == "awong2"


def test_an_agent_runs_only_as_the_account_it_is_given(agent, local, corp_policy):
    found = run_as(agent.user, local)
    assert "has no POSIX account on local; IT gives it one" in found.refusal
    PosixAccount.objects.create(user=agent.user, fabric=local, posix_user="svc-evals")
    assert run_as(agent.user, local) == posix.RunAs(user="svc-evals")


def test_the_team_account_or_the_fabrics_default(alice, charlie, local, corp_policy):
    signed_in(alice, preferred_username="alice@corp.example")
    signed_in(charlie, preferred_username="charlie@corp.example")
    PosixPolicy.objects.filter(pk=corp_policy.pk).update(default_account="general")
    SchedulerAccount.objects.create(group=ResourceGroup.objects.get(slug="vision"), fabric=local, account="vision")
    assert run_as(alice, local) == posix.RunAs(user="alice", account="vision")
    posix.forget()
    assert run_as(charlie, local, team="fraud") == posix.RunAs(user="charlie", account="general")


@pytest.mark.parametrize(
    ("model", "values", "field"),
    [
        (PosixAccount, {"posix_user": "root"}, "posix_user"),
        (PosixAccount, {"posix_user": "Bad Name"}, "posix_user"),
        (PosixPolicy, {"pattern": "(unclosed"}, "pattern"),
        (SchedulerAccount, {"account": "a b"}, "account"),
    ],
)
def test_the_admin_forms_refuse_bad_values(alice, local, model, values, field):
    from django.core.exceptions import ValidationError

    defaults: dict[str, Any] = {
        PosixAccount: {"user": alice, "fabric": local, "posix_user": "alice"},
        PosixPolicy: {"fabric": local},
        SchedulerAccount: {"group": ResourceGroup.objects.get(slug="vision"), "fabric": local, "account": "vision"},
    }[model]
    with pytest.raises(ValidationError) as refused:
        model(**(defaults | values)).full_clean()
    assert field in refused.value.message_dict


def test_every_change_to_the_mapping_is_audited_with_who_did_it(client, it_admin, local):
    client.force_login(it_admin)
    response = client.post(
        "/admin/accounts/posixpolicy/add/",
        {"fabric": local.pk, "claim": "uid", "pattern": "^(.*)$", "replacement": r"\1", "default_account": "ml"},
    )
    assert response.status_code == 302, response.content[:2000]
    event = AuditEvent.objects.get(action="posixpolicy.created")
    assert event.actor == it_admin
    assert event.detail["after"]["claim"] == "uid"
    policy = PosixPolicy.objects.get()
    response = client.post(
        f"/admin/accounts/posixpolicy/{policy.pk}/change/",
        {"fabric": local.pk, "claim": "preferred_username", "pattern": "^(.*)$", "replacement": r"\1"},
    )
    assert response.status_code == 302
    changed = AuditEvent.objects.get(action="posixpolicy.changed")
    assert changed.detail["before"] == {"claim": "uid", "default_account": "ml"}
    assert changed.detail["after"] == {"claim": "preferred_username", "default_account": ""}


def test_a_person_without_a_mapping_is_told_plainly_before_anything_is_queued(alice, local, corp_policy, submit):
    signed_in(alice, uid="alice")  # no preferred_username claim
    with pytest.raises(services.SubmitRejected) as refused:
        submit(alice)
    assert refused.value.errors == {
        "queue": [
            "Jobs on Training and batch run under your own account on the cluster, but alice has no "
            "'preferred_username' claim for local (sign in again, or ask IT)."
        ]
    }
    assert not Workload.objects.exists()


def test_the_api_and_the_form_say_so_too(alice, local, corp_policy, api_as, client):
    from tests.conftest import TRAINING_FORM

    response = api_as(alice).post(
        "/api/v1/workloads/",
        {"queue": "train", "kind": "training", "name": "x", "command": "true"},
        format="json",
    )
    assert response.status_code == 400, response.content
    assert "run under your own account on the cluster" in response.json()["errors"]["queue"][0]
    client.force_login(alice)
    page = client.post("/workloads/new/", TRAINING_FORM)
    assert "run under your own account on the cluster, but alice has no" in page.content.decode()
    assert not Workload.objects.exists()


def test_a_mapped_person_submits_and_the_job_carries_who_it_runs_as(alice, local, corp_policy, submit):
    from portal.worker.dispatch import job_spec

    signed_in(alice, preferred_username="alice@corp.example")
    SchedulerAccount.objects.create(group=ResourceGroup.objects.get(slug="vision"), fabric=local, account="vision")
    workload = submit(alice)
    Workload.objects.filter(pk=workload.pk).update(fabric=local)
    loaded = Workload.objects.select_related("owner", "group", "queue", "target").get(pk=workload.pk)
    spec = job_spec(loaded)
    assert (spec.run_as, spec.account) == ("alice", "vision")


def test_a_warm_check_costs_the_submit_no_statement(alice, local, submit):
    signed_in(alice, preferred_username="alice@corp.example")
    submit(alice, name="warm-up")
    with CaptureQueriesContext(connection) as without_policy:
        submit(alice, name="plain")
    PosixPolicy.objects.create(fabric=local, pattern=r"^(.*)@corp\.example$")
    submit(alice, name="warm-up-2")  # the first lookup after a change reads the mapping
    with CaptureQueriesContext(connection) as with_policy:
        submit(alice, name="mapped")
    assert len(with_policy) == len(without_policy)


def test_sign_in_keeps_the_claims_a_policy_names(rf, local):
    from portal.accounts import oidc

    PosixPolicy.objects.create(fabric=local, claim="employee_login")
    request = rf.get("/")
    user = oidc.sign_in(
        request,
        "https://idp.test",
        {"sub": "s-9", "preferred_username": "dora", "employee_login": "dw42", "uid": 5, "groups": [], "nonce": "x"},
    )
    assert ExternalIdentity.objects.get(user=user).claims == {
        "employee_login": "dw42",
        "preferred_username": "dora",
        "uid": 5,
    }


def test_a_mapping_removed_after_the_submit_fails_the_dispatch_instead_of_running_as_anyone_else(
    alice, local, corp_policy, submit
):
    from portal.worker import dispatch
    from portal.workloads.states import State

    signed_in(alice, preferred_username="alice@corp.example")
    workload = submit(alice)
    Workload.objects.filter(pk=workload.pk).update(fabric=local, state=State.ADMITTED)
    ExternalIdentity.objects.filter(user=alice).update(claims={})
    posix.forget()
    assert dispatch.dispatch_all() == 0
    workload.refresh_from_db()
    assert workload.state == State.FAILED
    assert workload.external_id == ""
    assert workload.events.last().reason.startswith("cannot run on local: alice has no 'preferred_username' claim")

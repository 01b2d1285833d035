"""The audit log: sign-ins and failures, and every admin change to policy with who, before and after."""

from __future__ import annotations

import json
from typing import Any

import pytest

from portal.accounts.models import AuditEvent, ClaimMapping, ResourceGroup
from portal.queues.models import Queue, QueueTarget, Quota


@pytest.fixture
def it_client(client, it_admin):
    client.force_login(it_admin)
    return client


def admin_form_data(response) -> dict[str, Any]:
    """What the admin's change form would post back unchanged: the main form and every inline formset."""
    data: dict[str, Any] = {}

    def add(form):
        for name, field in form.fields.items():
            value = form[name].value()
            if value is None:
                continue
            if isinstance(value, bool):
                if value:
                    data[form.add_prefix(name)] = "on"
                continue
            if field.show_hidden_initial:  # a callable default: the page also posts what it showed at first
                data[form.add_initial_prefix(name)] = value
            if isinstance(value, (list, tuple)):
                data[form.add_prefix(name)] = [str(v) for v in value]
            else:
                data[form.add_prefix(name)] = value

    add(response.context["adminform"].form)
    for inline in response.context["inline_admin_formsets"]:
        formset = inline.formset
        add(formset.management_form)
        for form in formset.forms:
            add(form)
    return data


def change(client, url: str, **changes: Any):
    page = client.get(url)
    assert page.status_code == 200
    data = admin_form_data(page) | changes
    response = client.post(url, data)
    assert response.status_code == 302, (
        [
            response.context["adminform"].form.errors,
            *(i.formset.errors for i in response.context["inline_admin_formsets"]),
        ]
        if response.context
        else response
    )
    return response


def test_an_admin_change_to_a_quota_is_recorded_with_who_before_and_after(it_client, it_admin):
    quota = Quota.objects.get(group__slug="vision")
    change(it_client, f"/admin/queues/quota/{quota.pk}/change/", gpu_limit="7")  # the editor speaks GPUs
    event = AuditEvent.objects.filter(action="quota.changed").latest("pk")
    assert event.actor == it_admin
    assert event.actor_name == "it"
    assert event.target == "Vision on local"
    assert event.detail["before"] == {"gpu_limit_milli": 6000}
    assert event.detail["after"] == {"gpu_limit_milli": 7000}
    assert event.detail["via"] == f"POST /admin/queues/quota/{quota.pk}/change/"


def test_it_setting_a_fabric_s_price_per_gpu_hour_is_recorded_with_before_and_after(it_client, it_admin):
    from decimal import Decimal

    from portal.queues.models import Fabric

    fabric = Fabric.objects.get(name="local")
    change(it_client, f"/admin/queues/fabric/{fabric.pk}/change/", gpu_hour_price="2.75")
    fabric.refresh_from_db()
    assert fabric.gpu_hour_price == Decimal("2.75")
    event = AuditEvent.objects.filter(action="fabric.changed").latest("pk")
    assert event.actor == it_admin
    assert event.detail["before"] == {"gpu_hour_price": None}
    assert Decimal(event.detail["after"]["gpu_hour_price"]) == Decimal("2.75")
    url = f"/admin/queues/fabric/{fabric.pk}/change/"
    response = it_client.post(url, admin_form_data(it_client.get(url)) | {"gpu_hour_price": "-1"})
    assert "gpu_hour_price" in response.context["adminform"].form.errors  # no negative price
    fabric.refresh_from_db()
    assert fabric.gpu_hour_price == Decimal("2.75")


def test_it_pricing_a_fabric_s_cpus_and_memory_is_recorded_and_no_price_is_negative(it_client, it_admin):
    from decimal import Decimal

    from portal.queues.models import Fabric

    fabric = Fabric.objects.get(name="local")
    url = f"/admin/queues/fabric/{fabric.pk}/change/"
    change(it_client, url, cpu_hour_price="0.04", memory_gb_hour_price="0.005")
    fabric.refresh_from_db()
    assert (fabric.cpu_hour_price, fabric.memory_gb_hour_price) == (Decimal("0.04"), Decimal("0.005"))
    event = AuditEvent.objects.filter(action="fabric.changed").latest("pk")
    assert event.actor == it_admin
    assert event.detail["before"] == {"cpu_hour_price": None, "memory_gb_hour_price": None}
    assert {k: Decimal(v) for k, v in event.detail["after"].items()} == {
        "cpu_hour_price": Decimal("0.04"),
        "memory_gb_hour_price": Decimal("0.005"),
    }
    for name in ("cpu_hour_price", "memory_gb_hour_price"):
        response = it_client.post(url, admin_form_data(it_client.get(url)) | {name: "-0.01"})
        assert name in response.context["adminform"].form.errors
    fabric.refresh_from_db()
    assert (fabric.cpu_hour_price, fabric.memory_gb_hour_price) == (Decimal("0.04"), Decimal("0.005"))


def test_it_choosing_what_a_queue_does_about_idle_gpus_is_recorded(it_client, it_admin):
    queue = Queue.objects.get(slug="notebooks")
    change(it_client, f"/admin/queues/queue/{queue.pk}/change/", gpu_idle_action="stop", gpu_idle_grace_minutes="45")
    event = AuditEvent.objects.filter(action="queue.changed", actor=it_admin).latest("pk")
    assert event.detail["before"] == {"gpu_idle_action": "nothing", "gpu_idle_grace_minutes": 30}
    assert event.detail["after"] == {"gpu_idle_action": "stop", "gpu_idle_grace_minutes": 45}


def test_an_admin_change_to_who_may_use_a_queue_is_recorded(it_client, it_admin):
    queue = Queue.objects.get(slug="train")
    vision = ResourceGroup.objects.get(slug="vision")
    change(
        it_client, f"/admin/queues/queue/{queue.pk}/change/", allowed_groups=[str(vision.pk)], max_runtime_minutes="600"
    )
    events = AuditEvent.objects.filter(action="queue.changed", actor=it_admin)
    fields = {e.detail.get("field"): e.detail for e in events}
    assert fields["allowed_groups"]["removed"] == ["Fraud detection"]
    assert fields[None]["before"] == {"max_runtime_minutes": 1440}
    assert fields[None]["after"] == {"max_runtime_minutes": 600}


def test_fabric_changes_and_target_deletions_are_recorded(it_client, it_admin):
    from portal.queues.models import Fabric

    fabric = Fabric.objects.get(name="local")
    change(it_client, f"/admin/queues/fabric/{fabric.pk}/change/", gpus_milli="4000")
    notebooks = Queue.objects.get(slug="notebooks")
    change(it_client, f"/admin/queues/queue/{notebooks.pk}/change/", **{"targets-0-DELETE": "on"})
    assert not QueueTarget.objects.filter(queue=notebooks).exists()
    fabric_event = AuditEvent.objects.filter(action="fabric.changed").latest("pk")
    assert (fabric_event.detail["before"], fabric_event.detail["after"]) == ({"gpus_milli": 8000}, {"gpus_milli": 4000})
    assert AuditEvent.objects.filter(action="queuetarget.deleted", target="Notebooks -> local").exists()


def test_claim_mappings_made_in_the_admin_are_recorded(it_client, it_admin):
    fraud = ResourceGroup.objects.get(slug="fraud")
    response = it_client.post(
        "/admin/accounts/claimmapping/add/",
        {"claim_value": "fraud-leads", "group": str(fraud.pk), "role": "lead"},
    )
    assert response.status_code == 302
    mapping = ClaimMapping.objects.get(claim_value="fraud-leads")
    event = AuditEvent.objects.filter(action="claimmapping.created").latest("pk")
    assert event.actor == it_admin
    assert event.detail["after"] == {
        "claim_value": "fraud-leads",
        "group": "Fraud detection",
        "role": "lead",
        "makes_it_staff": False,
    }
    mapping.delete()
    assert AuditEvent.objects.filter(action="claimmapping.deleted", target=str(mapping)).exists()


def test_secrets_in_policy_settings_are_masked(db):
    from portal.accounts import audit

    event = audit.record("fabric.changed", "x", actor=None, after={"settings": {"host": "h", "password": "p"}})
    assert event.detail["after"]["settings"] == {"host": "h", "password": "***"}


def test_local_sign_ins_failures_and_sign_outs_are_recorded(client, alice):
    client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    client.post("/accounts/login/", {"username": "alice", "password": "gridlane-demo"})
    client.post("/accounts/logout/")
    events = list(AuditEvent.objects.filter(action__startswith="sign").order_by("pk"))
    assert [(e.action, e.actor, e.target) for e in events] == [
        ("signin.failed", None, "alice"),
        ("signin", alice, "alice"),
        ("signout", alice, "alice"),
    ]
    assert events[0].detail["reason"] == "wrong username or password"
    assert events[1].detail["method"] == "password"
    assert events[1].detail["ip"] == "127.0.0.1"


def test_it_reads_and_filters_the_audit_log_in_the_admin_and_nobody_edits_it(client, it_admin, alice):
    client.post("/accounts/login/", {"username": "alice", "password": "wrong"})
    client.force_login(it_admin)
    page = client.get("/admin/accounts/auditevent/", {"kind": "signin"})
    assert page.status_code == 200
    shown = {e.action for e in page.context["cl"].result_list}
    assert shown == {"signin", "signin.failed"}
    assert client.get("/admin/accounts/auditevent/", {"action": "quota.created"}).status_code == 200
    assert client.get("/admin/accounts/auditevent/add/").status_code == 403
    event = AuditEvent.objects.latest("pk")
    assert client.post(f"/admin/accounts/auditevent/{event.pk}/delete/", {"post": "yes"}).status_code == 403
    client.force_login(alice)
    assert client.get("/admin/accounts/auditevent/").status_code == 302


def test_it_revokes_tokens_from_the_admin_and_the_log_says_who(it_client, it_admin, alice):
    from portal.accounts.models import ApiToken

    token, _ = ApiToken.issue(alice, "laptop")
    response = it_client.post(
        "/admin/accounts/apitoken/", {"action": "revoke", "_selected_action": [str(token.pk)]}, follow=True
    )
    assert "Revoked 1 token(s)." in response.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is not None
    event = AuditEvent.objects.get(action="token.revoked")
    assert (event.actor, event.target) == (it_admin, f"{token.hint}… of alice")


def test_cancellations_and_reprioritisations_are_recorded_like_extensions(alice, bob, submit):
    from portal.workloads import services

    w = submit(alice, name="sweep-7")
    services.do_reprioritize(bob, w, "high")
    services.do_cancel(alice, w)
    services.do_cancel(alice, w)  # already cancelled: nothing more to record
    events = list(AuditEvent.objects.filter(action__startswith="workload.").order_by("pk"))
    assert [(e.action, e.actor_name, e.target, e.detail["team"]) for e in events] == [
        ("workload.reprioritized", "bob", f"sweep-7 ({w.pk})", "vision"),
        ("workload.cancelled", "alice", f"sweep-7 ({w.pk})", "vision"),
    ]
    assert events[1].detail["state"] == "pending"


def test_the_audit_log_folds_routine_events_and_filters_by_actor_team_and_object(
    client, it_admin, alice, charlie, submit, django_assert_max_num_queries
):
    from portal.workloads import services

    for user in (alice, charlie):
        client.force_login(user)  # sign-ins: routine
    services.do_cancel(alice, submit(alice, name="vision-run"))
    services.do_cancel(charlie, submit(charlie, name="fraud-run"))
    client.force_login(it_admin)

    def shown(**query: str) -> set[tuple[str, str]]:
        page = client.get("/admin/accounts/auditevent/", query)
        assert page.status_code == 200
        return {(e.action, e.actor_name) for e in page.context["cl"].result_list}

    with django_assert_max_num_queries(14):
        default = shown()
    assert ("workload.cancelled", "alice") in default
    assert not {action for action, _ in default} & {"signin", "signout", "token.used"}
    assert ("signin", "alice") in shown(routine="shown")
    assert shown(routine="only") <= {("signin", name) for name in ("alice", "charlie", "it")}
    assert shown(actor="charlie") == {("workload.cancelled", "charlie")}
    assert ("workload.cancelled", "alice") in shown(team="vision")
    assert ("workload.cancelled", "charlie") not in shown(team="vision")
    assert ("quota.created", "") in shown(team="vision")  # the seed's quota "Vision on local"
    assert shown(q="fraud-run") == {("workload.cancelled", "charlie")}
    assert shown(kind="workload") == {("workload.cancelled", "alice"), ("workload.cancelled", "charlie")}


def test_profile_changes_in_the_admin_are_recorded(it_client, it_admin):
    from portal.queues.models import Profile

    data: dict[str, Any] = {"name": "Small GPU", "description": "", "kinds": '["training"]', "gpus": "1", "cpus": "4",
            "memory_gb": "16", "hours": "", "order": "0", "enabled": "on"}  # fmt: skip
    page = it_client.get("/admin/queues/profile/add/")
    assert page.status_code == 200
    form = page.context["adminform"].form
    data = {k: v for k, v in data.items() if k in form.fields}  # the form's own fields only
    kinds = form.fields["kinds"]
    if hasattr(kinds, "choices"):
        data["kinds"] = ["training"]
    response = it_client.post("/admin/queues/profile/add/", data)
    assert response.status_code == 302, response.context["adminform"].form.errors if response.context else response
    profile = Profile.objects.get(name="Small GPU")
    event = AuditEvent.objects.get(action="profile.created")
    assert (event.actor, event.target) == (it_admin, str(profile))
    change(it_client, f"/admin/queues/profile/{profile.pk}/change/", gpus="2")
    changed = AuditEvent.objects.get(action="profile.changed")
    assert changed.actor == it_admin
    assert "gpus" in json.dumps(changed.detail)


def test_the_actor_filter_names_each_actor_once(it_client, it_admin, alice):
    for _ in range(3):
        it_client.force_login(alice)
    it_client.force_login(it_admin)
    page = it_client.get("/admin/accounts/auditevent/", {"routine": "shown"})
    [actor_filter] = [f for f in page.context["cl"].filter_specs if getattr(f, "parameter_name", "") == "actor"]
    names = [value for value, _ in actor_filter.lookup_choices]
    assert names.count("alice") == 1
    assert names == sorted(set(names))

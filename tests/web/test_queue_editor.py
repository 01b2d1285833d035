"""IT's queue and quota editor (the admin): kinds as checkboxes, quotas in GPUs, CPUs and GB, warnings for a
queue that cannot run anything or that nobody sees, "teams" in every label."""

from __future__ import annotations

import pytest

from portal.accounts.models import AuditEvent, ResourceGroup
from portal.queues.models import Fabric, Queue, Quota


@pytest.fixture
def it_client(client, it_admin):
    client.force_login(it_admin)
    return client


def test_a_queue_is_made_with_kinds_as_checkboxes_and_teams(it_client):
    page = it_client.get("/admin/queues/queue/add/").content.decode()
    assert 'type="checkbox" name="kinds" value="notebook"' in page
    assert "Teams that may use it" in page
    assert "groups" not in page.lower().replace("allowed_groups", "")
    vision = ResourceGroup.objects.get(slug="vision")
    response = it_client.post(
        "/admin/queues/queue/add/",
        {"name": "Interactive", "slug": "interactive", "kinds": ["notebook", "vm"], "allowed_groups": [vision.pk],
         "default_runtime_minutes": 60, "max_runtime_minutes": 600, "enabled": "on",
         "targets-TOTAL_FORMS": 0, "targets-INITIAL_FORMS": 0},
        follow=True,
    )  # fmt: skip
    queue = Queue.objects.get(slug="interactive")
    assert queue.kinds == ["notebook", "vm"]
    assert "Interactive: no fabric: work sent here cannot run." in response.content.decode()


def test_the_queue_list_warns_of_queues_without_a_fabric_or_a_team(it_client, django_assert_max_num_queries):
    Queue.objects.create(slug="orphan", name="Orphan", kinds=["training"])
    with django_assert_max_num_queries(10):
        page = it_client.get("/admin/queues/queue/").content.decode()
    assert "no fabric: work sent here cannot run; open to no team: nobody but IT sees it" in page
    assert "Training run, Batch job" in page


def test_a_queue_no_fabric_serves_is_never_the_default_choice(client, alice):
    vision = ResourceGroup.objects.get(slug="vision")
    empty = Queue.objects.create(slug="aaa-empty", name="Aaa empty", kinds=["training"])
    empty.allowed_groups.add(vision)
    client.force_login(alice)
    page = client.get("/workloads/new/").content.decode()
    options = page[page.index('<select name="queue"') : page.index("</select>", page.index('<select name="queue"'))]
    assert options.index("Training and batch") < options.index("Aaa empty (no fabric yet)")


def test_a_quota_is_edited_in_gpus_cpus_and_gb(it_client):
    quota = Quota.objects.get(group__slug="vision", fabric__name="local")
    page = it_client.get(f"/admin/queues/quota/{quota.pk}/change/").content.decode()
    assert 'name="gpu_limit" value="6"' in page
    assert "Team" in page
    response = it_client.post(
        f"/admin/queues/quota/{quota.pk}/change/",
        {"group": quota.group_id, "fabric": quota.fabric_id, "gpu_reservation": "2.5", "gpu_limit": "4.25",
         "cpu_reservation": "0", "cpu_limit": "", "memory_reservation_gb": "0", "memory_limit_gb": "128"},
    )  # fmt: skip
    assert response.status_code == 302
    quota.refresh_from_db()
    assert (quota.gpu_reservation_milli, quota.gpu_limit_milli, quota.cpu_limit_milli, quota.memory_limit_mib) == (
        2500, 4250, None, 128 * 1024)  # fmt: skip
    assert AuditEvent.objects.filter(action="quota.changed").exists()
    listing = it_client.get("/admin/queues/quota/").content.decode()
    assert "2.5 / 4.25" in listing


def test_a_limit_under_the_reservation_is_refused_on_its_field(it_client):
    quota = Quota.objects.get(group__slug="vision", fabric__name="local")
    response = it_client.post(
        f"/admin/queues/quota/{quota.pk}/change/",
        {"group": quota.group_id, "fabric": quota.fabric_id, "gpu_reservation": "4", "gpu_limit": "2",
         "cpu_reservation": "0", "cpu_limit": "", "memory_reservation_gb": "0", "memory_limit_gb": ""},
    )  # fmt: skip
    assert response.status_code == 200
    assert "a cap cannot sit under the floor" in response.content.decode()
    quota.refresh_from_db()
    assert quota.gpu_limit_milli == 6000


def test_labels_say_teams_and_agent_access_is_spelled_right(it_client):
    page = it_client.get("/admin/").content.decode()
    assert "Teams" in page
    assert "Resource groups" not in page
    assert "accesss" not in page.lower()
    assert "Agent access" in page
    fabric = Fabric.objects.get(name="local")
    fabric_page = it_client.get(f"/admin/queues/fabric/{fabric.pk}/change/").content.decode()
    assert "team quotas on this fabric" in fabric_page.lower()


def test_a_member_cap_is_set_in_gpus_and_one_above_the_team_s_limit_is_refused(it_client):
    vision = ResourceGroup.objects.get(slug="vision")  # the demo's limit on the local pool: 6 GPUs
    form = {"slug": "vision", "name": vision.name, "fair_share_weight": 1, "wait_slo_seconds": 3600,
            "claim_mappings-TOTAL_FORMS": 0, "claim_mappings-INITIAL_FORMS": 0,
            "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0}  # fmt: skip
    refused = it_client.post(f"/admin/accounts/resourcegroup/{vision.pk}/change/", form | {"member_gpu_limit": "7"})
    assert refused.status_code == 200
    assert "Above the team&#x27;s own limit (6 GPUs)" in refused.content.decode()
    vision.refresh_from_db()
    assert vision.member_gpu_limit_milli is None
    kept = it_client.post(f"/admin/accounts/resourcegroup/{vision.pk}/change/", form | {"member_gpu_limit": "2.5"})
    assert kept.status_code == 302
    vision.refresh_from_db()
    assert vision.member_gpu_limit_milli == 2500


def test_a_team_limit_below_its_member_cap_is_refused_and_nothing_is_saved(it_client):
    ResourceGroup.objects.filter(slug="vision").update(member_gpu_limit_milli=4000)
    quota = Quota.objects.get(group__slug="vision", fabric__name="local")
    response = it_client.post(
        f"/admin/queues/quota/{quota.pk}/change/",
        {"group": quota.group_id, "fabric": quota.fabric_id, "gpu_reservation": "0", "gpu_limit": "3",
         "cpu_reservation": "0", "cpu_limit": "", "memory_reservation_gb": "0", "memory_limit_gb": ""},
    )  # fmt: skip
    assert response.status_code == 200
    assert "lower the team&#x27;s member cap first" in response.content.decode()
    quota.refresh_from_db()
    assert quota.gpu_limit_milli == 6000


@pytest.mark.parametrize("share", ["0", "101", "12.5", "-5"])
def test_a_queue_share_outside_1_to_100_percent_is_refused(it_client, share):
    queue = Queue.objects.get(slug="train")
    page = it_client.get(f"/admin/queues/queue/{queue.pk}/change/").content.decode()
    assert 'name="gpu_share_percent"' in page
    from django.forms.models import modelform_factory

    from portal.queues.admin import QueueForm

    form = modelform_factory(Queue, form=QueueForm)(
        data={
            "name": queue.name,
            "slug": queue.slug,
            "kinds": queue.kinds,
            "default_runtime_minutes": 60,
            "max_runtime_minutes": 600,
            "gpu_share_percent": share,
        },
        instance=queue,
    )
    assert not form.is_valid()
    assert "gpu_share_percent" in form.errors
    queue.refresh_from_db()
    assert queue.gpu_share_percent is None


@pytest.fixture
def research(db):
    """A department over vision and fraud that reserves 4 of the local pool's GPUs and caps them at 6."""
    department = ResourceGroup.objects.create(slug="research", name="Research")
    ResourceGroup.objects.filter(slug__in=["vision", "fraud"]).update(parent=department)
    Quota.objects.filter(group__slug__in=["vision", "fraud"]).update(gpu_reservation_milli=1000, gpu_limit_milli=4000)
    Quota.objects.create(group=department, fabric=Fabric.objects.get(name="local"), gpu_reservation_milli=4000,
                         gpu_limit_milli=6000)  # fmt: skip
    return department


def quota_form(quota, reservation, limit):
    return {"group": quota.group_id, "fabric": quota.fabric_id, "gpu_reservation": reservation, "gpu_limit": limit,
            "cpu_reservation": "0", "cpu_limit": "", "memory_reservation_gb": "0", "memory_limit_gb": ""}  # fmt: skip


@pytest.mark.parametrize(
    ("team", "reservation", "limit", "field", "says"),
    [
        ("vision", "3.5", "4", "gpu_reservation", "1 of them for its other teams"),  # 1 + 3.5 > 4
        ("vision", "1", "7", "gpu_limit", "Above the department Research&#x27;s limit here (6 GPUs)"),
        ("vision", "1", "", "gpu_limit", "Above the department Research&#x27;s limit here"),  # no cap is above 6
        ("research", "1.5", "6", "gpu_reservation", "Its teams reserve 2 GPUs here between them"),
        ("research", "2", "3", "gpu_limit", "Below the limit of one of its teams here"),
    ],
)
def test_a_team_s_quota_that_does_not_fit_its_department_s_is_refused_on_its_field(
    it_client, research, team, reservation, limit, field, says
):
    quota = Quota.objects.get(group__slug=team, fabric__name="local")
    before = (quota.gpu_reservation_milli, quota.gpu_limit_milli)
    response = it_client.post(f"/admin/queues/quota/{quota.pk}/change/", quota_form(quota, reservation, limit))
    assert response.status_code == 200
    page = response.content.decode()
    assert says in page
    assert f'name="{field}"' in page
    quota.refresh_from_db()
    assert (quota.gpu_reservation_milli, quota.gpu_limit_milli) == before


def test_a_department_cycle_is_refused_and_nothing_is_saved(it_client, research):
    form = {"slug": "research", "name": "Research", "fair_share_weight": 1, "wait_slo_seconds": 3600,
            "parent": ResourceGroup.objects.get(slug="vision").pk,
            "claim_mappings-TOTAL_FORMS": 0, "claim_mappings-INITIAL_FORMS": 0,
            "memberships-TOTAL_FORMS": 0, "memberships-INITIAL_FORMS": 0}  # fmt: skip
    response = it_client.post(f"/admin/accounts/resourcegroup/{research.pk}/change/", form)
    assert response.status_code == 200
    assert "a department cycle" in response.content.decode()
    research.refresh_from_db()
    assert research.parent is None


def test_where_quotas_are_set_each_says_how_its_fabric_holds_it(it_client):
    quota = Quota.objects.get(group__slug="vision", fabric__name="local")
    page = it_client.get(f"/admin/queues/quota/{quota.pk}/change/").content.decode()
    assert "How it holds" in page
    assert "the local fabric runs only what was admitted" in page
    kube = Fabric.objects.create(name="k8s", kind="kubernetes", settings={"kueue_owned": True})
    page = it_client.get(f"/admin/queues/fabric/{kube.pk}/change/").content.decode()
    assert "How quotas hold here" in page
    assert "nominal quota; limit less reservation: borrowing limit" in page
    team_wide = Quota.objects.create(group=ResourceGroup.objects.get(slug="fraud"), fabric=None)
    page = it_client.get(f"/admin/queues/quota/{team_wide.pk}/change/").content.decode()
    assert "Across all fabrics together" in page

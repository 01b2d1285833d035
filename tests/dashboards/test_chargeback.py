"""The chargeback page: a month of a team's cost, idle cost and unused reservation, for its leads and IT, read
from rollups the worker made of real workloads and samples (the `month` of tests/api/test_group_usage.py)."""

from __future__ import annotations

import csv
import io
import re
from datetime import timedelta

import pytest
import time_machine

from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue
from portal.usage import rollup
from portal.usage.models import UsageRollup
from tests.api.test_group_usage import HOUR, T0, seed_month

URL = "/teams/vision/chargeback/?month=2026-11"


@pytest.fixture
def month(cast, submit):
    """The API tests' month: vision's alice (2 GPUs on hpc at 2.50, two hours, idle the first, unknown the
    second) and bob (1 GPU on cloud at 4, one busy hour); fraud's charlie, who vision must never see."""
    seed_month(cast, submit)


def page_of(client, user, url=URL):
    client.force_login(user)
    response = client.get(url)
    return response, response.content.decode()


def cells(page: str, table: str) -> list[list[str]]:
    """The rows of one of the page's tables (by-member, by-queue, by-fabric), as the text of their cells."""
    body = page[page.index(f'id="by-{table}"') :]
    body = body[body.index("<tbody>") : body.index("</tbody>")]
    return [
        [re.sub(r"<[^>]+>", "", cell).strip() for cell in re.findall(r"<t[hd][^>]*>(.*?)</t[hd]>", row, re.S)]
        for row in re.findall(r"<tr>(.*?)</tr>", body, re.S)
    ]


def test_a_lead_sees_what_the_month_cost_and_how_much_sat_idle(month, client, bob):
    rollup.roll_up(T0 + 2 * HOUR, T0 + 3 * HOUR)  # an hour in which nothing of vision runs
    response, page = page_of(client, bob)
    assert response.status_code == 200
    assert "what its compute cost in November 2026" in page
    totals = dict(re.findall(r"<dt>(.*?)</dt><dd[^>]*>(.*?)</dd>", page))
    assert totals["Cost"] == "14.00"  # alice's 4 GPU-hours at 2.50, bob's one at 4
    assert totals["Cost of idle GPUs"] == "5.00"
    assert (totals["GPU-hours allocated"], totals["GPU-hours idle"], totals["Idle share"]) == ("5", "2", "67 %")
    assert totals["GPU-hours with no utilisation data"] == "2"
    assert (totals["GPU-hours reserved"], totals["Reserved but unused"]) == ("12", "7")  # 1 + 2 + 4 of 4 an hour
    assert cells(page, "member") == [
        ["alice", "4", "0.4", "2", "2", "100 %", "2", "8", "10.00", "5.00"],  # 1 CPU and 4 GB, two hours
        ["bob", "1", "0.9", "0", "0", "0 %", "1", "4", "4.00", "0.00"],
    ]
    assert [row[0] for row in cells(page, "queue")] == ["burst", "hpc-train"]
    assert [(row[0], row[8]) for row in cells(page, "fabric")] == [("cloud", "4.00"), ("hpc", "10.00")]
    assert "charlie" not in page
    assert "fraud" not in page


def test_the_page_s_csv_links_export_exactly_its_month(month, client, bob):
    _, page = page_of(client, bob)
    links = re.findall(r'href="(/teams/vision/usage\.csv\?[^"]+)"', page)
    assert [link.replace("&amp;", "&") for link in links] == [
        f"/teams/vision/usage.csv?from=2026-11-01&to=2026-12-01&by={by}" for by in ("member", "queue", "fabric")
    ]
    response = client.get(links[0].replace("&amp;", "&"))
    assert "vision-usage-2026110100-2026120100-by-member.csv" in response["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [(row["member"], row["cost"]) for row in table] == [("alice", "10.0"), ("bob", "4.0"), ("total", "14.0")]


def test_another_month_is_empty_and_the_next_link_stops_at_the_present(month, client, bob):
    with time_machine.travel(T0, tick=False):
        _, page = page_of(client, bob, "/teams/vision/chargeback/?month=2026-10")
        assert "Nothing of the team ran this month." in page
        assert '<dd class="cost">0.00</dd>' in page
        assert 'href="?month=2026-09"' in page
        assert 'href="?month=2026-11"' in page
        _, november = page_of(client, bob)
        assert 'href="?month=2026-10"' in november
        assert "?month=2026-12" not in november  # December has not come


def test_without_a_month_the_page_shows_the_current_one(month, client, it_admin):
    with time_machine.travel(T0 + timedelta(days=1), tick=False):  # 1 December: a new month, nothing yet
        _, december = page_of(client, it_admin, "/teams/vision/chargeback/")
    assert "in December 2026" in december
    assert '<dd class="cost">0.00</dd>' in december
    with time_machine.travel(T0, tick=False):
        _, november = page_of(client, it_admin, "/teams/vision/chargeback/")
    assert '<dd class="cost">14.00</dd>' in november


ARABIC_INDIC_2026_11 = "\u0662\u0660\u0662\u0666-\u0661\u0661"  # digits to str.isdigit, not to a year


@pytest.mark.parametrize(
    "asked", ["2026-13", "2026-00", "2026-1", "11-2026", "next", "2026-11-01", ARABIC_INDIC_2026_11, "x" * 300]
)
def test_a_month_that_is_not_one_is_said_on_the_page_not_a_500(month, client, bob, asked):
    response, page = page_of(client, bob, f"/teams/vision/chargeback/?month={asked}")
    assert response.status_code == 400
    assert "Pick a month as YYYY-MM, for example 2026-11." in page
    assert 'class="cost"' not in page


def test_the_page_reads_a_month_of_rollups_in_at_most_11_queries(
    month, client, bob, settings, django_assert_max_num_queries
):
    settings.DEMO = False  # a site's budget; the demo's notice of simulated readings is one query more
    vision, burst = ResourceGroup.objects.get(slug="vision"), Queue.objects.get(slug="burst")
    UsageRollup.objects.bulk_create(
        UsageRollup(group=vision, queue=burst, hour=T0 - HOUR * k, gpu_hours=1.0, cost=4.0) for k in range(1, 700)
    )  # the rest of November, hour by hour
    client.force_login(bob)
    with django_assert_max_num_queries(11):  # ... and one for the queues' names
        assert client.get(URL).status_code == 200


def test_the_page_names_queues_as_people_read_them(month, client, bob):
    Queue.objects.filter(slug="hpc-train").update(name="HPC training")
    _, page = page_of(client, bob)
    assert [row[0] for row in cells(page, "queue")] == ["burst", "HPC training"]


def test_the_team_dashboard_links_its_leads_and_it_to_the_chargeback(month, client, alice, bob, it_admin):
    for user, linked in ((alice, False), (bob, True), (it_admin, True)):
        client.force_login(user)
        page = client.get("/teams/vision/").content.decode()
        assert ('href="/teams/vision/chargeback/"' in page) is linked, user


def test_the_cost_is_in_the_sites_currency_or_says_no_price_is_set(month, client, bob, settings):
    settings.GRIDLANE_CURRENCY = "EUR"
    _, page = page_of(client, bob)
    assert "<dt>Cost (EUR)</dt>" in page
    assert "no price set" not in page
    Fabric.objects.update(gpu_hour_price=0, cpu_hour_price=0, memory_gb_hour_price=0)
    _, page = page_of(client, bob)
    assert '<dd class="cost"><span class="hint">no price set</span></dd>' in page
    assert 'id="no-price"' in page

"""Budgets where people look: the team dashboard and the usage API show each budget, its spend, the share spent
and its state, in one query more than before; another team's budgets are as absent as the team."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.budgets.conftest import ran, set_budget

pytestmark = pytest.mark.usefixtures("at_t0")
URL = "/api/v1/groups/{}/usage/?days=1"


@pytest.fixture
def budgets(alice, bob, it_admin, vision, submit) -> None:
    ran(submit, alice, gpus=2, hours=4)  # 8 GPU-hours, all alice's
    set_budget(it_admin, vision, gpu_hours=Decimal(10), money=Decimal(500))
    set_budget(bob, vision, alice, gpu_hours=Decimal(8))


def test_the_usage_api_shows_each_budget_its_spend_share_and_state(budgets, api_as, alice):
    answer = api_as(alice).get(URL.format("vision")).json()
    team, hers = answer["budgets"]
    assert (team["scope"], team["user"], team["gpu_hours"], team["money"]) == ("team", None, 10.0, 500.0)
    assert (team["spent_gpu_hours"], team["percent"], team["state"], team["held"]) == (8.0, 80.0, "warning", "")
    assert team["window"]["label"] == "December 2026"
    assert team["window"]["from"].startswith("2026-12-01T00:00:00")
    assert (hers["scope"], hers["user"], hers["percent"], hers["state"]) == ("member", "alice", 100.0, "spent")
    assert hers["held"].startswith("held: alice's GPU-hour budget in vision for December 2026 is spent (8 of 8")


def test_another_team_sees_neither_the_team_nor_its_budgets(budgets, api_as, charlie):
    assert api_as(charlie).get(URL.format("vision")).status_code == 404


def test_the_usage_api_reads_the_budgets_in_one_query_however_many(
    budgets, api_as, bob, agent, it_admin, vision, django_assert_num_queries
):
    client = api_as(bob)
    client.get(URL.format("vision"))  # the token's first use is recorded: not this endpoint's cost
    # The token (with its owner); the team; the totals; the reservation by hour; the budgets.
    with django_assert_num_queries(5) as two:
        assert len(client.get(URL.format("vision")).json()["budgets"]) == 2
    assert sum("budgets_budget" in q["sql"] for q in two.captured_queries) == 1
    set_budget(bob, vision, agent.user, gpu_hours=Decimal(1))
    with django_assert_num_queries(5):
        assert len(client.get(URL.format("vision")).json()["budgets"]) == 3


def test_the_team_dashboard_shows_the_budgets(budgets, client, alice):
    client.force_login(alice)
    page = client.get("/teams/vision/").content.decode()
    assert 'id="budgets"' in page
    assert "8 of 10" in page
    assert "80 %" in page
    assert 'class="state state-spent"' in page
    assert "new work waits" in page


def test_a_team_without_budgets_shows_no_section(client, charlie):
    client.force_login(charlie)
    assert 'id="budgets"' not in client.get("/teams/fraud/").content.decode()


def test_a_lead_sets_a_members_budget_through_the_api_and_a_second_post_changes_it(budgets, api_as, bob):
    client = api_as(bob)
    answer = client.post("/api/v1/groups/vision/budgets/", {"user": "alice", "gpu_hours": 9}, format="json")
    assert answer.status_code == 200
    assert (answer.json()["gpu_hours"], answer.json()["state"], answer.json()["held"]) == (9.0, "warning", "")
    again = client.post("/api/v1/groups/vision/budgets/", {"user": "alice", "money": 50}, format="json").json()
    assert (again["gpu_hours"], again["money"]) == (9.0, 50.0)


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"user": "alice", "gpu_hours": 11}, "gpu_hours"),  # above the team's 10
        ({"user": "alice", "gpu_hour": 1}, "gpu_hour"),  # unknown
        ({"user": "nobody", "gpu_hours": 1}, "user"),
        ({"user": "alice", "gpu_hours": 1, "thresholds": [90, 50]}, "thresholds"),
        ({"user": "alice", "gpu_hours": 1, "window": "week"}, "window"),
    ],
)
def test_a_wrong_body_is_a_400_naming_its_field(budgets, api_as, bob, body, field):
    answer = api_as(bob).post("/api/v1/groups/vision/budgets/", body, format="json")
    assert answer.status_code == 400
    assert field in answer.json()["errors"]


def test_a_lead_sets_a_members_budget_on_the_dashboard_within_the_teams(budgets, client, bob, alice):
    client.force_login(bob)
    page = client.get("/teams/vision/").content.decode()
    assert "/teams/vision/budgets/set/" in page
    form = {"user": str(alice.pk), "gpu_hours": "12", "money": "", "window": "month", "starts_on": "", "ends_on": ""}
    refused = client.post("/teams/vision/budgets/set/", form)
    assert refused.status_code == 400
    assert "Above the team&#x27;s budget of 10 GPU-hours." in refused.content.decode()
    done = client.post("/teams/vision/budgets/set/", form | {"gpu_hours": "9"})
    assert done.status_code == 302
    assert done["Location"].endswith("/teams/vision/#budgets")
    assert "8 of 9" in client.get("/teams/vision/").content.decode()
    own = client.post("/teams/vision/budgets/set/", form | {"user": ""})
    assert "The team&#x27;s own budget is set by IT" in own.content.decode()


def test_a_member_may_not_set_budgets(budgets, client, alice):
    client.force_login(alice)
    assert "/budgets/set/" not in client.get("/teams/vision/").content.decode()
    assert client.post("/teams/vision/budgets/set/", {"user": str(alice.pk), "gpu_hours": "1"}).status_code == 403

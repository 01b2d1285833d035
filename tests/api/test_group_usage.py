"""GET /api/v1/groups/{slug}/usage/: a team's GPU-hours and their cost, from rollups the worker made of real
workloads and samples; the CSV export of the same figures on the team dashboard, for leads and IT."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import time_machine

from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric, Queue, QueueTarget
from portal.usage import rollup
from portal.usage.models import UsageRollup, UsageSample
from portal.workloads.models import Workload
from portal.workloads.states import State

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
HOUR = timedelta(hours=1)
URL = "/api/v1/groups/{}/usage/?from=2026-11-30T10:00:00Z&to=2026-11-30T12:00:00Z"


def ran(user: Any, submit: Any, queue: str, fabric: Fabric, gpus: float, hours: int, utilisation: float | None) -> Any:
    """A finished workload that ran `hours` from T0 on `fabric`, sampled every 5 minutes of its first hour."""
    w = submit(user, queue=queue, kind="training", gpus=gpus)
    Workload.objects.filter(pk=w.pk).update(
        state=State.SUCCEEDED, fabric=fabric, submitted_at=T0 - timedelta(minutes=10), started_at=T0,
        finished_at=T0 + hours * HOUR,
    )  # fmt: skip
    if utilisation is not None:
        UsageSample.objects.bulk_create(
            UsageSample(workload=w, at=T0 + timedelta(minutes=m), gpus_milli=int(gpus * 1000),
                        gpu_utilisation=utilisation, source=UsageSample.Source.JOB)
            for m in range(0, 60, 5)
        )  # fmt: skip
    return w


@pytest.fixture
def month(cast: dict[str, Any], submit: Any) -> None:
    seed_month(cast, submit)


def seed_month(cast: dict[str, Any], submit: Any) -> None:
    """Vision: alice's 2 GPUs on hpc ($2.50/GPU-hour) two hours, sampled at 20 % the first hour only; bob's
    GPU on cloud ($4) one hour at 90 %. Fraud: charlie's 8 GPUs on hpc, never to be seen by vision."""
    from tests.usage.test_rollup import quotas_from_long_ago

    quotas_from_long_ago()
    hpc = Fabric.objects.create(
        name="hpc", kind="slurm", gpus_milli=64000, cpus_milli=64000, memory_mib=256000, gpu_hour_price=Decimal("2.5")
    )
    cloud = Fabric.objects.create(
        name="cloud", kind="slurm", gpus_milli=8000, cpus_milli=64000, memory_mib=256000, gpu_hour_price=Decimal("4")
    )
    for slug, fabric in (("hpc-train", hpc), ("burst", cloud)):
        queue = Queue.objects.create(slug=slug, name=slug, kinds=["training"])
        queue.allowed_groups.add(*ResourceGroup.objects.all())
        QueueTarget.objects.create(queue=queue, fabric=fabric)
    ran(cast["alice"], submit, "hpc-train", hpc, gpus=2, hours=2, utilisation=20)
    ran(cast["bob"], submit, "burst", cloud, gpus=1, hours=1, utilisation=90)
    ran(cast["charlie"], submit, "hpc-train", hpc, gpus=8, hours=2, utilisation=None)
    rollup.roll_up(T0, T0 + 2 * HOUR)


VISION = {
    "allocated_gpu_hours": 5.0,
    "used_gpu_hours": 2 * 0.2 + 1 * 0.9,
    "idle_gpu_hours": 2.0,  # alice's first hour, below 80 %
    "unknown_gpu_hours": 2.0,  # alice's second hour: no samples, neither busy nor idle
    "idle_share": round(2 / 3, 4),
    "cost": 4 * 2.5 + 1 * 4.0,
    "idle_cost": 2 * 2.5,
}


def test_a_member_reads_the_team_s_totals_from_the_rollups(month, api_as, alice):
    answer = api_as(alice).get(URL.format("vision")).json()
    assert (answer["group"], answer["from"], answer["to"], answer["by"]) == (
        "vision", "2026-11-30T10:00:00+00:00", "2026-11-30T12:00:00+00:00", None,
    )  # fmt: skip
    totals = answer["totals"]
    assert {k: totals[k] for k in VISION} == pytest.approx(VISION)
    assert totals["pending_gpu_hours"] == 0.0  # they waited before the period
    assert totals["reserved_gpu_hours"] == pytest.approx(2 * 4.0)  # vision's 4 GPUs reserved, two hours
    assert totals["unused_reservation_gpu_hours"] == pytest.approx((4 - 3) + (4 - 2))
    assert answer["idle_rule"] == {"below_percent": 80.0, "window_minutes": 30}
    assert "rows" not in answer


def test_by_member_queue_and_fabric_split_the_same_totals(month, api_as, bob):
    client = api_as(bob)
    rows = {by: client.get(URL.format("vision") + f"&by={by}").json()["rows"] for by in ("member", "queue", "fabric")}
    assert [(r["member"], r["allocated_gpu_hours"], r["cost"], r["idle_cost"]) for r in rows["member"]] == [
        ("alice", 4.0, 10.0, 5.0),
        ("bob", 1.0, 4.0, 0.0),
    ]
    assert [(r["queue"], r["unknown_gpu_hours"], r["idle_share"]) for r in rows["queue"]] == [
        ("burst", 0.0, 0.0),
        ("hpc-train", 2.0, 1.0),
    ]
    assert [(r["fabric"], r["used_gpu_hours"]) for r in rows["fabric"]] == [("cloud", 0.9), ("hpc", 0.4)]
    for by, listed in rows.items():
        for figure in ("allocated_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "unknown_gpu_hours", "cost"):
            assert sum(r[figure] for r in listed) == pytest.approx(VISION[figure]), (by, figure)


def test_a_team_with_no_utilisation_data_has_no_idle_share_not_zero(month, api_as, charlie):
    totals = api_as(charlie).get(URL.format("fraud")).json()["totals"]
    assert totals["unknown_gpu_hours"] == pytest.approx(16.0)
    assert (totals["idle_gpu_hours"], totals["idle_share"]) == (0.0, None)
    assert totals["cost"] == pytest.approx(16 * 2.5)


def test_another_team_gets_404_as_if_it_did_not_exist(month, api_as, charlie):
    assert api_as(charlie).get(URL.format("vision")).status_code == 404
    assert api_as(charlie).get(URL.format("no-such-team")).status_code == 404


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("?by=owner", "by"),
        ("?from=yesterday", "from"),
        ("?from=2026-11-30T10:00:00", "from"),  # no time zone
        ("?to=2026-13-01", "to"),
        ("?from=2026-11-30&to=2026-11-01", "from"),  # the wrong way round
        ("?from=2026-11-30T10:00:00Z&to=2026-11-30T10:00:00Z", "from"),  # empty
        ("?from=2020-01-01&to=2026-11-30", "from"),  # more than 400 days
        ("?days=0", "days"),
        ("?days=1e3", "days"),
        ("?days=7&from=2026-11-01", "days"),
    ],
)
def test_a_wrong_parameter_is_named_in_a_400(month, api_as, alice, query, field):
    answer = api_as(alice).get(f"/api/v1/groups/vision/usage/{query}")
    assert answer.status_code == 400
    assert field in answer.json()["errors"]


def test_days_counts_back_from_the_end_of_the_current_hour(month, api_as, alice):
    with time_machine.travel(T0 + 2 * HOUR + timedelta(minutes=20), tick=False):
        answer = api_as(alice).get("/api/v1/groups/vision/usage/?days=1").json()
    assert (answer["from"], answer["to"]) == ("2026-11-29T13:00:00+00:00", "2026-11-30T13:00:00+00:00")
    assert answer["totals"]["allocated_gpu_hours"] == pytest.approx(5.0)


def test_the_answer_takes_the_same_few_queries_for_a_day_or_a_year_of_rollups(
    month, api_as, bob, django_assert_num_queries
):
    client = api_as(bob)
    client.get(URL.format("vision"))  # the token's first use is recorded (once a minute): not this endpoint's cost
    # The token (with its owner); the team; the totals, the reservation by hour, the rows; the team's budgets.
    with django_assert_num_queries(6):
        assert client.get(URL.format("vision") + "&by=queue").status_code == 200
    vision = ResourceGroup.objects.get(slug="vision")
    queue = Queue.objects.get(slug="burst")
    UsageRollup.objects.bulk_create(
        UsageRollup(group=vision, queue=queue, hour=T0 - HOUR * k, gpu_hours=1.0, cost=4.0) for k in range(1, 24 * 365)
    )
    with django_assert_num_queries(6):
        year = client.get("/api/v1/groups/vision/usage/?from=2025-11-30&to=2026-11-30T12:00:00Z&by=queue")
    assert year.json()["totals"]["allocated_gpu_hours"] == pytest.approx(5.0 + 24 * 365 - 1)


def test_a_lead_exports_the_figures_as_csv_and_a_member_may_not(month, client, alice, bob, charlie):
    client.force_login(bob)
    response = client.get("/teams/vision/usage.csv?from=2026-11-30T10:00:00Z&to=2026-11-30T12:00:00Z&by=member")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    assert "vision-usage-2026113010-2026113012-by-member.csv" in response["Content-Disposition"]
    table = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert [row["member"] for row in table] == ["alice", "bob", "total"]
    assert float(table[0]["cost"]) == 10.0
    assert float(table[2]["idle_gpu_hours"]) == 2.0
    assert float(table[2]["unknown_gpu_hours"]) == 2.0
    assert float(table[2]["unused_reservation_gpu_hours"]) == 3.0  # the team's: on the total only
    assert table[0]["unused_reservation_gpu_hours"] == ""
    assert "Usage and cost as CSV" in client.get("/teams/vision/").content.decode()
    client.force_login(alice)
    assert client.get("/teams/vision/usage.csv").status_code == 403
    assert "Usage and cost as CSV" not in client.get("/teams/vision/").content.decode()
    client.force_login(charlie)
    assert client.get("/teams/vision/usage.csv").status_code == 404


def test_a_name_that_looks_like_a_formula_reaches_the_spreadsheet_as_text():
    from portal.dashboards.views import csv_safe

    assert csv_safe("=HYPERLINK(1)") == "'=HYPERLINK(1)"
    assert csv_safe("alice") == "alice"


def test_cpus_and_memory_are_charged_beside_gpus_where_the_fabric_prices_them(month, api_as, bob):
    Fabric.objects.filter(name="hpc").update(cpu_hour_price=Decimal("0.05"), memory_gb_hour_price=Decimal("0.01"))
    rollup.roll_up(T0, T0 + 2 * HOUR)
    alice_run = Workload.objects.get(group__slug="vision", queue__slug="hpc-train")
    bob_run = Workload.objects.get(group__slug="vision", queue__slug="burst")
    cpu_hours = {w: w.cpus_milli / 1000 * w.nodes * h for w, h in ((alice_run, 2), (bob_run, 1))}
    gb_hours = {w: w.memory_mib / 1024 * w.nodes * h for w, h in ((alice_run, 2), (bob_run, 1))}
    answer = api_as(bob).get(URL.format("vision") + "&by=fabric").json()
    totals = answer["totals"]
    assert totals["cpu_hours"] == pytest.approx(sum(cpu_hours.values()))
    assert totals["memory_gb_hours"] == pytest.approx(sum(gb_hours.values()), abs=1e-4)
    # cloud prices only its GPUs; hpc its GPUs, CPUs and memory.
    hpc_cost = 4 * 2.5 + cpu_hours[alice_run] * 0.05 + gb_hours[alice_run] * 0.01
    assert totals["cost"] == pytest.approx(hpc_cost + 4.0, abs=0.01)
    assert totals["idle_cost"] == pytest.approx(VISION["idle_cost"])  # idle is the GPUs' alone
    rows = {r["fabric"]: r for r in answer["rows"]}
    assert rows["hpc"]["cost"] == pytest.approx(hpc_cost, abs=0.01)
    assert rows["cloud"]["cost"] == pytest.approx(4.0)
    assert rows["cloud"]["cpu_hours"] == pytest.approx(cpu_hours[bob_run])


def test_reservation_held_but_unused_counts_each_hour_and_never_below_zero(month, api_as, bob, charlie):
    """Vision reserves 4 GPUs: it holds 3 at 10:00 (1 unused), 2 at 11:00 (2 unused) and nothing at 12:00 (4).
    Fraud reserves 2 and holds 8 at 10:00 and 11:00 (over: 0, making up for nothing), nothing at 12:00 (2)."""
    rollup.roll_up(T0 + 2 * HOUR, T0 + 3 * HOUR)  # an hour in which nothing runs: no team-queue rows at all
    url = "/api/v1/groups/{}/usage/?from=2026-11-30T10:00:00Z&to=2026-11-30T13:00:00Z&by=member"
    vision = api_as(bob).get(url.format("vision")).json()
    assert vision["totals"]["reserved_gpu_hours"] == pytest.approx(12.0)
    assert vision["totals"]["unused_reservation_gpu_hours"] == pytest.approx(1 + 2 + 4)
    assert all("unused_reservation_gpu_hours" not in row for row in vision["rows"])  # the team's, not a member's
    fraud = api_as(charlie).get(url.format("fraud")).json()["totals"]
    assert (fraud["reserved_gpu_hours"], fraud["unused_reservation_gpu_hours"]) == pytest.approx((6.0, 2.0))

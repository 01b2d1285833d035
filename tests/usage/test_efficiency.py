"""The owner's efficiency page, its API and `gridlane stats`: what a week-long 8-GPU job did with what it held,
read in a fixed number of queries; its owner, its team's leads and IT see it, nobody else."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import time_machine
from django.contrib.auth import get_user_model

from gridlane_cli import stats
from portal.accounts.models import Membership, ResourceGroup
from portal.usage import gpu_windows
from portal.usage.efficiency import efficiency, with_sampler
from portal.usage.models import SamplerStart, UsageGpuSample, UsageGpuWindow, UsageSample
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State

T0 = datetime(2026, 11, 23, 0, 0, tzinfo=UTC)
WEEK = timedelta(days=7)
HOUR = timedelta(hours=1)
EVERY = timedelta(minutes=10)
BUSY = {0, 1, 2, 3, 4, 5}  # of its 8 GPUs, six work; two sit idle (and all eight on the idle day)


def readings_of_a_week(w: Workload, idle_day: int | None = None) -> None:
    """One reading every ten minutes for a week: GPUs 0-5 at 95 %, 6 and 7 at 2 %; on `idle_day`, all at 0."""
    samples, gpus = [], []
    at = T0
    while at < T0 + WEEK:
        quiet = idle_day is not None and (at - T0).days == idle_day
        use = [0 if quiet else (95 if i in BUSY else 2) for i in range(8)]
        idle = sum(1 for u in use if u < 80)
        samples.append(UsageSample(workload=w, at=at, source=UsageSample.Source.JOB, gpus_milli=8000, node="n1",
                                   gpu_utilisation=sum(use) / 8, gpus_read=8, gpus_idle=idle))  # fmt: skip
        gpus += [UsageGpuSample(workload=w, at=at, node="n1", gpu=i, utilisation=u, memory_mib=1000 + 1000 * i)
                 for i, u in enumerate(use)]  # fmt: skip
        at += EVERY
    UsageSample.objects.bulk_create(samples)
    UsageGpuSample.objects.bulk_create(gpus, batch_size=5000)
    gpu_windows.rebuild(w.pk)  # the five-minute sums ingest writes beside them


@pytest.fixture
def week_job(alice: Any, submit: Any) -> Workload:
    """alice's 8-GPU training job that ran for the whole week of T0, with its samples."""
    w = submit(alice, name="week-of-eight", gpus=1)
    Workload.objects.filter(pk=w.pk).update(
        gpus_milli=8000,  # over the team's limit today: it held them last week
        state=State.SUCCEEDED,
        started_at=T0,
        finished_at=T0 + WEEK,
        submitted_at=T0 - timedelta(minutes=5),
    )
    WorkloadEvent.objects.create(workload_id=w.pk, at=T0 + timedelta(days=3), from_state="running",
                                 to_state="running", reason="warned: its GPUs sat idle for 2 hours")  # fmt: skip
    readings_of_a_week(w, idle_day=3)
    w.refresh_from_db()
    return w


@pytest.fixture
def dave(cast: Any) -> Any:
    """A member of alice's team who is not its lead."""
    user = get_user_model().objects.create_user("dave")
    Membership.objects.create(user=user, group=ResourceGroup.objects.get(slug="vision"), role=Membership.Role.MEMBER)
    return user


def test_a_week_of_eight_gpus_six_used_says_two_idle_and_the_idle_day_is_a_spell(week_job, settings):
    settings.GRIDLANE_IDLE_WINDOW_MINUTES = 30
    found = efficiency(week_job, T0 + WEEK + timedelta(days=1), timedelta(minutes=30))
    s = found.summary()
    assert s["held_seconds"] == WEEK.total_seconds()  # a finished job: start to end, not to now
    assert s["gpus_held"] == 8
    assert s["gpus_idle"] == 2
    assert [(g["gpu"], g["idle"]) for g in s["per_gpu"]] == [(i, i not in BUSY) for i in range(8)]
    assert s["per_gpu"][7]["peak_memory_mib"] == 8000
    assert s["idle_spells"] == [
        {"from": (T0 + timedelta(days=3)).isoformat(), "to": (T0 + timedelta(days=4)).isoformat()}
    ]
    assert s["idle_seconds"] == timedelta(days=1).total_seconds()  # a window is idle when most of its GPUs are
    assert s["used_seconds"] == timedelta(days=6).total_seconds()
    assert s["unknown_seconds"] == 0
    assert "warned: its GPUs sat idle for 2 hours" in [a["reason"] for a in s["actions"]]
    assert s["cpu_efficiency_percent"] is None  # not measured: said, never 0
    assert s["why_unknown"] == ""


def test_the_page_of_a_week_long_eight_gpu_job_renders_in_at_most_five_queries(
    week_job, client, alice, settings, django_assert_max_num_queries
):
    settings.DEMO = False  # a site's budget; the demo's notice of simulated readings is one query more
    client.force_login(alice)
    later = time_machine.travel(T0 + WEEK + timedelta(hours=1), tick=False)
    with later, django_assert_max_num_queries(5):  # session, user; the workload; its GPUs and windows; its events
        page = client.get(f"/workloads/{week_job.pk}/efficiency/")
    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="figure-gpu"' in text
    assert "n1 GPU 7" in text
    assert "2 of 8 read" in text


def test_its_owner_its_lead_and_it_read_it_a_teammate_and_another_team_get_404(
    week_job, client, alice, bob, charlie, it_admin, dave
):
    url = f"/workloads/{week_job.pk}/efficiency/"
    for user, answer in ((alice, 200), (bob, 200), (it_admin, 200), (dave, 404), (charlie, 404)):
        client.force_login(user)
        assert client.get(url).status_code == answer, user.username
        assert client.get(f"/api/v1/workloads/{week_job.pk}/efficiency/").status_code == answer, user.username


def test_a_native_job_whose_sampler_could_not_start_says_why_its_use_is_unknown(alice, submit, api_as):
    w = submit(alice, name="own-script", gpus=2)
    Workload.objects.filter(pk=w.pk).update(state=State.RUNNING, started_at=T0, script="#!/bin/bash\ntrue\n")
    SamplerStart.objects.create(workload_id=w.pk, at=T0, started=False, reason="srun: error: Invalid job id")
    with time_machine.travel(T0 + timedelta(hours=2), tick=False):
        answer = api_as(alice).get(f"/api/v1/workloads/{w.pk}/efficiency/").json()
    assert answer["why_unknown"] == "the sampler could not start: srun: error: Invalid job id"
    assert answer["unknown_seconds"] == 7200
    assert answer["gpu_utilisation_percent"] is None
    text = stats.render(answer)
    assert "GPU use unknown:  the sampler could not start: srun: error: Invalid job id" in text
    assert "GPU utilisation:  unknown" in text


def test_gridlane_stats_prints_the_summary_the_api_gives(week_job, api_as, settings):
    settings.GRIDLANE_IDLE_WINDOW_MINUTES = 30
    answer = api_as(week_job.owner).get(f"/api/v1/workloads/{week_job.pk}/efficiency/").json()
    text = stats.render(answer)
    assert "GPUs held:        8 on 1 node(s)" in text
    assert "Time held:        168.00 h" in text
    assert "(2 of 8 GPUs read idle)" in text
    assert "n1  7  1.7 %  8000 MiB idle" in text  # 2 % for six days, 0 for one
    assert "n1  0  81.4 %  1000 MiB\n" in text  # 95 % for six days, 0 for one: busy on the whole


def test_with_sampler_adds_no_query(week_job, django_assert_num_queries):
    with django_assert_num_queries(1):
        w = with_sampler(Workload.objects.filter(pk=week_job.pk)).get()
    assert w.sampler_started is None


def test_the_workload_page_links_its_owner_to_the_efficiency_page(week_job, client, alice, bob):
    client.force_login(alice)
    assert f"/workloads/{week_job.pk}/efficiency/" in client.get(f"/workloads/{week_job.pk}/").content.decode()


def test_a_cpu_only_job_is_judged_on_its_cpus(alice, submit):
    w = submit(alice, name="cpu-only", gpus=0)
    Workload.objects.filter(pk=w.pk).update(state=State.SUCCEEDED, started_at=T0, finished_at=T0 + timedelta(hours=1))
    for minute in range(0, 60, 10):  # busy the first half hour, idle the second
        busy = 95.0 if minute < 30 else 1.0
        UsageSample.objects.create(workload_id=w.pk, at=T0 + timedelta(minutes=minute), gpus_milli=0,
                                   cpu_utilisation=busy, source=UsageSample.Source.JOB)  # fmt: skip
    w.refresh_from_db()
    s = efficiency(w, T0 + timedelta(hours=2), timedelta(minutes=30)).summary()
    assert (s["used_seconds"], s["idle_seconds"], s["unknown_seconds"]) == (1800, 1800, 0)
    assert s["cpu_efficiency_percent"] == 48.0
    assert s["idle_spells"] == [{"from": (T0 + timedelta(minutes=30)).isoformat(), "to": (T0 + HOUR).isoformat()}]


def test_a_finished_job_keeps_its_summary_once_its_samples_are_pruned(week_job, api_as, settings):
    from portal.usage.models import UsageSummary
    from portal.worker import samplers

    settings.GRIDLANE_IDLE_WINDOW_MINUTES = 30
    Workload.objects.filter(pk=week_job.pk).update(finished_at=T0 + WEEK + timedelta(days=20))  # ended just now
    with time_machine.travel(T0 + WEEK + timedelta(days=20, hours=1), tick=False):
        assert samplers.step(timezone_now())["summaries"] == 1
        assert samplers.step(timezone_now())["summaries"] == 0  # once
        before = api_as(week_job.owner).get(f"/api/v1/workloads/{week_job.pk}/efficiency/").json()
        UsageSample.objects.filter(workload=week_job).delete()  # retention prunes the raw samples
        UsageGpuSample.objects.filter(workload=week_job).delete()
        UsageGpuWindow.objects.filter(workload=week_job).delete()
        after = api_as(week_job.owner).get(f"/api/v1/workloads/{week_job.pk}/efficiency/").json()
    assert UsageSummary.objects.filter(workload=week_job).exists()
    assert after == before
    assert after["gpus_idle"] == 2


def timezone_now() -> datetime:
    from django.utils import timezone

    return timezone.now()

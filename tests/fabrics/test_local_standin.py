"""The demo's stand-in GPU readings: on the demo's local fabric, in demo mode only, each running job reads a
deterministic made-up utilisation (some idle, most busy), which the pages that show it mark as simulated."""

from __future__ import annotations

import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from fabrics.base import FabricConfig, JobState, Resources
from fabrics.local import standin
from fabrics.local.fabric import LocalFabric
from portal.queues.models import Fabric
from tests.fabrics.test_local import child_pgid, job


def test_the_readings_are_deterministic_in_range_and_some_jobs_sit_idle():
    at = datetime(2026, 12, 1, 10, 0, tzinfo=UTC)
    ids = [str(uuid.UUID(int=n)) for n in range(200)]
    readings = [standin.utilisation(i, at) for i in ids]
    assert readings == [standin.utilisation(i, at) for i in ids]
    assert all(0.0 <= r <= 100.0 for r in readings)
    idle = sum(r < 5 for r in readings)
    assert 20 <= idle <= 80  # about one in four
    assert sum(r >= 35 for r in readings) >= 100
    later = [standin.utilisation(i, at + timedelta(minutes=30)) for i in ids]
    assert later != readings  # it drifts with time


def test_a_running_local_job_reads_the_stand_in_only_when_the_fabric_says_so(tmp_path: Path):
    def fabric(simulated: bool) -> LocalFabric:
        settings = {"root": str(tmp_path / "jobs"), "simulated_gpus": simulated}
        return LocalFabric(FabricConfig("local", "local", Resources(1000, 8000, 16384), settings))

    plain = fabric(False)
    external_id = plain.submit(job("sleep 300"))
    child_pgid(plain, external_id)
    try:
        assert plain.poll([external_id])[external_id].gpu_utilisation is None
        before = datetime.now(UTC)
        status = fabric(True).poll([external_id])[external_id]
        after = datetime.now(UTC)
        assert status.state is JobState.RUNNING
        assert status.gpu_utilisation in {standin.utilisation(external_id, t) for t in (before, after)}
    finally:
        plain.cancel(external_id)
        deadline = time.monotonic() + 60
        while not plain.poll([external_id])[external_id].state.finished and time.monotonic() < deadline:
            time.sleep(0.05)


@pytest.mark.parametrize("demo", [True, False])
def test_seed_demo_asks_for_the_stand_in_and_only_demo_mode_gets_it(cast, settings, demo):
    settings.DEMO = demo
    local = Fabric.objects.get(name="local")
    assert local.settings["simulated_gpus"] is True
    assert local.to_config().settings["simulated_gpus"] is demo


@pytest.mark.parametrize("demo", [True, False])
def test_the_team_dashboard_and_chargeback_say_the_numbers_are_simulated_in_demo_mode_only(
    cast, settings, client, demo
):
    settings.DEMO = demo
    client.force_login(cast["bob"])
    for url in ("/teams/vision/", "/teams/vision/chargeback/"):
        page = client.get(url)
        assert page.status_code == 200, url
        assert ('id="simulated-gpus"' in page.content.decode()) is demo, url


@pytest.mark.usefixtures("local_jobs")
def test_the_worker_keeps_the_stand_in_as_the_fabrics_reading_of_a_running_demo_job(alice, submit, settings):
    from portal.usage.models import UsageSample
    from portal.worker import connections, tasks
    from portal.workloads.models import Workload
    from portal.workloads.states import State
    from tests.conftest import wait_until

    settings.DEMO = True
    connections.forget_all()  # the fabric is built again with demo mode's settings
    workload = submit(alice, command="sleep 300", gpus=1)

    def sampled() -> bool:
        tasks.cycle()
        return UsageSample.objects.filter(workload=workload, source=UsageSample.Source.FABRIC).exists()

    wait_until(sampled, timeout=30, every=0.1)
    sample = UsageSample.objects.get(workload=workload, source=UsageSample.Source.FABRIC)
    assert sample.gpus_milli == 1000
    assert sample.gpu_utilisation is not None
    assert 0 <= sample.gpu_utilisation <= 100
    assert Workload.objects.get(pk=workload.pk).state == State.RUNNING  # the job itself: stopped by local_jobs

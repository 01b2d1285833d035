"""A native job's sampler that dies at once is tried again, a bounded number of times with a growing wait, and
its reason says so meanwhile; after the last try, or a failure no retry can mend, the reason stays."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from fabrics.base import FabricError
from portal.usage.models import SamplerStart
from portal.worker import samplers
from portal.workloads.models import Workload
from tests.usage.test_samples import T0, hpc, running

__all__ = ["hpc", "running"]  # the fixtures this module borrows


class Launcher:
    """A fabric whose sampler step dies at once `dies` times (as srun's step does while the job's own processes
    are not there yet), then starts."""

    def __init__(self, dies: int, retryable: bool = True) -> None:
        self.dies, self.retryable, self.calls = dies, retryable, 0

    def start_sampler(self, external_id: str, nodes: int, env: Any, secret: str) -> None:
        self.calls += 1
        if self.calls <= self.dies:
            raise FabricError("srun: error: the step ended at once (status 3)", retryable=self.retryable)


@pytest.fixture
def native(running: Workload) -> Workload:
    Workload.objects.filter(pk=running.pk).update(script="#!/bin/bash\n#SBATCH --gres=gpu:1\ntrue\n", started_at=T0)
    running.refresh_from_db()
    return running


def use(monkeypatch: pytest.MonkeyPatch, launcher: Launcher) -> Launcher:
    monkeypatch.setattr(samplers, "fabric_for", lambda row: launcher)
    return launcher


def test_a_sampler_that_dies_at_once_is_tried_again_with_backoff_and_then_starts(native, monkeypatch):
    launcher = use(monkeypatch, Launcher(dies=2))
    assert samplers.step(T0)["retrying"] == 1
    first = SamplerStart.objects.get(workload=native)
    assert (first.started, first.tries, first.retry_at) == (False, 1, T0 + timedelta(seconds=samplers.RETRY_S))
    assert first.reason.endswith("(try 1 of 4; it will be tried again)")
    assert samplers.due(T0 + timedelta(seconds=samplers.RETRY_S - 1)) == []  # not before its time
    assert samplers.step(T0 + timedelta(seconds=samplers.RETRY_S))["retrying"] == 1
    second = SamplerStart.objects.get(workload=native)
    assert second.retry_at == T0 + timedelta(seconds=3 * samplers.RETRY_S)  # waits twice as long
    counts = samplers.step(T0 + timedelta(seconds=3 * samplers.RETRY_S))
    assert (counts["started"], counts["retrying"], counts["unknown"]) == (1, 0, 0)
    done = SamplerStart.objects.get(workload=native)
    assert (done.started, done.reason, done.tries, done.retry_at) == (True, "", 3, None)
    assert samplers.due(T0 + timedelta(days=1)) == []  # once started, never again this run
    assert launcher.calls == 3


def test_after_the_last_try_the_reason_stays_and_it_is_not_tried_again(native, monkeypatch):
    launcher = use(monkeypatch, Launcher(dies=99))
    at = T0
    for _ in range(samplers.MAX_TRIES):
        samplers.step(at)
        at += timedelta(hours=1)
    final = SamplerStart.objects.get(workload=native)
    assert (final.started, final.tries, final.retry_at) == (False, samplers.MAX_TRIES, None)
    assert final.reason == "srun: error: the step ended at once (status 3) (after 4 tries)"
    assert samplers.due(at + timedelta(days=1)) == []
    assert launcher.calls == samplers.MAX_TRIES


def test_a_failure_no_retry_mends_is_final_at_once(native, monkeypatch):
    launcher = use(monkeypatch, Launcher(dies=1, retryable=False))
    assert samplers.step(T0)["unknown"] == 1
    final = SamplerStart.objects.get(workload=native)
    assert (final.reason, final.retry_at) == ("srun: error: the step ended at once (status 3)", None)
    assert samplers.due(T0 + timedelta(days=1)) == []
    assert launcher.calls == 1


def test_a_new_run_of_the_workload_starts_its_tries_afresh(native, monkeypatch):
    use(monkeypatch, Launcher(dies=99, retryable=False))
    samplers.step(T0)
    Workload.objects.filter(pk=native.pk).update(attempt=native.attempt + 1)
    assert [w.pk for w in samplers.due(T0)] == [native.pk]
    samplers.step(T0)
    assert SamplerStart.objects.get(workload=native).tries == 1

"""Each GPU's five-minute sums (UsageGpuWindow), written at ingest beside the raw per-GPU rows: the same as
recomputed from those rows, added to across posts, and the efficiency page reads the same from them as from
every reading."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import time_machine

from portal.usage import efficiency as eff
from portal.usage import gpu_windows
from portal.usage.models import UsageGpuSample, UsageGpuWindow
from portal.workloads.models import Workload
from tests.usage.test_samples import MIG, T0, hpc, post, running, secret_of

__all__ = ["hpc", "running"]  # the fixtures this module borrows


def smi(*gpus: tuple[int, int]) -> str:
    return "".join(f"{i}, {u}, {m}\n" for i, (u, m) in enumerate(gpus))


def windows_of(w: Workload) -> list[tuple[Any, ...]]:
    rows = UsageGpuWindow.objects.filter(workload=w).order_by("start", "node", "gpu")
    return [(r.start, r.node, r.gpu, r.readings, round(r.utilisation_sum, 6), r.memory_peak_mib) for r in rows]


def three_posts(w: Workload) -> None:
    """Three batches of ten readings 30 s apart (a quarter of an hour), two GPUs on n1, varying."""
    for n in range(3):
        with time_machine.travel(T0 + timedelta(minutes=5 * n + 5), tick=False):
            readings = [
                {"age": age, "node": "n1", "nvidia_smi": smi((age % 100, 1000 + age + n), (3, 500 * n))}
                for age in range(270, -1, -30)
            ]
            assert post(w.pk, secret_of(w), {"readings": readings}).status_code == 204


def test_ingest_writes_the_sums_the_raw_rows_give(running, settings):
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 10
    three_posts(running)
    written = windows_of(running)
    assert sum(r[3] for r in written) == UsageGpuSample.objects.filter(workload=running).count() == 60
    assert {r[0] for r in written} == {T0 + timedelta(minutes=m) for m in (0, 5, 10, 15)}
    gpu1 = [r for r in written if r[2] == 1]
    assert [r[5] for r in gpu1] == [0, 500, 1000, 1000]  # the peak memory of each five minutes, across posts
    assert all(r[4] == 3 * r[3] for r in gpu1)
    gpu_windows.rebuild(running.pk)
    assert windows_of(running) == written  # the same sums recomputed from every reading


def test_a_mig_slice_counts_no_reading_and_keeps_its_memory(running):
    with time_machine.travel(T0, tick=False):
        assert post(running.pk, secret_of(running), {"node": "mig-node", "nvidia_smi": MIG}).status_code == 204
    assert [(r[3], r[4], r[5]) for r in windows_of(running)] == [(0, 0.0, 4864), (0, 0.0, 4864)]


def test_the_page_reads_from_the_sums_what_it_reads_from_every_reading(running, settings, monkeypatch):
    settings.GRIDLANE_SAMPLE_MIN_INTERVAL_S = 10
    three_posts(running)
    window = timedelta(minutes=10)
    start, until = T0 - window, T0 + timedelta(hours=1)
    from_sums = eff._series(running, start, until, window)
    monkeypatch.setattr(gpu_windows, "BUCKET_S", 7 * 60)  # windows not made of whole buckets: every reading
    from_readings = eff._series(running, start, until, window)
    assert from_sums == from_readings
    gpus, windows = from_sums
    assert [(g.gpu, len(g.at)) for g in gpus] == [(0, 2), (1, 2)]
    assert len(windows) == 2

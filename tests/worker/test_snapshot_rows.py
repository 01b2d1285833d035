"""The worker's snapshot reads its fixed queries through sql.Rows (compiled once per process, then sent as they
are). What it reads that way must be exactly what the ORM reads: the same rows, converted the same way (times,
ids, empty values), on the database the suite runs on."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal import sql
from portal.accounts.models import ResourceGroup
from portal.worker import snapshot, tasks
from portal.worker.models import GroupUsage
from portal.workloads.models import Workload


@pytest.fixture
def varied(cast, alice, charlie, submit, agent):
    """Work in every state a snapshot reads, with the values that need converting: times, ids, an array, a
    department, a member cap, fair-share usage and an agent identity."""
    department = ResourceGroup.objects.create(slug="research", name="Research")
    ResourceGroup.objects.filter(slug="vision").update(parent=department, member_gpu_limit_milli=2000)
    for i in range(3):
        submit(alice, name=f"a{i}", command="sleep 300", gpus=1)
    submit(charlie, name="array", command="true", gpus=1, array="0-3%2")
    tasks.cycle()  # some admitted, the rest pending with reasons and estimates
    submit(alice, name="late", command="true", gpus=0.5, priority="low")
    GroupUsage.objects.create(group=department, decayed_gpu_seconds=12.5, updated_at=timezone.now())
    Workload.objects.filter(name="late").update(gpu_idle_warned_at=timezone.now() - timedelta(minutes=3))


def test_the_snapshot_read_through_compiled_queries_is_the_one_the_orm_reads(varied, monkeypatch, local_jobs):
    now = timezone.now()
    compiled = snapshot.build(now)
    again = snapshot.build(now)  # from the compiled statements kept by the first
    monkeypatch.setattr(sql.ROWS, "rows", lambda shape, build: list(build()))
    orm = snapshot.build(now)
    assert len(orm[0].pending) >= 3
    assert orm[0].running
    assert compiled == orm
    assert again == orm


def test_compiled_rows_refuse_a_query_of_model_instances(cast):
    with pytest.raises(TypeError, match="values_list"):
        sql.Rows().rows("teams", lambda: ResourceGroup.objects.all())


def test_rows_read_again_unchanged_keep_their_job_and_a_changed_one_is_read_anew(varied, monkeypatch, local_jobs):
    """snapshot.KEPT: an active row whose version is as the last build read it gives the Job that build made of
    it; a row with any change (even an UPDATE to the values it had) is read whole again; the snapshot is the one
    a build that keeps nothing makes."""
    now = timezone.now()
    first, _ = snapshot.build(now)
    second, _ = snapshot.build(now)
    jobs = {j.id: j for j in first.running}
    assert len(jobs) >= 3
    assert all(jobs[j.id] is j for j in second.running)
    changed, touched = [j for j in second.running if j.per_node.gpus_milli == 1000][:2]
    Workload.objects.filter(pk=changed.id).update(gpus_milli=250, cpus_milli=500)
    Workload.objects.filter(pk=touched.id).update(gpus_milli=1000)  # as it was: a new version all the same
    third, _ = snapshot.build(now)
    again = {j.id: j for j in third.running}
    assert again[changed.id] is not changed
    assert (again[changed.id].per_node.gpus_milli, again[changed.id].per_node.cpus_milli) == (250, 500)
    assert again[touched.id] is not touched
    assert again[touched.id] == touched
    assert all(j is jobs[j.id] for j in third.running if j.id not in (changed.id, touched.id))
    monkeypatch.setattr(snapshot, "KEPT", snapshot.Kept())  # a build that keeps nothing
    monkeypatch.setattr(snapshot, "PENDING", snapshot.Kept())
    assert snapshot.build(now)[0] == third


def test_pending_candidates_read_again_unchanged_keep_their_job_and_changed_or_new_ones_are_read(
    varied, monkeypatch, local_jobs
):
    """snapshot.PENDING: the pending slice is kept like the active rows; a changed row is read anew, a row that
    leaves the slice (admitted) leaves the snapshot, and the snapshot is the one a build that keeps nothing makes."""
    now = timezone.now()
    first, _ = snapshot.build(now)
    second, _ = snapshot.build(now)
    assert len(first.pending) >= 3
    jobs = {j.id: j for j in first.pending}
    assert all(jobs[j.id] is j for j in second.pending)
    changed, admitted = second.pending[0], second.pending[1]
    Workload.objects.filter(pk=changed.id).update(gpus_milli=250)
    Workload.objects.filter(pk=admitted.id).update(
        state="admitted", fabric=Workload.objects.get(pk=admitted.id).queue.targets.first().fabric
    )
    third, _ = snapshot.build(now)
    again = {j.id: j for j in third.pending}
    assert again[changed.id].per_node.gpus_milli == 250
    assert admitted.id not in again
    assert admitted.id in {j.id for j in third.running}
    assert all(j is jobs[j.id] for j in third.pending if j.id != changed.id)
    monkeypatch.setattr(snapshot, "KEPT", snapshot.Kept())
    monkeypatch.setattr(snapshot, "PENDING", snapshot.Kept())
    fresh = snapshot.build(now)[0]
    assert sorted(fresh.pending, key=lambda j: j.id) == sorted(third.pending, key=lambda j: j.id)
    assert fresh.running == third.running


def test_a_row_that_stops_being_active_leaves_the_next_build(varied, local_jobs):
    now = timezone.now()
    first, rows = snapshot.build(now)
    gone = first.running[0]
    Workload.objects.filter(pk=gone.id).update(state="succeeded")
    second, rows = snapshot.build(now)
    assert gone.id not in {j.id for j in (*second.running, *second.pending)}
    assert gone.id not in rows
    assert len(second.running) == len(first.running) - 1


def test_a_row_that_changes_between_the_two_reads_is_left_to_the_next_build(varied, monkeypatch, local_jobs):
    """Between a build's read of versions and its read of whole rows, one row stops being active and another
    changes: the first is left out, the second taken as the later read gives it, and the next build agrees."""
    now = timezone.now()
    snapshot.build(now)
    running = sorted(j.id for j in snapshot.build(now)[0].running)
    stopped, moved = running[0], running[1]
    Workload.objects.filter(pk=moved).update(cpus_milli=700)  # changed since the last build: read whole again
    Workload.objects.filter(pk=stopped).update(cpus_milli=900)
    read_whole = snapshot.read_whole

    def meanwhile(keys, kinds, whole=None):
        if whole not in (None, snapshot._active):  # (the pending candidates': not this test's)
            return read_whole(keys, kinds, whole)
        Workload.objects.filter(pk=stopped).update(state="failed")
        Workload.objects.filter(pk=moved).update(cpus_milli=800)
        return read_whole(keys, kinds)

    monkeypatch.setattr(snapshot, "read_whole", meanwhile)
    built, rows = snapshot.build(now)
    jobs = {j.id: j for j in built.running}
    assert stopped not in jobs
    assert stopped not in rows
    assert jobs[moved].per_node.cpus_milli == 800
    monkeypatch.setattr(snapshot, "read_whole", read_whole)
    assert snapshot.build(now)[0] == built
    monkeypatch.setattr(snapshot, "KEPT", snapshot.Kept())
    monkeypatch.setattr(snapshot, "PENDING", snapshot.Kept())
    assert snapshot.build(now)[0] == built


def test_a_fabric_s_kind_changed_makes_every_job_anew(varied, local_jobs):
    kept = snapshot.Kept()
    first = kept.active({"local": (1,)})
    assert first
    assert all(a[2] is b[2] for a, b in zip(first, kept.active({"local": (1,)}), strict=True))
    other = kept.active({"local": (1,), "slurm": (2,)})
    assert not any(a[2] is b[2] for a, b in zip(first, other, strict=True))
    assert [a[2] for a in first] == [b[2] for b in other]  # equal all the same: no native work here
    assert [key for key, _, _ in other] == [str(job.id) for _, _, job in other]

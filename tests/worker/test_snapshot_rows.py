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
    """snapshot.KEPT: a row read again with every value as before gives the Job the last build made of it; a row
    with any value changed, and every row once a fabric's kind changes, gives a new one; the snapshot is the one a
    build that keeps nothing makes."""
    now = timezone.now()
    first, _ = snapshot.build(now)
    second, _ = snapshot.build(now)
    jobs = {j.id: j for j in (*first.pending, *first.running)}
    assert all(jobs[j.id] is j for j in (*second.pending, *second.running))
    changed = next(j for j in second.running if j.per_node.gpus_milli == 1000)
    Workload.objects.filter(pk=changed.id).update(gpus_milli=250, cpus_milli=500)
    third, _ = snapshot.build(now)
    again = {j.id: j for j in third.running}
    assert again[changed.id] is not changed
    assert (again[changed.id].per_node.gpus_milli, again[changed.id].per_node.cpus_milli) == (250, 500)
    assert all(j is jobs[j.id] for j in third.running if j.id != changed.id)
    monkeypatch.setattr(snapshot, "KEPT", snapshot.Kept())  # a build that keeps nothing
    assert snapshot.build(now)[0] == third


def test_a_fabric_s_kind_changed_makes_every_job_anew(varied):
    values = list(Workload.objects.values_list(*snapshot.FIELDS))
    kept = snapshot.Kept()
    first = kept.read(values, {"local": (1,)})
    assert [job for _, _, job in kept.read(values, {"local": (1,)})] == [job for _, _, job in first]
    assert all(a[2] is b[2] for a, b in zip(first, kept.read(values, {"local": (1,)}), strict=True))
    other = kept.read(values, {"local": (1,), "slurm": (2,)})
    assert not any(a[2] is b[2] for a, b in zip(first, other, strict=True))
    assert [key for key, _, _ in other] == [str(v[0]) for v in values]

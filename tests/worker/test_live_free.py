"""Each fabric's answer to "what is free now" is kept with its age and read into the snapshot while fresh; a
stale answer is not read (planning falls back to the declaration) (portal/worker/live.py)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from fabrics.base import Resources
from fabrics.live import FreeNow, Node, from_nodes
from portal.queues.models import Fabric
from portal.worker import capacity, live, snapshot
from scheduler.model import FabricState, Job, Snapshot


def observation(free_gpus: int) -> FreeNow:
    node = Node("n1", ("gpu",), {"h100": 8}, {"h100": free_gpus}, Resources(free_gpus * 1000, 32000, 64000))
    return from_nodes([node])


def test_a_fresh_answer_is_in_the_snapshot_and_a_stale_one_is_not(cast):
    row = Fabric.objects.get(name="local")
    now = timezone.now()
    live.keep(row.pk, observation(3), now - timedelta(seconds=1))
    snap, _ = snapshot.build(now)
    assert snap.live[row.pk].free_by_type == {"h100": 3}
    live.keep(row.pk, observation(3), now - capacity.period() * (capacity.FRESH_PERIODS + 1))
    snap, _ = snapshot.build(now)
    assert row.pk not in snap.live


def test_an_answer_without_an_observation_drops_the_last_one(cast):
    row = Fabric.objects.get(name="local")
    now = timezone.now()
    live.keep(row.pk, observation(3), now)
    live.keep(row.pk, None, now)
    assert live.fresh(now, now - timedelta(minutes=5)) == {}


def test_work_gridlane_sent_after_the_answer_is_taken_off_what_is_free(cast):
    row = Fabric.objects.get(name="local")
    now = timezone.now()
    observed_at = now - timedelta(seconds=10)
    live.keep(row.pk, observation(8), observed_at)
    before = Job("before", 1, 1, Resources(2000, 1000, 1024), fabric_id=row.pk, started_at=observed_at - timedelta(1))
    queued = Job("queued", 1, 1, Resources(3000, 1000, 1024), fabric_id=row.pk)  # waiting in the fabric's queue
    after = Job("after", 1, 1, Resources(1000, 1000, 1024), fabric_id=row.pk, started_at=now)
    snap = Snapshot(now, {row.pk: FabricState(row.pk, "local", Resources())}, {}, running=(before, queued, after))
    assert live.rooms(snap, now - timedelta(minutes=5))[row.pk].free.gpus_milli == 8000 - 3000 - 1000

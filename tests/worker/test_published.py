"""The worker's snapshot published for the dry runs (portal.worker.published): written by quiet cycles only, at
most every GRIDLANE_DRY_RUN_SNAPSHOT_SECONDS, read back through an allowlist, taken by a web process only under
its generation and while young, else built there as before."""

from __future__ import annotations

import pickle
import time
import zlib
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.utils import timezone

from fabrics.base import Resources
from portal.worker import dryrun, published, snapshot, tasks
from portal.worker.models import PublishedSnapshot
from portal.workloads import context
from scheduler import reasons
from scheduler.model import Job, Snapshot


@pytest.fixture
def publishing(settings: Any) -> Iterator[list[float]]:
    """Publishing on, with the publisher's clock in the test's hands: returns the clock's one reading, to move."""
    settings.GRIDLANE_DRY_RUN_PUBLISH = True
    now = [1000.0]
    published.PUBLISHER.clock = lambda: now[0]
    published.PUBLISHER.last = None
    yield now
    published.PUBLISHER.clock = time.monotonic
    published.PUBLISHER.last = None


def row() -> PublishedSnapshot | None:
    return PublishedSnapshot.objects.first()


def test_a_quiet_cycle_publishes_its_snapshot_and_the_next_only_when_due(cast, publishing, settings):
    tasks.admit()
    first = row()
    assert first is not None
    assert first.generation == context.read_generation()
    got = published.decode(bytes(first.data))
    assert isinstance(got, Snapshot)
    assert got.now == first.built_at
    assert set(got.fabrics) == set(snapshot.build(timezone.now())[0].fabrics)  # the demo's, as the worker read them
    assert got.queues
    tasks.admit()
    assert row().built_at == first.built_at  # not due yet
    publishing[0] += settings.GRIDLANE_DRY_RUN_SNAPSHOT_SECONDS
    tasks.admit()
    assert row().built_at > first.built_at


def test_a_cycle_that_admits_work_does_not_publish_and_the_next_quiet_one_does(cast, publishing, alice, submit):
    work = submit(alice, gpus=1)
    tasks.admit()
    work.refresh_from_db()
    assert work.state == "admitted"
    assert row() is None  # its snapshot had the work waiting: not what the next cycle starts from
    tasks.admit()
    got = published.decode(bytes(row().data))
    assert [j.id for j in got.running] == [str(work.pk)]
    assert got.pending == ()


def test_publishing_off_writes_nothing(cast, settings):
    settings.GRIDLANE_DRY_RUN_PUBLISH = False
    tasks.admit()
    assert row() is None


def test_a_dry_run_takes_the_published_snapshot_in_two_statements(cast, publishing, django_assert_num_queries):
    tasks.admit()
    generation = context.read_generation()
    kept = dryrun.Snapshots()
    with django_assert_num_queries(2):  # the row (its data, as it is newer), the fabrics' kinds and prices
        taken = kept.latest(generation)
    assert taken.snapshot.now == row().built_at
    assert taken.generation == generation


def test_a_dry_run_builds_its_own_under_another_generation_or_past_the_bound(cast, publishing, settings):
    tasks.admit()
    built_at = row().built_at
    generation = context.read_generation()
    assert dryrun.Snapshots().latest((generation or 0) + 1).snapshot.now > built_at  # built here
    PublishedSnapshot.objects.update(built_at=built_at - timedelta(seconds=dryrun._published_for() + 1))
    assert dryrun.Snapshots().latest(generation).snapshot.now > built_at  # a worker that stopped: built here


def test_an_aged_kept_snapshot_with_nothing_newer_published_is_kept_again_without_reading_it(
    cast, publishing, django_assert_num_queries
):
    tasks.admit()
    generation = context.read_generation()
    now = [100.0]
    rebuilds: list[Any] = []
    kept = dryrun.Snapshots(clock=lambda: now[0], spawn=rebuilds.append)
    first = kept.latest(generation)
    now[0] += dryrun.STALEST_S / 2
    assert kept.latest(generation) is first  # aged: served while one is taken beside
    with django_assert_num_queries(1):  # only the row's time: its data is not read again
        rebuilds.pop()()
    again = kept.latest(generation)
    assert again.snapshot is first.snapshot
    assert again.built == now[0]  # its keeping time restarted


def test_a_row_that_is_not_the_workers_is_refused_and_the_dry_run_builds_its_own(cast, publishing, caplog):
    tasks.admit()
    built_at = row().built_at
    PublishedSnapshot.objects.update(data=b"not a snapshot")
    taken = dryrun.Snapshots().latest(context.read_generation())
    assert taken.snapshot.now > built_at
    assert "not a published snapshot" in caplog.text


class _Runs:
    """A pickle that calls a function when loaded: what an allowlist must never let through."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> Any:
        return (open, (str(self.path), "w"))


def test_decoding_allows_only_the_snapshots_classes(tmp_path):
    target = tmp_path / "ran"
    with pytest.raises(published.Unpublishable, match="open is not"):
        published.decode(zlib.compress(pickle.dumps(_Runs(target))))
    assert not target.exists()
    with pytest.raises(published.Unpublishable, match="not a published snapshot"):
        published.decode(zlib.compress(pickle.dumps(Job("j", 1, 1, Resources(1000)))))
    with pytest.raises(published.Unpublishable, match="not a published snapshot"):
        published.decode(zlib.compress(b"\x80\x05truncated"))


def test_a_snapshot_with_held_work_and_live_room_reads_back_equal(cast, alice, submit):
    from dataclasses import replace

    from fabrics.live import FreeNow, Pool

    snap, _ = snapshot.build(timezone.now())
    held = {(1, 0): reasons.budget_spent("the team's budget is spent")}
    live = {1: FreeNow(pools=(Pool("p", "h100", 8, 2, 1),), free=Resources(2000), largest=Resources(2000))}
    snap = replace(snap, held=held, live=live)
    got = published.decode(published.encode(snap))
    assert got == snap
    assert got.held[1, 0].message == "the team's budget is spent"


def test_a_publication_the_database_refuses_leaves_the_cycle_done(cast, publishing, monkeypatch, caplog):
    from django.db import OperationalError

    def refused(*args: Any, **kwargs: Any) -> None:
        raise OperationalError("the database went away")

    monkeypatch.setattr(PublishedSnapshot.objects, "bulk_create", refused)
    assert tasks.admit()["admitted"] == 0  # a quiet cycle: it would publish
    assert "the database went away" in caplog.text
    assert published.PUBLISHER.last is not None  # due again a period later, not at once

"""One road to other people's objects: who sees which workloads and queues."""

from __future__ import annotations

import pytest
from django.http import Http404

from portal import access


def test_members_see_their_teams_work_and_not_other_teams(alice, bob, charlie, it_admin, submit):
    alices, bobs, charlies = submit(alice), submit(bob), submit(charlie)
    assert set(access.visible_workloads(alice)) == {alices, bobs}
    assert set(access.visible_workloads(bob)) == {alices, bobs}
    assert set(access.visible_workloads(charlie)) == {charlies}
    assert set(access.visible_workloads(it_admin)) == {alices, bobs, charlies}


def test_another_teams_workload_is_absent_not_forbidden(alice, charlie, submit):
    workload = submit(alice)
    assert access.access_workload(alice, workload.pk) == workload
    with pytest.raises(Http404):
        access.access_workload(charlie, workload.pk)
    with pytest.raises(Http404):
        access.access_workload(alice, "not-a-uuid")


def test_usable_queues_follow_the_teams_allowed_on_them(alice, it_admin):
    from portal.queues.models import Queue

    assert {q.slug for q in access.usable_queues(alice)} == {"train", "notebooks", "scripts"}
    Queue.objects.get(slug="notebooks").allowed_groups.clear()
    assert {q.slug for q in access.usable_queues(alice)} == {"train", "scripts"}
    assert {q.slug for q in access.usable_queues(it_admin)} == {"train", "notebooks", "scripts"}

"""sql.unsaved, how the submit makes its workload and first event: the same object as the model's own
constructor makes, for the models it is used for."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.db.models import signals

from portal import sql
from portal.workloads.models import Workload, WorkloadEvent
from portal.workloads.states import State

pytestmark = pytest.mark.django_db


@pytest.fixture
def train(cast):
    from portal.queues.models import Queue

    return Queue.objects.get(slug="train")


def state_of(obj: Any) -> dict[str, Any]:
    """What an unsaved object holds: its fields' values, whether it is new, its database, its related objects."""
    values = {k: v for k, v in vars(obj).items() if k != "_state"}
    return values | {"_adding": obj._state.adding, "_db": obj._state.db, "_cache": dict(obj._state.fields_cache)}


def called_as(made: Any, built: Any) -> Any:
    """made, with what its callable defaults gave (a new key, the time now) replaced by what built's gave: each
    of the same type, and called for each object (two workloads made one after the other differ in those)."""
    for field in type(made)._meta.concrete_fields:
        if field.has_default() and callable(field.default):
            mine, theirs = getattr(made, field.attname), getattr(built, field.attname)
            assert type(mine) is type(theirs)
            setattr(made, field.attname, theirs)
    return made


@pytest.mark.parametrize("model", [Workload, WorkloadEvent])
def test_nothing_listens_to_the_construction_of_the_models_it_makes(model):
    assert not signals.pre_init.has_listeners(model)
    assert not signals.post_init.has_listeners(model)


def test_a_workload_is_made_as_its_constructor_makes_it(alice, train, vision):
    values = dict(
        owner=alice, group=vision, queue=train, kind="batch", name="x", command="true", code={"digest": "a"},
        gpus_milli=500, cpus_milli=1000, memory_mib=1024, nodes=2, runtime_limit_s=600, lease_s=None,
        array_throttle=None, fabric=None,
    )  # fmt: skip
    made, built = sql.unsaved(Workload, **values), Workload(**values)
    assert made.pk != built.pk  # each its own new key (a callable default is called for each)
    assert state_of(called_as(made, built)) == state_of(built)
    assert made.owner is alice
    assert made.group_id == vision.pk
    assert made.fabric is None
    assert made.events.model is WorkloadEvent  # a working instance: its managers and methods are the model's


def test_an_event_and_an_array_element_by_their_keys_and_by_objects(alice, train, vision):
    parent = sql.unsaved(Workload, owner=alice, group=vision, queue=train, name="arr", array="0-3")
    at = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    for values in (
        dict(workload=parent, at=at, actor=alice, to_state=State.PENDING, reason="submitted"),
        dict(workload_id=parent.pk, at=at, actor=None, from_state=State.PENDING, to_state=State.ADMITTED),
    ):
        built = WorkloadEvent(**values)
        assert state_of(called_as(sql.unsaved(WorkloadEvent, **values), built)) == state_of(built)
    element = dict(owner=alice, group=vision, queue=train, name="arr[1]", array_parent=parent, array_index=1)
    workload = Workload(**element)
    assert state_of(called_as(sql.unsaved(Workload, **element), workload)) == state_of(workload)


def test_a_name_the_model_has_not_is_refused(alice):
    with pytest.raises(TypeError, match="no field 'colour'"):
        sql.unsaved(Workload, owner=alice, colour="red")

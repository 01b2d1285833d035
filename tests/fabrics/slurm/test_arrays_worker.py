"""Arrays through the portal's worker to a Slurm fabric: a 1,000-element array that fits is admitted in fewer than
five scheduling rounds and dispatched as one sbatch; cancel works on one element and on the parent. Slurm's
commands are the stand-ins of tests/fabrics/slurm/fake.py (the real cluster: test_arrays_live.py)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from portal.accounts.models import ResourceGroup
from portal.queues.models import Fabric
from portal.worker import connections, tasks
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from scheduler import decide
from tests.fabrics.slurm.conftest import fabric_behind_queue
from tests.fabrics.slurm.fake import FakeCluster
from tests.fabrics.slurm.test_settings import GOOD


@pytest.fixture
def hpc(cast: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCluster]:
    """Queue `hpc` on a Slurm fabric big enough for a thousand one-CPU elements, its commands the stand-ins."""
    connections.forget_all()
    row = fabric_behind_queue(
        GOOD, groups=ResourceGroup.objects.filter(slug__in=["vision", "fraud"]),
        slug="hpc", name="HPC", kinds=["training", "batch"], default_runtime_minutes=10, max_runtime_minutes=60,
    )  # fmt: skip
    Fabric.objects.filter(pk=row.pk).update(cpus_milli=2_000_000, memory_mib=4_000_000)
    cluster = FakeCluster(tmp_path / "login")
    for module in ("portal.worker.dispatch", "portal.worker.sync"):
        monkeypatch.setattr(f"{module}.fabric_for", lambda _row: cluster.fabric)
    yield cluster
    connections.forget_all()


def submit_array(submit: Any, user: Any, array: str) -> Workload:
    return submit(user, queue="hpc", kind="batch", array=array, command="echo $GRIDLANE_ARRAY_INDEX", memory_gb=1)


def test_a_thousand_element_array_is_admitted_in_fewer_than_five_rounds_and_reaches_slurm_as_one_sbatch(
    alice, submit, hpc, monkeypatch
):
    rounds = []

    def counted(snapshot: Any) -> Any:
        rounds.append(len(snapshot.pending))
        return decide(snapshot)

    monkeypatch.setattr(tasks, "decide", counted)
    parent = submit_array(submit, alice, "0-999")
    tasks.admit()
    assert 1 <= len(rounds) < 5, rounds  # rounds of GRIDLANE_CANDIDATES_PER_QUEUE candidates, in one admit step
    elements = Workload.objects.filter(array_parent=parent)
    assert elements.filter(state=State.ADMITTED).count() == 1000
    tasks.dispatch()
    assert len(hpc.calls("sbatch")) == 1
    assert "--array=0-999" in hpc.calls("sbatch")[0]
    assert len(hpc.ssh.scripts) == 1  # one round trip for the whole array
    ids = dict(elements.values_list("array_index", "external_id"))
    assert ids == {i: f"100_{i}" for i in range(1000)}


def test_cancel_one_element_scancels_only_it_and_the_parent_cancels_the_rest(alice, submit, hpc):
    parent = submit_array(submit, alice, "0-5")
    tasks.admit()
    tasks.dispatch()
    elements = Workload.objects.filter(array_parent=parent)
    assert set(elements.values_list("external_id", flat=True)) == {f"100_{i}" for i in range(6)}
    one = elements.get(array_index=2)
    services.do_cancel(alice, one)
    tasks.sync_fabrics()
    assert hpc.calls("scancel") == [["100_2"]]
    tasks.sync_fabrics()  # the next poll sees it cancelled
    one.refresh_from_db()
    assert one.state == State.CANCELLED
    assert elements.exclude(pk=one.pk).filter(state=State.DISPATCHING).count() == 5

    services.do_cancel(alice, parent)
    tasks.sync_fabrics()
    assert sorted(call[0] for call in hpc.calls("scancel")) == [f"100_{i}" for i in range(6)]
    tasks.sync_fabrics()
    assert set(elements.values_list("state", flat=True)) == {State.CANCELLED}
    parent.refresh_from_db()
    assert parent.state == State.CANCELLED

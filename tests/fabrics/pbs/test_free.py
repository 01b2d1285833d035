"""What a PBS cluster has free now, from `pbsnodes -a` (fabrics/pbs/free.py). Pure, on recorded shapes."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fabrics.base import FabricConfig, Resources
from fabrics.pbs import free
from fabrics.pbs.fabric import PbsFabric

# The shape Slurm's Torque wrapper prints on the test cluster (two nodes, one busy).
TORQUE = """gl-node2
    state = job-exclusive
    np = 16
    ntype = cluster
    status = state=job-exclusive,slurmstate=allocated,size=0kb:0kb,gres=gpu:a100:2,ncpus=16,availmem=32000mb
    gpus = 2

vm
    state = free
    np = 32
    ntype = cluster
    status = state=free,slurmstate=idle,size=0kb:0kb,gres=gpu:a100:4,gpu:h100:4,ncpus=32,availmem=64000mb
    gpus = 8

"""

# PBS Pro / OpenPBS's shape: assigned resources per node; offline and reserved nodes are left out.
PRO = """gpu01
     Mom = gpu01
     state = job-busy
     resources_available.ncpus = 64
     resources_available.ngpus = 8
     resources_available.gpu_model = h100
     resources_available.mem = 515000mb
     resources_assigned.ncpus = 40
     resources_assigned.ngpus = 6
     resources_assigned.mem = 200gb
     queue = gpuq

gpu02
     state = offline
     resources_available.ncpus = 64
     resources_available.ngpus = 8
     resources_available.gpu_model = h100

gpu03
     state = resv-exclusive
     resources_available.ngpus = 8

gpu04
     state = free
     resources_available.ncpus = 32
     resources_available.ngpus = 4
     resources_available.gpu_model = l4
     resources_available.mem = 256gb
     queue = gpuq
"""


def test_torque_shape_counts_a_free_nodes_gpus_by_type_and_none_of_a_busy_one():
    observed = free.read(TORQUE)
    assert observed.free_by_type == {"a100": 4, "h100": 4}
    assert {(p.gpu_type, p.gpus_total, p.gpus_free) for p in observed.pools} == {("a100", 6, 4), ("h100", 4, 4)}
    assert observed.free == Resources(8000, 32000, 64000)


def test_pbs_pro_shape_takes_assigned_from_available_and_skips_offline_and_reserved_nodes():
    observed = free.read(PRO)
    assert observed.free_by_type == {"h100": 2, "l4": 4}
    assert [(p.name, p.gpu_type, p.nodes) for p in observed.pools] == [("gpuq", "h100", 1), ("gpuq", "l4", 1)]
    assert observed.free == Resources(6000, 24000 + 32000, 515000 - 204800 + 262144)
    assert observed.room_for(Resources(2000, 8000, 1024), gpu_type="h100")
    assert not observed.room_for(Resources(3000, 8000, 1024), gpu_type="h100")


def test_the_command_answers_for_the_server_then_reads_its_nodes():
    argv = free.command("qstat", "/opt/pbs bin/pbsnodes")
    assert argv[:2] == ["sh", "-c"]
    assert "'/opt/pbs bin/pbsnodes' -a" in argv[2]
    assert free.split("Queue...\n" + free.SEPARATOR + TORQUE)[1] == TORQUE


@pytest.fixture
def pbs(cluster_lock: None, slurm_settings: dict[str, object]) -> Iterator[PbsFabric]:
    settings = {k: v for k, v in slurm_settings.items() if k not in ("partition", "gpu_partition")}
    fabric = PbsFabric(FabricConfig("pbs", "pbs", Resources(8000, 32000, 64000), settings | {"flavor": "torque"}))
    yield fabric
    fabric.close()


def test_the_real_cluster_answers_with_its_nodes_gpus_by_type(pbs):
    capacity = pbs.capacity()
    assert capacity.healthy
    assert capacity.free is not None
    assert capacity.free.types() == {"a100", "h100"}  # tests/services/slurm: 6 a100 and 4 h100 over two nodes
    assert {p.gpu_type: p.gpus_total for p in capacity.free.pools} == {"a100": 6, "h100": 4}

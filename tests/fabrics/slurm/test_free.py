"""What a Slurm cluster has free now, read from sinfo and squeue --start (fabrics/slurm/free.py). Pure."""

from __future__ import annotations

from datetime import UTC, datetime

from fabrics.base import Resources
from fabrics.live import FreeNow
from fabrics.slurm import free
from tests.fabrics.slurm.conftest import FIXTURES
from tests.fabrics.slurm.sinfo_shape import expected_free, output

F, R = "\x1f", "\x1e"


def test_busy_node_has_no_gpu_free_and_its_idle_cpus():
    observed = free.read((FIXTURES / "sinfo_busy.txt").read_text(), {"gpu"})
    assert observed.free_by_type == {"a100": 0, "h100": 0}
    assert observed.free == Resources(0, 29000, 64000 - 768)
    assert [(p.name, p.gpu_type, p.gpus_total, p.gpus_free) for p in observed.pools] == [
        ("gpu", "a100", 4, 0),
        ("gpu", "h100", 4, 0),
    ]
    assert not observed.room_for(Resources(1000, 1000, 256))
    assert observed.room_for(Resources(0, 1000, 256))


def test_drained_reserved_down_and_unresponsive_nodes_are_left_out():
    states = ["idle", "drained", "reserved", "down*", "idle~", "mixed-", "maint", "allocated", "completing"]
    rows = [
        F.join([f"n{i}", "gpu", s, "8", "0/8/0/8", "1000", "0", "gpu:l4:2", "gpu:l4:0(IDX:N/A)"]) + R
        for i, s in enumerate(states)
    ]
    observed = free.read("\n".join(rows))
    names = {p.name: p.nodes for p in observed.pools}
    assert names == {"gpu": 4}  # idle, mixed-, allocated, completing
    assert observed.gpus_free("l4") == 8


def test_a_node_in_two_partitions_counts_once_and_only_named_partitions_count():
    text = output(1000)
    everywhere = free.read(text)
    gpu_only = free.read(text, {"gpu"})
    assert gpu_only.free_by_type == expected_free(1000)
    assert everywhere.free_by_type == gpu_only.free_by_type  # debug's nodes are gpu's too
    debug = free.read(text, {"debug"})
    assert sum(p.nodes for p in debug.pools) < sum(p.nodes for p in gpu_only.pools)


def test_one_thousand_nodes_give_pools_per_partition_and_type():
    observed = free.read(output(1000), {"gpu"})
    pools = {(p.name, p.gpu_type): p for p in observed.pools}
    assert set(pools) == {("gpu", "a100"), ("gpu", "h100")}
    assert sum(p.nodes for p in pools.values()) == 600  # 6 of each 10 states are usable
    assert all(0 <= p.gpus_free <= p.gpus_total for p in pools.values())
    assert observed.largest_by_type == {"a100": 8, "h100": 7}  # no h100 node is idle (generator's rule)
    assert observed.room_for(Resources(8000, 64000, 512000), gpu_type="a100")
    assert not observed.room_for(Resources(8000, 1000, 256), gpu_type="h100")
    assert not observed.room_for(Resources(9000, 1000, 1))  # no node has nine GPUs


def test_fabric_estimate_is_the_latest_start_slurm_plans_for_pending_work_in_its_partitions():
    squeue = "".join(
        F.join(row) + R
        for row in [
            ("gpu", "2026-12-06T03:10:00"),
            ("gpu,multi", "2026-12-06T04:00:00"),
            ("cpu", "2026-12-07T00:00:00"),
            ("gpu", "N/A"),
        ]
    )
    stdout = output(10) + free.SEPARATOR + squeue
    assert free.read(stdout, {"gpu"}).next_start == datetime(2026, 12, 6, 4, 0, tzinfo=UTC)
    assert free.read(output(10) + free.SEPARATOR).next_start is None


def test_a_request_that_names_a_type_fits_only_that_type():
    observed = free.read(output(4), {"gpu"})  # node0 a100 idle, node1 h100 mixed(1 used), node2 a100 allocated
    assert observed.room_for(Resources(7000, 1000, 256), gpu_type="h100")
    assert not observed.room_for(Resources(1000, 1000, 256), gpu_type="l4")
    assert observed.room_for(Resources(8000, 1000, 256), gpu_type="a100")
    assert not observed.room_for(Resources(8000, 1000, 256), gpu_type="h100")


def test_an_observation_survives_its_json_round_trip():
    observed = free.read(output(50) + free.SEPARATOR + F.join(["gpu", "2026-12-06T03:10:00"]) + R, {"gpu"})
    assert FreeNow.from_json(observed.to_json()) == observed


def test_the_command_runs_both_reads_in_one_shell_with_every_word_quoted():
    argv = free.command(("env", "TZ=UTC"), "/opt/slurm bin/sinfo", "squeue")
    assert argv[:2] == ["sh", "-c"]
    assert "'/opt/slurm bin/sinfo'" in argv[2]
    assert "--start" in argv[2]

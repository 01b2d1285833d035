"""What observing a fabric's free capacity costs (fabrics/slurm/free.py), per observe and as a share of one core
at the capacity step's period:

1. Parsing a 1,000-node `sinfo` (the recorded shape of tests/fabrics/slurm/sinfo_shape.py), as the capacity step
   does each period: the inventory (parse.sinfo) and the free-now observation (free.read).
2. One real observe on the test Slurm cluster over SSH (sinfo + squeue --start in one command), where it is up.

The budget: at most 1 % of a core per fabric at a 30 s period.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

from fabrics.base import FabricConfig, Resources
from fabrics.slurm import free, parse
from tests.fabrics.slurm.sinfo_shape import output

NODES = 1000
PERIOD_S = 30.0
ROUNDS = 20


def cpu_ms(call: Any) -> float:
    """The process CPU time of one call, in ms (the cost on a shared machine, not the wall time)."""
    started = time.process_time()
    call()
    return (time.process_time() - started) * 1000


def run() -> dict[str, Any]:
    text = output(NODES)
    costs = [cpu_ms(lambda: (parse.sinfo(text), free.read(text, {"gpu"}))) for _ in range(ROUNDS)]
    parse_ms = statistics.median(costs)
    results: dict[str, Any] = {
        "nodes": NODES,
        "parse_ms": round(parse_ms, 2),
        "parse_core_percent_at_30s": round(100 * parse_ms / 1000 / PERIOD_S, 4),
    }
    print(
        f"live capacity, {NODES}-node sinfo: {parse_ms:.1f} ms CPU per observe (median of {ROUNDS}), "
        f"{results['parse_core_percent_at_30s']:.3f} % of a core at a {PERIOD_S:.0f} s period (budget 1 %)"
    )
    try:
        from bench.bench_slurm import cluster_settings

        settings = cluster_settings() | {"gpu_partition": "gpu"}
    except SystemExit as exc:
        print(f"live capacity, real cluster: not measured ({exc})")
        return results
    from fabrics.slurm.fabric import SlurmFabric

    fabric = SlurmFabric(FabricConfig("bench", "slurm", Resources(), settings))
    try:
        fabric.capacity()  # the connection, once
        walls, cpus = [], []
        for _ in range(5):
            wall, cpu = time.perf_counter(), time.process_time()
            answer = fabric.capacity()
            walls.append((time.perf_counter() - wall) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
        if answer.free is None:
            raise SystemExit("bench live: the cluster answered without what it has free")
    finally:
        fabric.close()
    results |= {
        "observe_wall_ms": round(statistics.median(walls), 1),
        "observe_cpu_ms": round(statistics.median(cpus), 2),
    }
    print(
        f"live capacity, real cluster over SSH: {results['observe_wall_ms']:.0f} ms wall, "
        f"{results['observe_cpu_ms']:.1f} ms CPU in Gridlane per observe (median of 5)"
    )
    return results

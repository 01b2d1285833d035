"""A recorded-shape `sinfo -h -N -O <parse.sinfo_format()>` output of any size, for parser tests and the bench.

Each row has the shape the real test cluster prints (fixtures/sinfo_busy.txt): host, partition, long state,
CPUs, CPUsState, memory, allocated memory, GRES and GRES_USED. Deterministic: node i's state and use follow i.
"""

from __future__ import annotations

STATES = ("idle", "mixed", "allocated", "drained", "mixed", "reserved", "idle", "down*", "mixed", "draining")


def node_row(i: int, partition: str = "gpu*") -> str:
    state = STATES[i % len(STATES)]
    gpu_type = "h100" if i % 2 else "a100"
    used = {"idle": 0, "allocated": 8}.get(state, i % 8)
    cpus_alloc = 0 if state == "idle" else (64 if state == "allocated" else 16)
    fields = [
        f"node{i:04d}",
        partition,
        state,
        "64",
        f"{cpus_alloc}/{64 - cpus_alloc}/0/64",
        "512000",
        str(cpus_alloc * 4096),
        f"gpu:{gpu_type}:8(S:0-1)",
        f"gpu:{gpu_type}:{used}(IDX:0-{max(used - 1, 0)})",
    ]
    return "\x1f".join(fields) + "\x1e"


def output(nodes: int) -> str:
    """sinfo output for `nodes` nodes, each in the partition gpu (the default) and every tenth in debug too."""
    rows = [node_row(i) for i in range(nodes)]
    rows += [node_row(i, "debug") for i in range(0, nodes, 10)]
    return "\n".join(rows) + "\n"


def expected_free(nodes: int) -> dict[str, int]:
    """Free GPUs by type on usable nodes of the partition gpu, computed from the generator's own rules."""
    free: dict[str, int] = {}
    for i in range(nodes):
        state = STATES[i % len(STATES)]
        if state not in ("idle", "mixed", "allocated"):
            continue
        used = {"idle": 0, "allocated": 8}.get(state, i % 8)
        gpu_type = "h100" if i % 2 else "a100"
        free[gpu_type] = free.get(gpu_type, 0) + 8 - used
    return free

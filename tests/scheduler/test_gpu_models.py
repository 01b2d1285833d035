"""The simulator replays a list's GPU-type constraints (`gpu_spec`): a typed task runs only on its models' GPUs,
under Gridlane's policy and the peers' alike, on a pool split by model from the node list."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from scheduler.simulate import (
    gpu_models,
    models_for,
    node_models,
    nodes_beside,
    pool_models,
    read_trace,
    report,
    simulate,
)
from tests.scheduler.test_simulate import COLUMNS

HOUR = 3600


def write_rows(path: Path, rows: list[tuple[str, int, int, str, int, int]]) -> Path:
    """(name, num_gpu, gpu_milli, gpu_spec, arrival, runtime) rows in the openb pod-list format."""
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(COLUMNS)
        for name, n, milli, spec, t, runtime in rows:
            out.writerow([name, 4000, 8192, n, milli, spec, "LS", "Running", t, t + runtime, t])
    return path


def write_nodes(path: Path, nodes: list[tuple[int, str]]) -> Path:
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["sn", "cpu_milli", "memory_mib", "gpu", "model"])
        for i, (gpus, model) in enumerate(nodes):
            out.writerow([f"node-{i}", 64000, 262144, gpus, model])
    return path


@pytest.mark.parametrize(
    ("spec", "want"),
    [
        ("", ()),
        ("T4", ("T4",)),
        ("V100M16|V100M32", ("V100M16", "V100M32")),
        ("V100M32|V100M16|V100M32", ("V100M16", "V100M32")),
    ],
)
def test_a_gpu_spec_names_the_models_it_accepts_any_of_them(spec, want) -> None:
    assert gpu_models(spec) == want


def test_the_node_list_gives_gpus_per_model_and_the_pool_keeps_their_proportions(tmp_path) -> None:
    nodes = write_nodes(tmp_path / "openb_node_list_gpu_node.csv", [(8, "G2")] * 7 + [(2, "T4")] * 5 + [(0, "CPU")])
    assert node_models(str(nodes)) == {"G2": 56, "T4": 10}
    assert pool_models({"G2": 700, "T4": 200, "P100": 100}, 10) == {"G2": 7, "T4": 2, "P100": 1}
    # every model keeps a GPU; the largest gives it up
    assert pool_models({"G2": 980, "T4": 15, "A10": 5}, 10) == {"G2": 8, "T4": 1, "A10": 1}
    for gpus in (7, 40, 48):
        assert sum(pool_models({"G2": 4392, "T4": 842, "G3": 312, "P100": 265, "A10": 2}, gpus).values()) == gpus
    with pytest.raises(ValueError, match="cannot split"):
        pool_models({"G2": 1, "T4": 1, "A10": 1}, 2)


def test_typed_tasks_are_read_with_their_models_and_need_a_pool_split_by_model(tmp_path) -> None:
    trace = write_rows(tmp_path / "t.csv", [("a", 1, 1000, "T4|P100", 0, 60), ("b", 1, 500, "", 5, 60)])
    tasks = read_trace(str(trace), groups=2)
    assert [t.models for t in tasks] == [("P100", "T4"), ()]
    write_nodes(tmp_path / "openb_node_list_gpu_node.csv", [(2, "T4"), (2, "P100")])
    assert models_for(tasks, nodes_beside(str(trace)), 4) == {"T4": 2, "P100": 2}
    assert models_for([t for t in tasks if not t.models], nodes_beside(str(trace)), 4) is None
    with pytest.raises(ValueError, match="gpu_spec"):
        simulate(tasks, policy="gridlane", groups=2, gpus=4)  # never silently dropped


@pytest.mark.parametrize("policy", ["gridlane", "kueue", "slurm"])
def test_a_typed_task_waits_for_its_model_while_an_untyped_one_runs_on_another(tmp_path, policy) -> None:
    """One A GPU and two B GPUs: `long` holds the A GPU for an hour; `typed` (A only) waits for it although B
    GPUs are free, and `any` (no spec), arriving with it, starts at once on B. Without the spec, `typed` would
    start at once too."""
    rows = [("long", 1, 1000, "A", 0, HOUR), ("typed", 1, 1000, "A", 60, 600), ("any", 1, 1000, "", 60, 600)]
    models = {"A": 1, "B": 2}
    tasks = read_trace(str(write_rows(tmp_path / "t.csv", rows)), groups=2)
    out = simulate(tasks, policy=policy, groups=2, gpus=3, models=models)  # over capacity or off-model: raises
    waits = {name: w for ws in out.waits.values() for name, w in ws.items()}
    assert waits["long"] == 0
    assert HOUR - 60 <= waits["typed"] <= HOUR
    assert waits["any"] <= 10  # the next cycle at most
    assert report(out, 3)["overall"]["never_started"] == 0
    untyped = read_trace(str(write_rows(tmp_path / "u.csv", [(n, g, m, "", t, r) for n, g, m, _, t, r in rows])), 2)
    plain = simulate(untyped, policy=policy, groups=2, gpus=3)
    assert max(w for ws in plain.waits.values() for w in ws.values()) <= 10


@pytest.mark.parametrize("policy", ["gridlane", "kueue", "slurm"])
def test_a_task_larger_than_its_models_never_starts_and_blocks_nothing(tmp_path, policy) -> None:
    rows = [("huge", 4, 1000, "A", 0, 600), ("small", 1, 1000, "A", 30, 600), ("other", 1, 500, "B", 30, 600)]
    tasks = read_trace(str(write_rows(tmp_path / "t.csv", rows)), groups=2)
    out = simulate(tasks, policy=policy, groups=2, gpus=3, models={"A": 2, "B": 1})
    waits = {name: w for ws in out.waits.values() for name, w in ws.items()}
    assert set(waits) == {"small", "other"}
    assert out.never_started == 1

"""The peers benchmark runs every openb pod list it finds in its traces folder, and judges each row the same way."""

from __future__ import annotations

from pathlib import Path

from bench import bench_peers
from bench.bench_peers import judge, trace_lists
from tests.scheduler.test_gpu_models import write_nodes, write_rows
from tests.scheduler.test_simulate import write_trace


def folder_of_lists(tmp_path: Path) -> Path:
    write_trace(tmp_path / "openb_pod_list_default.csv", n=40)
    write_trace(tmp_path / "openb_pod_list_more.csv", n=30, seed=3)
    rows = [(f"t{i}", 1, 1000, "A" if i % 3 == 0 else "", i * 30, 900) for i in range(20)]
    write_rows(tmp_path / "openb_pod_list_typed.csv", rows)
    write_nodes(tmp_path / "openb_node_list_gpu_node.csv", [(4, "A"), (4, "B")])
    (tmp_path / "openb_pod_list_packing.csv").write_text(
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1024,1,1000\n"
    )
    (tmp_path / "README.md").write_text("not a list")
    (tmp_path / "openb_pod_list_folder.csv").mkdir()
    return tmp_path


def test_every_pod_list_in_the_folder_is_found_and_nothing_else(tmp_path) -> None:
    folder = folder_of_lists(tmp_path)
    assert [p.name for p in trace_lists(folder)] == [
        "openb_pod_list_default.csv",
        "openb_pod_list_more.csv",
        "openb_pod_list_packing.csv",
        "openb_pod_list_typed.csv",
    ]
    assert [p.name for p in trace_lists(folder, "typed, more")] == [
        "openb_pod_list_more.csv",
        "openb_pod_list_typed.csv",
    ]
    assert trace_lists(tmp_path / "missing") == []


def test_the_bench_reports_a_row_per_list_and_pool_and_a_verdict(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("GRIDLANE_TRACES", str(folder_of_lists(tmp_path)))
    monkeypatch.setenv("GRIDLANE_BENCH_PEERS_GPUS", "8,6")
    monkeypatch.setenv("GRIDLANE_BENCH_PEERS_TIGHT", "")
    monkeypatch.delenv("GRIDLANE_BENCH_PEERS_LISTS", raising=False)
    monkeypatch.delenv("GRIDLANE_BENCH_TASKS", raising=False)
    result = bench_peers.run()
    assert set(result["rows"]) == {f"{name}@{g}" for name in ("default", "more", "typed") for g in (8, 6)}
    assert result["not_replayed"] == ["packing"]  # no times: named, not judged (never a row met by default)
    assert result["rows"]["typed@8"]["gpu_models"] == {"A": 4, "B": 4}  # the typed list on a pool by model
    assert result["rows"]["default@8"]["gpu_models"] is None
    assert result["goal_met"] == all(r["goal_met"] for r in result["rows"].values())
    printed = capsys.readouterr().out
    assert printed.count("typed ") == 2
    assert "verdict:" in printed
    assert "packing     not replayed" in printed


def test_a_list_no_default_pool_contends_runs_again_at_tighter_sizes_until_one_does(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("GRIDLANE_TRACES", str(folder_of_lists(tmp_path)))
    monkeypatch.setenv("GRIDLANE_BENCH_PEERS_GPUS", "64")
    monkeypatch.setenv("GRIDLANE_BENCH_PEERS_TIGHT", "3,2,1")
    monkeypatch.setenv("GRIDLANE_BENCH_PEERS_LISTS", "default,more")
    monkeypatch.delenv("GRIDLANE_BENCH_TASKS", raising=False)
    rows = bench_peers.run()["rows"]
    for name in ("default", "more"):
        sizes = [g for g in (64, 3, 2, 1) if f"{name}@{g}" in rows]
        contended = [rows[f"{name}@{g}"]["goal"] == bench_peers.GOAL for g in sizes]
        assert sizes == [64, 3, 2, 1][: len(sizes)]  # the default size, then tighter ones in order
        assert not any(contended[:-1])  # a tighter size runs only while no size before it contended the list
        assert contended[-1] or sizes[-1] == 1  # it stops at the first that contends it, or runs out of sizes
    assert any(len([k for k in rows if k.startswith(f"{n}@")]) > 1 for n in ("default", "more"))


def row(wait: float, violations: int = 0, utilisation: float = 0.5) -> dict[str, float]:
    return {"mean_wait_s": wait, "violations": violations, "utilisation": utilisation}


def test_a_row_is_judged_against_the_better_peer_with_the_goal_that_applies() -> None:
    long = judge({"gridlane": row(800), "kueue": row(1000), "slurm": row(2000)})
    assert (long["better_peer"], long["goal"], long["goal_met"]) == ("kueue", 0.8, True)
    assert not judge({"gridlane": row(850), "kueue": row(1000), "slurm": row(2000)})["goal_met"]
    short = judge({"gridlane": row(300), "kueue": row(400), "slurm": row(300)})
    assert (short["better_peer"], short["goal"], short["goal_met"]) == ("slurm", 1.0, True)
    assert not judge({"gridlane": row(301), "kueue": row(400), "slurm": row(300)})["goal_met"]
    assert not judge({"gridlane": row(10, violations=1), "kueue": row(400), "slurm": row(300)})["goal_met"]
    assert judge({"gridlane": row(10, utilisation=0.485), "kueue": row(400), "slurm": row(300)})["goal_met"]
    assert not judge({"gridlane": row(10, utilisation=0.47), "kueue": row(400), "slurm": row(300)})["goal_met"]
    assert judge({"gridlane": row(0), "kueue": row(0), "slurm": row(0)})["goal_met"]

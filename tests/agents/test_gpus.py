"""The nvidia-smi parser on output in nvidia-smi's documented CSV format.

The fixture was written by hand in the format `nvidia-smi --query-gpu=index,name,memory.total,memory.used,
utilization.gpu --format=csv,noheader,nounits` prints (no GPU machine was at hand to capture one);
"[N/A]" is what the driver prints for a field it cannot read.
"""

from __future__ import annotations

import argparse
import stat
from pathlib import Path

from fabrics.agent import gpus
from fabrics.agent.agent import host_facts

FIXTURES = Path(__file__).parent / "fixtures"


def fake_nvidia_smi(tmp_path: Path, output: str) -> Path:
    program = tmp_path / "nvidia-smi"
    program.write_text(f"#!/bin/sh\ncat <<'OUT'\n{output}OUT\n")
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


def facts_args(nvidia_smi: Path, **overrides: object) -> argparse.Namespace:
    values: dict[str, object] = {"nvidia_smi": str(nvidia_smi), "gpus": None, "gpu_model": "", "gpu_memory_mib": 0}
    return argparse.Namespace(**(values | overrides))


def test_eight_h100s_parse_with_their_memory_and_utilisation():
    found = gpus.parse((FIXTURES / "nvidia-smi-8xh100.csv").read_text())
    assert len(found) == 8
    assert found[0] == gpus.Gpu(0, "NVIDIA H100 80GB HBM3", 81559, 73412, 98.0)
    assert [g.utilisation for g in found] == [98.0, 97.0, 0.0, 0.0, 35.0, 41.0, 0.0, None]


def test_lines_that_do_not_parse_are_skipped():
    text = "No devices were found\n0, Tesla T4, 15360, 0, 0\nx, y, z, 1, 2\n"
    assert [g.name for g in gpus.parse(text)] == ["Tesla T4"]


def test_a_host_without_nvidia_smi_reports_no_gpus_and_says_so(tmp_path):
    facts, note = host_facts(facts_args(tmp_path / "absent"))
    assert (facts["gpus"], facts["gpu_model"]) == (0, "")
    assert note == "no GPUs: nvidia-smi is missing or reports none; reporting none"
    assert gpus.query(str(tmp_path / "absent")) == []


def test_a_host_with_gpus_registers_what_nvidia_smi_reports(tmp_path):
    program = fake_nvidia_smi(tmp_path, (FIXTURES / "nvidia-smi-8xh100.csv").read_text())
    facts, note = host_facts(facts_args(program))
    assert (facts["gpus"], facts["gpu_model"], facts["gpu_memory_mib"]) == (8, "NVIDIA H100 80GB HBM3", 81559)
    assert note.startswith("8 GPU(s) from nvidia-smi")


def test_gpus_can_be_declared_where_nvidia_smi_is_absent(tmp_path):
    facts, note = host_facts(facts_args(tmp_path / "absent", gpus=2, gpu_model="a100"))
    assert (facts["gpus"], facts["gpu_model"]) == (2, "a100")
    assert "declared 2 a100" in note

"""GPU facts and samples from nvidia-smi; a host without it (or without GPUs) has none. Where the host also has
NVML (pynvml, fabrics.nvml), each GPU's utilisation and memory in use come from it: a MIG GPU's slices report
there, not in nvidia-smi's query; one whose slices report nothing stays None (unknown, never idle)."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass, replace

from fabrics import nvml
from fabrics.sampler import parse as parse_readings

QUERY = ["--query-gpu=index,name,memory.total,memory.used,utilization.gpu", "--format=csv,noheader,nounits"]


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    memory_total_mib: int
    memory_used_mib: int
    utilisation: float | None  # None where the driver says "[N/A]"


def parse(text: str) -> list[Gpu]:
    """Parse `nvidia-smi --query-gpu=... --format=csv,noheader,nounits` output.

    Each line reads like "0, NVIDIA H100 80GB HBM3, 81559, 1, 0". Lines that do not parse are skipped.
    """
    gpus = []
    for line in text.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) != 5:
            continue
        try:
            gpus.append(Gpu(int(fields[0]), fields[1], _int(fields[2]), _int(fields[3]), _float_or_none(fields[4])))
        except ValueError:
            continue
    return gpus


def query(binary: str = "nvidia-smi") -> list[Gpu]:
    """The host's GPUs now; [] when nvidia-smi is missing or fails (no GPUs, no driver)."""
    path = shutil.which(binary)
    if path is None:
        return []
    try:
        out = subprocess.run([path, *QUERY], capture_output=True, text=True, timeout=10, check=True)
    except (OSError, subprocess.SubprocessError):
        return []
    return through_nvml(parse(out.stdout), nvml.nvml_text())


def through_nvml(gpus: list[Gpu], text: str | None) -> list[Gpu]:
    """`gpus` with NVML's utilisation and memory in use (`text`, fabrics.nvml's lines) where it reads them."""
    try:
        readings = {r.index: r for r in parse_readings(text)} if text else {}
    except ValueError:
        return gpus
    return [
        replace(g, utilisation=float(r.utilisation) if r.utilisation is not None else None,
                memory_used_mib=r.memory_mib if r.memory_mib is not None else g.memory_used_mib)
        if (r := readings.get(g.index)) is not None else g
        for g in gpus
    ]  # fmt: skip


def _int(value: str) -> int:
    return int(float(value)) if value not in ("[N/A]", "N/A", "") else 0


def _float_or_none(value: str) -> float | None:
    return None if value in ("[N/A]", "N/A", "") else float(value)

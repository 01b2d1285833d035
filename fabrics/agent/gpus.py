"""GPU facts and samples from nvidia-smi; a host without it (or without GPUs) has none."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass

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
    return parse(out.stdout)


def _int(value: str) -> int:
    return int(float(value)) if value not in ("[N/A]", "N/A", "") else 0


def _float_or_none(value: str) -> float | None:
    return None if value in ("[N/A]", "N/A", "") else float(value)

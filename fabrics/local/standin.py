"""The demo's stand-in GPU readings: the local fabric has no GPUs to measure, so in demo mode (and only there:
`Fabric.resolved_settings` turns `simulated_gpus` off outside it) each running job gets a made-up utilisation,
so that idle GPUs, utilisation and chargeback show real-looking numbers. Every page that shows them says they
are simulated.

Deterministic: the same job at the same minute always reads the same. A job's id picks its kind of use (about
one job in four sits idle under 5 %, the rest work between 35 % and 95 %), and the reading drifts minute by
minute around that level."""

from __future__ import annotations

import hashlib
import math
from datetime import datetime

IDLE_SHARE = 64  # of 256: the jobs that sit idle
SETTING = "simulated_gpus"


def _byte(text: str, index: int) -> int:
    return hashlib.sha256(text.encode()).digest()[index]


def utilisation(external_id: str, at: datetime) -> float:
    """The job's stand-in GPU utilisation (0-100 %) at `at`, the same for the same job and minute."""
    minute = int(at.timestamp() // 60)
    if _byte(external_id, 0) < IDLE_SHARE:
        return round(_byte(f"{external_id}:{minute}", 0) / 255 * 4.0, 1)  # idle: 0-4 %
    level = 35.0 + _byte(external_id, 1) / 255 * 50.0  # its usual load, 35-85 %
    drift = (
        10.0 * math.sin(minute / 7.0 + _byte(external_id, 2)) + (_byte(f"{external_id}:{minute}", 1) / 255 - 0.5) * 6
    )
    return round(max(0.0, min(100.0, level + drift)), 1)

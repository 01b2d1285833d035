"""GPU readings through NVML (`pynvml`, from the nvidia-ml-py package: the library nvidia-smi wraps), in the
shape of the sampler's nvidia-smi query (`index, utilization.gpu, memory.used`, fabrics.sampler.parse).
Standard library otherwise: the sampler (fabrics.sampler) carries this module's source to the node.

Why NVML first: a GPU cut into MIG slices has no utilisation in nvidia-smi's query; NVML reads each slice
(a MIG device handle) and says so where the driver reports it. A GPU's line then gives the mean over its slices
that report one, and `[N/A]` where none does (unknown, never idle: the portal counts such a GPU neither idle
nor read). Memory in use is the GPU's, slices included. None where the node has no pynvml or no driver: the
sampler then asks nvidia-smi.
"""

from __future__ import annotations

from typing import Any


def nvml_text(wanted: set[int] | None = None, nvml: Any = None) -> str | None:
    """Lines for the GPUs whose index is in `wanted` (all where None); None where NVML cannot be read."""
    if nvml is None:
        try:
            import pynvml as nvml  # type: ignore[import-untyped,import-not-found,no-redef,unused-ignore]
        except ImportError:
            return None
    try:
        nvml.nvmlInit()
    except Exception:
        return None
    try:
        lines = []
        for index in range(nvml.nvmlDeviceGetCount()):
            if wanted is not None and index not in wanted:
                continue
            device = nvml.nvmlDeviceGetHandleByIndex(index)
            used = int(nvml.nvmlDeviceGetMemoryInfo(device).used) // (1024 * 1024)
            utilisation = _utilisation(nvml, device)
            lines.append(f"{index}, {'[N/A]' if utilisation is None else utilisation}, {used}\n")
        return "".join(lines)
    except Exception:
        return None
    finally:
        _call(nvml.nvmlShutdown)


def _utilisation(nvml: Any, device: Any) -> int | None:
    """The GPU's utilisation, or the mean of its MIG slices' that NVML reports; None where none is reported."""
    modes = _call(nvml.nvmlDeviceGetMigMode, device)  # (current, pending); None: a GPU without MIG
    if not modes or modes[0] != 1:
        rates = _call(nvml.nvmlDeviceGetUtilizationRates, device)
        return None if rates is None else int(rates.gpu)
    slices = []
    for number in range(nvml.nvmlDeviceGetMaxMigDeviceCount(device)):
        mig = _call(nvml.nvmlDeviceGetMigDeviceHandleByIndex, device, number)  # None: no slice at this number
        rates = _call(nvml.nvmlDeviceGetUtilizationRates, mig) if mig is not None else None
        if rates is not None:  # None: the driver reports no utilisation for this slice
            slices.append(int(rates.gpu))
    return round(sum(slices) / len(slices)) if slices else None


def _call(function: Any, *args: Any) -> Any:
    """What NVML answers, or None where it raises (NVMLError_NotSupported, NotFound, ...)."""
    try:
        return function(*args)
    except Exception:
        return None

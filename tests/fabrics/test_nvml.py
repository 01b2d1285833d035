"""GPU readings through NVML (fabrics.nvml) with a stand-in for pynvml's calls (this machine has no GPU and no
driver: the real pynvml answers nvmlInit with NVMLError_LibraryNotFound, which reads as "no NVML"). A MIG GPU's
line is the mean of its slices that report; one whose slices report nothing is [N/A]: unknown, never idle."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from fabrics.nvml import nvml_text
from fabrics.sampler import Reading, parse

MIB = 1024 * 1024


class NotSupported(Exception):
    """As pynvml's NVMLError_NotSupported."""


class StandInNvml:
    """Three GPUs: 0 whole at 70 %; 1 cut into slices, one at 40 % and one the driver reports nothing for; 2 cut
    into one slice that reports nothing."""

    def __init__(self) -> None:
        self.shut = False
        self.gpus: dict[int, tuple[str, Any]] = {0: ("whole", 70), 1: ("mig", [40, None]), 2: ("mig", [None])}

    def nvmlInit(self) -> None: ...

    def nvmlShutdown(self) -> None:
        self.shut = True

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return ("gpu", index)

    def nvmlDeviceGetMemoryInfo(self, handle: Any) -> Any:
        return SimpleNamespace(used=(1000 + handle[1]) * MIB)

    def nvmlDeviceGetMigMode(self, handle: Any) -> tuple[int, int]:
        if self.gpus[handle[1]][0] == "whole":
            raise NotSupported
        return (1, 1)

    def nvmlDeviceGetMaxMigDeviceCount(self, handle: Any) -> int:
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: Any, number: int) -> Any:
        if number >= len(self.gpus[handle[1]][1]):
            raise NotSupported
        return ("mig", handle[1], number)

    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        value = self.gpus[handle[1]][1] if handle[0] == "gpu" else self.gpus[handle[1]][1][handle[2]]
        if value is None:
            raise NotSupported
        return SimpleNamespace(gpu=value, memory=0)


def test_a_mig_gpu_reads_as_the_mean_of_its_slices_that_report_and_none_as_unknown():
    nvml = StandInNvml()
    text = nvml_text(None, nvml)
    assert text == "0, 70, 1000\n1, 40, 1001\n2, [N/A], 1002\n"
    assert parse(text) == [Reading(0, 70, 1000), Reading(1, 40, 1001), Reading(2, None, 1002)]
    assert nvml.shut


def test_only_the_job_s_gpus_are_read():
    assert nvml_text({2}, StandInNvml()) == "2, [N/A], 1002\n"


def test_a_node_without_a_driver_reads_nothing_through_nvml():
    class NoDriver(StandInNvml):
        def nvmlInit(self) -> None:
            raise NotSupported("NVML Shared Library Not Found")

    assert nvml_text(None, NoDriver()) is None
    assert nvml_text(None) is None  # the real pynvml on this machine: no driver


def test_an_agent_s_gpus_take_nvml_s_utilisation_where_it_reads_them():
    from fabrics.agent.gpus import Gpu, through_nvml

    smi = [Gpu(0, "H100", 81559, 10, 5.0), Gpu(1, "A100 (MIG)", 81920, 100, None), Gpu(2, "A100 (MIG)", 81920, 7, None)]
    got = through_nvml(smi, nvml_text(None, StandInNvml()))
    assert [(g.index, g.utilisation, g.memory_used_mib) for g in got] == [
        (0, 70.0, 1000),
        (1, 40.0, 1001),
        (2, None, 1002),
    ]
    assert through_nvml(smi, None) == smi  # no NVML: nvidia-smi's as they were

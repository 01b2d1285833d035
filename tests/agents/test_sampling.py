"""The agent's telemetry of a job's processes: a job's first sample reads its leader alone, later ones its
whole process group from one scan of /proc that every job's sampler shares while it is fresh."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest

from fabrics.agent import runner
from tests.conftest import wait_until


def stat(pid: int, group: int, utime: int, stime: int, rss: int, comm: str = "job") -> str:
    """A /proc/PID/stat line: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
    utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss ..."""
    after = ["S", "1", str(group), "1", "0", "-1", "0", "0", "0", "0", "0", str(utime), str(stime), "0", "0",
             "20", "0", "1", "0", "100", "4096", str(rss), "0"]  # fmt: skip
    return f"{pid} ({comm}) " + " ".join(after)


def fake_proc(root: Path, lines: dict[int, str]) -> None:
    for pid, line in lines.items():
        (root / str(pid)).mkdir(exist_ok=True)
        (root / str(pid) / "stat").write_text(line)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_one_scan_sums_every_group_and_serves_every_sampler_until_it_is_too_old(tmp_path):
    fake_proc(tmp_path, {
        10: stat(10, 10, 5, 1, 300),
        11: stat(11, 10, 2, 2, 200, comm="a (tricky) name"),  # the comm may hold spaces and parentheses
        20: stat(20, 20, 7, 0, 50),
    })  # fmt: skip
    (tmp_path / "self").mkdir()  # not a process: skipped
    clock = Clock()
    groups = runner.ProcessGroups(proc=tmp_path, clock=clock)
    assert groups.usage(10, max_age_s=1.0) == (100.0, 10.0, 500)
    assert groups.usage(20, max_age_s=1.0) == (100.0, 7.0, 50)
    assert groups.usage(30, max_age_s=1.0) == (100.0, 0.0, 0)  # no live process in it
    fake_proc(tmp_path, {12: stat(12, 10, 1, 0, 100)})  # a new process in group 10
    clock.now = 100.9
    assert groups.usage(10, max_age_s=1.0) == (100.0, 10.0, 500)  # the scan is fresh enough: not read again
    clock.now = 101.0
    assert groups.usage(10, max_age_s=1.0) == (101.0, 11.0, 600)  # too old: read again
    (tmp_path / "20" / "stat").unlink()  # a process that ends while the scan runs is passed over
    clock.now = 102.0
    assert groups.usage(20, max_age_s=1.0) == (102.0, 0.0, 0)


def test_a_processes_usage_is_read_from_its_own_stat_file_alone(tmp_path):
    fake_proc(tmp_path, {10: stat(10, 10, 5, 1, 300), 11: stat(11, 10, 2, 2, 200)})
    assert runner._process_usage(10, proc=tmp_path) == (6.0, 300)
    assert runner._process_usage(99, proc=tmp_path) == (0.0, 0)  # gone


@pytest.fixture
def group() -> Any:
    """A real process group: a shell leader with two children."""
    leader = subprocess.Popen(["/bin/bash", "-c", "sleep 30 & sleep 30 & wait"], process_group=0)
    try:
        yield leader
    finally:
        os.killpg(leader.pid, signal.SIGKILL)
        leader.wait()


def test_a_jobs_first_sample_reads_its_leader_and_the_next_its_whole_group(group, tmp_path, monkeypatch):
    scans: list[int] = []
    real_scan = runner.ProcessGroups._scan

    def counted(self: runner.ProcessGroups) -> Any:
        scans.append(1)
        return real_scan(self)

    monkeypatch.setattr(runner, "GROUPS", runner.ProcessGroups())
    monkeypatch.setattr(runner.ProcessGroups, "_scan", counted)

    def members() -> int:
        return sum(1 for p in Path("/proc").iterdir() if p.name.isdigit() and _group_of(p) == group.pid)

    wait_until(lambda: members() == 3)
    options = runner.Options(workdir=tmp_path, sample_every_s=0.0)
    sampler = runner._Sampler(None, "r1", group.pid, [], options)  # type: ignore[arg-type]
    first = sampler.sample()
    assert scans == []  # the leader's own file, no scan
    leader_ticks, leader_rss = runner._process_usage(group.pid)
    assert leader_rss > 0
    assert first["cpu_utilisation"] is None  # nothing to compare with yet
    second = sampler.sample()
    assert scans == [1]
    _, ticks, rss = runner.GROUPS.usage(group.pid, max_age_s=60.0)
    assert rss > leader_rss  # the two children count too
    assert ticks >= leader_ticks
    assert second["memory_mib"] == rss * os.sysconf("SC_PAGE_SIZE") // (1024 * 1024)
    assert second["cpu_utilisation"] is not None
    assert second["cpu_utilisation"] >= 0


def _group_of(proc: Path) -> int:
    try:
        line = (proc / "stat").read_text()
    except OSError:
        return -1
    return int(line[line.rfind(")") + 2 :].split()[2])

"""Reading sacct's per-job GPU time in a window (fabrics/slurm/accounting.py), from lines as Slurm 22.05 prints."""

from __future__ import annotations

from datetime import UTC, datetime

from fabrics.slurm import accounting

START = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
END = datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
OUTPUT = """\
11|gl-7b1c|gl-vision|gl-alice|billing=2,cpu=2,gres/gpu=2,gres/gpu:a100=2,mem=512M,node=1|2026-12-01T12:30:00|2026-12-01T13:00:00
12|gl-8c2d|gl-vision|gl-alice|billing=1,cpu=1,gres/gpu=1,mem=256M,node=1|2026-12-01T11:00:00|2026-12-01T12:15:00
13|train|gl-vision|gl-alice|billing=1,cpu=1,gres/gpu=4,mem=256M,node=1|2026-12-01T13:30:00|Unknown
14|gl-9d3e|gl-fraud|gl-charlie|billing=1,cpu=1,mem=256M,node=1|2026-12-01T12:00:00|2026-12-01T13:00:00
15|gl-0e4f|gl-fraud|gl-charlie|billing=1,cpu=1,gres/gpu=1,mem=256M,node=1|Unknown|Unknown
a line sacct did not print
"""


def test_each_job_counts_its_gpus_for_its_time_inside_the_window():
    charges = {c.job_id: c for c in accounting.charges(OUTPUT, START, END)}
    assert sorted(charges) == ["11", "12", "13", "14"]  # 15 never started
    assert (charges["11"].gpus, charges["11"].seconds) == (2, 1800)  # inside: half an hour, two GPUs
    assert charges["12"].seconds == 900  # started before the window: counted from its start
    assert charges["13"].seconds == 1800  # still running: counted to the window's end
    assert charges["14"].gpu_hours == 0  # no GPUs
    assert (charges["11"].name, charges["11"].account, charges["11"].user) == ("gl-7b1c", "gl-vision", "gl-alice")


def test_gpu_hours_add_up_per_account():
    totals = accounting.gpu_hours_by_account(accounting.charges(OUTPUT, START, END))
    assert totals == {"gl-vision": 1.0 + 0.25 + 2.0, "gl-fraud": 0.0}


def test_sacct_is_asked_for_every_users_jobs_on_the_accounts_in_utc():
    argv = accounting.argv("sacct", {"gl-vision", "gl-fraud"}, START, END)
    assert argv[:3] == ["env", "TZ=UTC", "SLURM_TIME_FORMAT=standard"]
    assert "--allusers" in argv
    assert "--accounts=gl-fraud,gl-vision" in argv
    assert "--starttime=2026-12-01T12:00:00" in argv
    assert "--endtime=2026-12-01T14:00:00" in argv

"""Capacity kept back for short work: long work borrows a large fabric's last GPU only as short work's.

A busy pool's mean wait is mostly the wait of its short work (most work is short): the line puts it first
(priority.py), but once long work holds every GPU, work that arrives next waits for the first to end, however
short it is, and long work ends late. So on a fabric of KEEP_PER_GPUS GPUs or more, work whose runtime limit is
over SHORT_WORK_S leaves one GPU free per KEEP_PER_GPUS (it waits, with its own reason, where starting would
take that GPU), and short work may use all of it: the kept GPU is busy with short work, one after another, and
what arrives short starts at once. Owed work (within its team's unused reservation) is never held back:
reservations come first. Smaller fabrics keep nothing (one GPU kept of a few would idle too much of them).

Replayed on the openb lists beside Kueue's and Slurm's policies (bench_peers), one GPU per 32 kept for work of
four hours or less brought the mean wait of the busy lists at 48 GPUs to about half of what it was (0.80x the
better peer's to 0.41x on the GPU-sharing list at 20 %, 0.55x to 0.43x on the default list), while long work's
later starts cost under a fifth of a point of utilisation there. More kept (one GPU per 16), or all work over an
hour held back, helped the busy lists more but kept GPUs idle where a pool is barely contended: a list of almost
only fractional work (derived from the default list) then waited longer than under Kueue's FIFO.

Long work that the keep holds back waits for that fabric: it tries none of its queue's later fabrics
(borrow.walk). A smaller fabric behind the large one is room for short work too, and on a pool split by GPU
model the only room of the work that can run on nothing else: replayed on the trace program's lists with
GPU-type constraints, long work that spilled onto the six T4s of a 48-GPU pool whenever its 34 G2s were down to
their kept GPU made the work that needs a T4 wait 34 hours on average (Kueue's FIFO: 21 minutes), and the list's
mean wait 3.25x Kueue's; waiting for the G2s instead brought it to 0.67x, at the same utilisation."""

from __future__ import annotations

from scheduler.model import Job

SHORT_WORK_S = 4 * 3600  # work with a runtime limit up to this may use the kept GPUs
KEEP_PER_GPUS = 32  # one GPU kept per this many of a fabric's


def kept(job: Job, size_gpus_milli: int) -> int:
    """What the job must leave free on a fabric of this size (thousandths of a GPU): one GPU per KEEP_PER_GPUS
    for GPU work whose runtime limit is over SHORT_WORK_S; nothing for short work or work without GPUs."""
    if job.runtime_limit_s <= SHORT_WORK_S or not job.per_node.gpus_milli:
        return 0
    return size_gpus_milli // (KEEP_PER_GPUS * 1000) * 1000

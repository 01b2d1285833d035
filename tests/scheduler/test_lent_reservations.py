"""Work owed to its team's reservation that waits because the reservation is lent to work that can never be
preempted says so, with how much of it is lent; borrowed work that can be preempted is taken back instead."""

from __future__ import annotations

from scheduler import decide
from scheduler import reasons as r
from scheduler.reasons import Reason
from tests.scheduler import reference
from tests.scheduler.shapes import FRAUD, POOL, SCAVENGE, VISION, fabric, gpu_jobs, reserve, running_on, snapshot


def waiting_reason(s) -> Reason:
    decisions = decide(s)
    assert decisions == reference.decide(s)  # the readable reference agrees, message and all
    (waiting,) = decisions.waiting
    return waiting.reason


def test_a_reservation_lent_to_work_that_cannot_be_preempted_is_named_with_how_much_is_lent():
    s = snapshot(
        [fabric(POOL, 8)],
        gpu_jobs(VISION, 1, 2),
        running=running_on(POOL, gpu_jobs(FRAUD, 8)),  # queue train: never preempted
        quotas=[reserve(VISION, POOL, 4), reserve(FRAUD, POOL, 2)],
    )
    reason = waiting_reason(s)
    assert reason.code == r.NO_CAPACITY
    assert reason.message == (
        "Your team's reservation on pool is lent to other teams' work that cannot be preempted (4 GPUs of it); "
        "this starts as that work ends. Needs 2 GPUs, 1 CPU, 1 GB; free now 0 GPUs, 991 CPUs, 9756.62 GB."
    )  # fraud borrows 6 GPUs beyond its 2, vision has 4 unused: 4 of vision's are lent


def test_without_a_reservation_or_with_preemptible_borrowers_the_plain_reason_stays():
    plain = snapshot([fabric(POOL, 8)], gpu_jobs(VISION, 1, 2), running=running_on(POOL, gpu_jobs(FRAUD, 8)))
    assert waiting_reason(plain).message.startswith("Waiting for capacity on pool: needs 2 GPUs")
    preemptible = snapshot(
        [fabric(POOL, 8)],
        gpu_jobs(VISION, 1, 2),
        running=running_on(POOL, gpu_jobs(FRAUD, 8, queue=SCAVENGE)),
        quotas=[reserve(VISION, POOL, 4)],
    )
    decisions = decide(preemptible)
    assert decisions == reference.decide(preemptible)
    assert [a.job_id for a in decisions.admit] == ["vision-0"]  # taken back, not named as lent
    assert len(decisions.preempt) == 2

"""Every change to a workload: `check_*` validates and checks access, `do_*` mutates and records.

One module per job; this package re-exports their public names, the ones callers use:

- request: a submission as typed values (SubmitRequest) and the bounds it is held to;
- entitlement: what a submit reads first (SubmitContext: the queue, the teams, their caps and tiers);
- checks: the submit checks, one small function each, in one list (CHECKS), and check_submit over them;
- fits: whether any fabric behind the queue could ever hold it, and run it as its owner;
- recording: the row and its first event (one statement: portal.workloads.store), idempotency keys;
- submit: a single submit from the request to the row; kept: its one-statement way (KeptSubmit);
- bulk: bulk submits and arrays;
- lifecycle: state changes (compare-and-swap with events);
- actions: cancel and reprioritize; leases: extend a lease; idle: idle warnings.

State changes are compare-and-swap updates that write a WorkloadEvent in the same transaction; a change that
loses a race changes nothing. The worker is asked to act through portal.workloads.kick.
"""

from __future__ import annotations

from portal.workloads.kick import kick as kick_worker
from portal.workloads.services.actions import (
    audit_target,
    check_cancel,
    check_reprioritize,
    do_cancel,
    do_reprioritize,
)
from portal.workloads.services.bulk import (
    BULK_BATCH,
    ELEMENT_FIELDS,
    MAX_BULK,
    check_submit_many,
    do_submit_many,
    submit_many,
)
from portal.workloads.services.checks import CHECKS, Draft, check_submit
from portal.workloads.services.entitlement import SubmitContext, submit_context
from portal.workloads.services.errors import (
    BulkRejected,
    CannotExtend,
    IdempotencyConflict,
    InvalidTransition,
    QueueForbidden,
    SubmitRejected,
    TokenCapSpent,
    Unconfirmed,
)
from portal.workloads.services.fits import never_runs
from portal.workloads.services.idle import do_clear_gpu_idle, do_clear_idle, do_warn_gpu_idle, do_warn_idle
from portal.workloads.services.leases import Extension, check_extend, check_lease_to, do_extend, extend
from portal.workloads.services.lifecycle import End, finish_many, settle_array, start_many, transition, transition_many
from portal.workloads.services.recording import do_submit
from portal.workloads.services.request import (
    IMAGE_RE,
    KINDS,
    MAX_COMMAND_BYTES,
    MAX_CPUS_PER_NODE,
    MAX_GPUS_PER_NODE,
    MAX_LEASE_HOURS,
    MAX_MEMORY_GB_PER_NODE,
    MAX_NODES,
    NAME_RE,
    SubmitRequest,
)
from portal.workloads.services.submit import submit

__all__ = [
    "BULK_BATCH", "CHECKS", "ELEMENT_FIELDS", "IMAGE_RE", "KINDS", "MAX_BULK", "MAX_COMMAND_BYTES",
    "MAX_CPUS_PER_NODE", "MAX_GPUS_PER_NODE", "MAX_LEASE_HOURS", "MAX_MEMORY_GB_PER_NODE", "MAX_NODES", "NAME_RE",
    "BulkRejected", "CannotExtend", "Draft", "End", "Extension", "IdempotencyConflict", "InvalidTransition",
    "QueueForbidden", "SubmitContext", "SubmitRejected", "SubmitRequest", "TokenCapSpent", "Unconfirmed",
    "audit_target", "check_cancel", "check_extend", "check_lease_to", "check_reprioritize", "check_submit",
    "check_submit_many", "do_cancel", "do_clear_gpu_idle", "do_clear_idle", "do_extend", "do_reprioritize",
    "do_submit", "do_submit_many", "do_warn_gpu_idle", "do_warn_idle", "extend", "finish_many", "kick_worker",
    "never_runs", "settle_array", "start_many", "submit", "submit_context", "submit_many", "transition",
    "transition_many",
]  # fmt: skip

"""The Slurm fabric: sbatch, squeue, sacct, scancel and sinfo on a login node over one SSH connection.

Settings (JSON, checked by `check_settings`), the SSH ones as in fabrics.ssh.settings, and:

    {"partition": "cpu", "gpu_partition": "gpu", "gpu_request": "gres", "gpu_type": "",
     "workdir": ".gridlane", "bin_dir": "", "submit_parallelism": 8, "accounting": true,
     "connect_via": "direct", "extend_time_limit": false,
     "min_uid": 1000, "max_array_size": 1001, "max_array_tasks": 1001, "gpu_tools_path": ""}

Run as the person: a job whose spec names `run_as` (the portal's identity mapping) is submitted with
`sudo -n -u <user> sbatch` in that user's home (fabrics.ssh.runas: the guard refuses root, unknown
users and uids below `min_uid`), and charged to `--account=<account>` when the spec names one. Its
output lands in the person's own <workdir> (then `workdir` must be `.gridlane`, as the sudoers rule
names it); cancel and tail run as the job's owner, as Slurm reports it. The submit lock and the
records of what was submitted stay in the submit account's home, so dispatch stays crash-safe.
Look-ups and polls ask for every user's jobs (not `--me`), by name or job id.

Round trips: `place_many`, the dispatcher's, is one SSH command per batch: under the submit lock,
one squeue (by job name) and the records of earlier batches say which workloads already have a
job, and sbatch runs for the others only (each script read from a here-document). `find_many`
and `poll` are one command each (`squeue --me`), plus one `sacct` only for jobs slurmctld has
already forgotten. Every job is named `gl-<workload id>` with the comment `gridlane:<workload id>`,
and sbatch's output goes straight to <workdir>/ids/<workload id>, so the job id is on disk the
moment sbatch prints it: a worker that died after sbatch finds its job, however long ago,
instead of submitting a second one.

Notebooks: the script starts the queue template's Jupyter with `gridlane_notebook`, which reports
the server's host, port and token to the portal (fabrics.ssh.notebook), which passes the user's browser
through to it (portal.connect): directly, or with `"connect_via": "ssh"` through this fabric's SSH
connection to the login node, where the compute nodes are not routable from the portal.

Native jobs' samplers: `start_sampler` adds a step to a running job (fabrics.slurm.sampling), with
`gpu_tools_path` (folders such as /usr/local/nvidia/bin, joined by ":") searched for nvidia-smi first, where nodes
keep nvidia-smi off the default one.

Leases: a Slurm user may shorten a job's time limit but not lengthen it; an operator may. With
`"extend_time_limit": true` (the submit account is a Slurm operator: `sacctmgr modify user <user>
set AdminLevel=Operator`), `extend` reads the running job's start (one squeue) and sets its TimeLimit
to the minutes from then to the new end (`scontrol update`). Without it, a running lease ends as planned.

Arrays: the elements of one array placed together go out as one sbatch (`--array=0-999` on the command
line, SLURM_ARRAY_TASK_ID set in each), as many as share their script less each one's own environment
(fabrics.slurm.render.array_key, fabrics.slurm.native.array_key). A group holds at most
`max_array_tasks` elements (Slurm's SchedulerParameters=max_array_tasks, which defaults to MaxArraySize),
so a bigger one is split; an index at or past `max_array_size` (MaxArraySize: indexes run from 0 to one
less) is refused before anything runs. Each element's job id is Slurm's `<job id>_<index>`, which squeue,
sacct, scancel and scontrol all take; its output is <workdir>/<job id>_<index>.out. The group's tag is
`gridlane:<group id>`, fresh for each sbatch; before sbatch runs, every element's record gets a pointer
to the group (fabrics.ssh.batch), so a look-up finds each element's job whatever the crash: through the
group's record, or through `squeue -r`, which lists each element as `gridlane:<group id> <job id>_<index>`.
"""

from __future__ import annotations

import logging
import math
import posixpath
import re
import uuid
from collections.abc import Callable, Collection, Mapping, Sequence
from datetime import datetime
from typing import Any
from uuid import UUID

from fabrics import templating
from fabrics.base import (
    CANNOT_EXTEND,
    Batched,
    Capacity,
    FabricConfig,
    FabricError,
    JobSpec,
    JobState,
    JobStatus,
    TemplateError,
    TierHints,
)
from fabrics.slurm import accounting, directives, native, parse, reasons, sampling
from fabrics.slurm import free as live
from fabrics.slurm import render as rendering
from fabrics.slurm.render import GPU_REQUESTS, NAME_PREFIX, TAG_PREFIX, Options, render
from fabrics.ssh import batch, notebook, runas
from fabrics.ssh.scripts import PATH, TEMPLATE_NAMES, WORD, split_template
from fabrics.ssh.settings import SshSettings
from fabrics.ssh.transport import Result, SshTransport, host_keys

log = logging.getLogger("gridlane.fabrics.slurm")

# Options Gridlane sets itself: a template that set them would break find (name, comment) or tail (output).
RESERVED = re.compile(r"^#SBATCH\s+(--job-name|-J|--comment|--output|-o|--error|-e|--chdir|-D)\b")
NAMES_PER_QUERY = 1000  # job names per squeue call: about 41 KB, well below the kernel's limit on one argument
UTC_ENV = ("env", "TZ=UTC", "SLURM_TIME_FORMAT=standard")  # times in UTC, as 2026-11-30T02:26:07
QOS_NAME = re.compile(r"^[A-Za-z0-9_.-]+$")  # what sacctmgr takes as a QOS name, and nothing a shell reads
# What a record holds: what `sbatch --parsable` prints (42, or 42;cluster), or an array element's 42_5 (bash regex).
JOB_ID = r"^[0-9]+(_[0-9]+)?(;[^[:space:]]+)?$"
EXTERNAL_ID = re.compile(r"^[0-9]+(_[0-9]+)?$")  # a job's id (42) or an array element's (42_5)
MAX_ARRAY_SIZE = 1001  # Slurm's default MaxArraySize: indexes 0 to 1000


class SlurmFabric(Batched):
    # What does not fit now waits in the fabric's own queue, which says why (see portal/worker/capacity.py).
    queues_work = True

    def __init__(self, config: FabricConfig) -> None:
        self.check_settings(config.settings)
        self.config = config
        settings = config.settings
        self.options = Options(
            partition=settings.get("partition", ""),
            gpu_partition=settings.get("gpu_partition", ""),
            gpu_request=settings.get("gpu_request", "gres"),
            gpu_type=settings.get("gpu_type", ""),
            workdir=settings.get("workdir", ".gridlane"),
        )
        self.bin_dir: str = settings.get("bin_dir", "")
        self.parallel: int = settings.get("submit_parallelism", 8)
        self.accounting: bool = settings.get("accounting", True)
        self.min_uid: int = settings.get("min_uid", runas.DEFAULT_MIN_UID)
        self.max_array_size: int = settings.get("max_array_size", MAX_ARRAY_SIZE)
        self.max_array_tasks: int = settings.get("max_array_tasks", self.max_array_size)
        self.ssh = SshTransport(SshSettings.from_settings(settings))
        self._queued: set[str] = set()  # jobs the last poll saw waiting; they have no output yet

    @classmethod
    def check_template(cls, template: str) -> None:
        """Raise TemplateError for a bad placeholder, an unsafe one, or a directive Gridlane owns."""
        templating.check(template, TEMPLATE_NAMES)
        templating.check_quoting(template)
        _, head, body = split_template(template)
        for line in head:
            if RESERVED.match(line.strip()):
                raise TemplateError(
                    f"{line.strip()!r}: Gridlane sets the job name, comment, output, error and directory itself"
                )
        for line in body.splitlines():
            if line.lstrip().startswith("#SBATCH"):
                raise TemplateError(f"{line.strip()!r} comes after a command, where sbatch ignores it")

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> None:
        ssh = SshSettings.from_settings(settings)
        host_keys(ssh.known_hosts)
        for key in ("partition", "gpu_partition", "gpu_type"):
            value = settings.get(key, "")
            if not isinstance(value, str) or (value and not WORD.match(value)):
                raise ValueError(f"settings.{key}: a Slurm name (letters, digits, . _ + -)")
        if settings.get("gpu_request", "gres") not in GPU_REQUESTS:
            raise ValueError(f"settings.gpu_request: one of {', '.join(GPU_REQUESTS)}")
        for key in ("workdir", "bin_dir"):
            value = settings.get(key, "")
            if not isinstance(value, str) or (value and (not PATH.match(value) or ".." in value.split("/"))):
                raise ValueError(f"settings.{key}: a path without spaces or '..'")
        if not settings.get("workdir", ".gridlane"):
            raise ValueError("settings.workdir: where job output goes, e.g. .gridlane")
        value = settings.get("submit_parallelism", 8)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 64:
            raise ValueError("settings.submit_parallelism: a whole number from 1 to 64")
        if not isinstance(settings.get("accounting", True), bool):
            raise ValueError("settings.accounting: true when the cluster has slurmdbd (sacct), else false")
        if not isinstance(settings.get("extend_time_limit", False), bool):
            raise ValueError("settings.extend_time_limit: true when the account is a Slurm operator, else false")
        value = settings.get("min_uid", runas.DEFAULT_MIN_UID)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("settings.min_uid: the lowest uid a job may run as (system accounts sit below), e.g. 1000")
        for key in ("max_array_size", "max_array_tasks"):
            value = settings.get(key, MAX_ARRAY_SIZE)
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 4_000_001:
                raise ValueError(f"settings.{key}: Slurm's {ARRAY_LIMITS[key]}, a whole number (default 1001)")
        sampling.check_tools_path(settings.get("gpu_tools_path", ""))
        notebook.check_connect_via(settings)

    def render(self, job: JobSpec) -> str:
        if job.script:  # the user's own script: sent as it is, Gridlane's options on sbatch's command line
            self._native_options(job)
            return job.script
        if job.template:
            self.check_template(job.template)
        return render(job.template, job, self.options)

    def place_many(self, jobs: Sequence[JobSpec], *, fresh: Collection[UUID] = ()) -> dict[UUID, str | FabricError]:
        """Each job's Slurm job id: the one its workload already has, else a new one. One SSH command.

        Under the submit lock (a batch orphaned by a dropped connection ends first), the records of
        earlier batches and one squeue by job name say which workloads have a job; only the others
        are submitted. So a worker killed anywhere in a dispatch never leads to a second job.
        fresh: workloads never handed to this fabric before (see fabrics.base.place_many); squeue is
        not asked about them, and a batch of only those runs no squeue at all.
        """
        return self._place(jobs, look_up=[job for job in jobs if job.workload_id not in fresh])

    def submit_many(self, jobs: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
        """All the jobs in one SSH command; per workload its Slurm job id or the error it met.

        A workload whose record (from an earlier batch) names a job is not submitted again.
        """
        return self._place(jobs, look_up=())

    def find_many(self, workload_ids: Sequence[UUID]) -> dict[UUID, str]:
        """Jobs of these workloads: those slurmctld holds by their name, and those an earlier batch recorded."""
        wanted = list(dict.fromkeys(workload_ids))
        if not wanted:
            return {}
        steps = [self._step(wid) for wid in wanted]
        report, output = self._run_keyed(steps, [f"{NAME_PREFIX}{wid}" for wid in wanted], retry=True)
        # An array element's job is found through its record, or the pointer to its group beside it.
        found = {}
        for index, wid in enumerate(wanted):
            outcome = report.outcomes.get(index)
            if outcome is None:
                raise FabricError(f"the look-up did not report back ({output.message()})", retryable=True)
            job_id = self._found(wid, outcome)
            if job_id is not None:
                found[wid] = job_id
        return found

    def poll(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        """One squeue for the account's jobs (a second for array elements); one sacct for those slurmctld no
        longer holds."""
        statuses = {i: JobStatus(JobState.MISSING) for i in ids}
        jobs = self._held([i for i in ids if EXTERNAL_ID.match(i)])
        statuses |= {job_id: job.status() for job_id, job in jobs.items()}
        self._queued = {i for i, s in statuses.items() if s.state is JobState.QUEUED}
        gone = [i for i in ids if EXTERNAL_ID.match(i) and i not in jobs]
        if gone and self.accounting:
            old_jobs, old_elements = [i for i in gone if i.isdigit()], [i for i in gone if "_" in i]
            asks: list[tuple[list[str], Callable[[str], list[parse.SlurmJob]]]] = []
            if old_jobs:
                asks.append((self._sacct(f"--jobs={_ids(old_jobs)}"), parse.sacct))
            if old_elements:
                fields = parse.SACCT_TASK_FIELDS
                asks.append((self._sacct(f"--jobs={_ids(old_elements)}", fields=fields), parse.sacct_tasks))
            for argv, read in asks:
                result = self._run(argv, retry=True)
                if not result.ok:
                    log.warning("sacct failed on %s: %s", self.config.name, result.message())
                    continue
                for job in read(result.stdout):
                    if job.job_id in statuses:
                        statuses[job.job_id] = job.status()
        return statuses

    def _held(self, ids: Sequence[str]) -> dict[str, parse.SlurmJob]:
        """The jobs and array elements slurmctld holds among these ids: one squeue each for jobs and for elements
        (`-r`, one line per element). FabricError when the controller does not answer."""
        found: dict[str, parse.SlurmJob] = {}
        jobs, elements = [i for i in ids if i.isdigit()], [i for i in ids if "_" in i]
        asks = []
        if jobs:
            asks.append((self._squeue(f"--jobs={_ids(jobs)}"), parse.squeue, set(jobs)))
        if elements:
            argv = self._squeue("-r", f"--jobs={_ids(elements)}", fields=parse.squeue_tasks_format())
            asks.append((argv, parse.squeue_tasks, set(elements)))
        for argv, read, wanted in asks:
            result = self._run(argv, retry=True)
            if not result.ok and "Invalid job id specified" not in result.stderr:  # squeue's answer for one unknown id
                raise FabricError(f"the Slurm controller does not answer: {result.message()}", retryable=True)
            found |= {job.job_id: job for job in read(result.stdout) if job.job_id in wanted}
        return found

    @classmethod
    def extends_with(cls, settings: Mapping[str, Any]) -> bool:
        """Whether leases extend here: only an operator may lengthen a job's time limit (`extend_time_limit`)."""
        return settings.get("extend_time_limit", False) is True

    def extend(self, external_id: str, ends_at: datetime) -> None:
        """Let a running job run until `ends_at`: its TimeLimit, in whole minutes from its start, rounded up."""
        if ends_at.tzinfo is None:
            raise ValueError("ends_at must be an aware datetime")
        if not self.extends_with(self.config.settings):
            raise FabricError(CANNOT_EXTEND, retryable=False)
        if not EXTERNAL_ID.match(external_id):
            raise FabricError(f"{external_id!r} is no Slurm job id", retryable=False)
        job = self._held([external_id]).get(external_id)
        if job is None or job.status().state is not JobState.RUNNING or job.started_at is None:
            said = f"it is {job.state}" if job is not None else "Slurm no longer holds it"
            raise FabricError(f"Slurm job {external_id} is not running: {said}", retryable=False)
        minutes = max(1, math.ceil((ends_at - job.started_at).total_seconds() / 60))
        argv = [self._bin("scontrol"), "update", f"JobId={external_id}", f"TimeLimit={minutes}"]
        result = self._run(argv, retry=True)  # the same limit twice is the same limit
        if not result.ok:
            raise FabricError(f"scontrol refused TimeLimit={minutes}: {result.message()}", retryable=False)
        log.info("Slurm job %s on %s: TimeLimit=%s", external_id, self.config.name, minutes)

    def reprioritise(self, external_id: str, tier: TierHints) -> bool:
        """A pending job's new tier inside Slurm too: `scontrol update JobId=<id> QOS=<qos> Nice=<n>`, run as
        its owner (as scancel is). False when the tier asks nothing of Slurm."""
        updates = reprioritise_updates(tier)
        if not updates:
            return False
        if not EXTERNAL_ID.match(external_id):
            raise FabricError(f"{external_id!r} is no Slurm job id", retryable=False)
        argv = self._as_owner(external_id, [self._bin("scontrol"), "update", f"JobId={external_id}", *updates])
        result = self._run(argv, retry=True)  # the same values twice are the same values
        if not result.ok:
            refused = runas.error(result.stderr)
            raise refused or FabricError(f"scontrol refused {' '.join(updates)}: {result.message()}", retryable=False)
        log.info("Slurm job %s on %s: %s", external_id, self.config.name, " ".join(updates))
        return True

    def cancel(self, external_id: str) -> None:
        """scancel the job, or one array element (`scancel 42_5`: its siblings run on)."""
        if not EXTERNAL_ID.match(external_id):
            return  # no job of ours has such an id
        result = self._run(self._as_owner(external_id, [self._bin("scancel"), external_id]))
        if result.ok or "Invalid job id" in result.stderr or "already completing or completed" in result.stderr:
            return
        refused = runas.error(result.stderr)
        if refused is not None:
            raise refused
        raise FabricError(f"scancel {external_id} failed: {result.message()}", retryable=True)

    def take_back(self, external_id: str) -> None:
        """Cancel the job only while it still waits (`scancel --state=PENDING`, one decision in slurmctld): a job
        that started meanwhile runs on untouched. The caller polls to learn which happened."""
        if not EXTERNAL_ID.match(external_id):
            return
        result = self._run(self._as_owner(external_id, [self._bin("scancel"), "--state=PENDING", external_id]))
        if result.ok or "Invalid job id" in result.stderr or "already completing or completed" in result.stderr:
            return
        refused = runas.error(result.stderr)
        if refused is not None:
            raise refused
        raise FabricError(f"scancel --state=PENDING {external_id} failed: {result.message()}", retryable=True)

    def tail(self, external_id: str, max_bytes: int = 16_384) -> str:
        """The end of the job's stdout, then of its stderr (at most half) under a marker line (an array element's:
        <job id>_<index>.out, where Gridlane chose the path)."""
        if not EXTERNAL_ID.match(external_id) or external_id in self._queued:
            return ""  # a job that has not started has written nothing: no round trip for it
        base = posixpath.join(self.options.workdir, external_id)
        steps = [
            batch.Step(self._as_owner(external_id, ["tail", "-c", str(max_bytes // 2), "--", f"{base}.err"])),
            batch.Step(self._as_owner(external_id, ["tail", "-c", str(max_bytes), "--", f"{base}.out"])),
        ]
        outcomes = self._run_steps(steps, retry=True)
        err = outcomes[0].stdout if 0 in outcomes and outcomes[0].status == 0 else ""
        out = outcomes[1].stdout if 1 in outcomes and outcomes[1].status == 0 else ""
        budget = max(0, max_bytes - len(err))
        text = out[-budget:] if budget else ""
        if err:
            if text and not text.endswith("\n"):
                text += "\n"
            text += "--- stderr ---\n" + err
        return text

    def start_sampler(self, external_id: str, nodes: int, env: Mapping[str, str], secret: str) -> None:
        """The GPU sampler as a step of a running job, on every node, as its owner (fabrics.slurm.sampling);
        FabricError saying why it did not start (the job itself is never touched)."""
        try:
            tools = self.config.settings.get("gpu_tools_path", "")
            step = sampling.srun_argv(self._bin("srun"), external_id, nodes, sampling.with_tools(env, tools))
        except ValueError as error:
            raise FabricError(str(error), retryable=False) from error
        result = self.ssh.run(sampling.launch_argv(self._as_owner(external_id, step)), stdin=secret + "\n")
        if not result.ok or sampling.STARTED not in result.stdout:
            refused = runas.error(result.stderr)
            # A step that ended at once (the launcher's 3) may start later, once the job's own processes run.
            died = result.status == sampling.ENDED_AT_ONCE
            raise refused or FabricError(sampling.reason(result.stderr, result.status), retryable=died)

    def capacity(self) -> Capacity:
        try:
            result = self._run(live.command(UTC_ENV, self._bin("sinfo"), self._bin("squeue")), retry=True)
        except FabricError as exc:
            return Capacity(self.config.capacity, healthy=False, detail=str(exc))
        if not result.ok:
            return Capacity(self.config.capacity, healthy=False, detail=f"sinfo failed: {result.message()}")
        inventory = parse.sinfo(live.split(result.stdout)[0])
        free = live.read(result.stdout, {p for p in (self.options.partition, self.options.gpu_partition) if p})
        # The controller answers, so the fabric is up; nodes that are down only shrink what it can hold (to
        # nothing when none is up), and work waits for capacity, saying the numbers.
        return Capacity(inventory.total, healthy=True, detail=inventory.describe() or "no nodes", free=free)

    def account_usage(self, accounts: Collection[str], start: datetime, end: datetime) -> list[accounting.Charge]:
        """Every job charged to these Slurm accounts that ran in [start, end), with its GPU time there (one sacct)."""
        if not self.accounting:
            raise FabricError("this cluster keeps no job accounting (settings.accounting is false)", retryable=False)
        if not accounts:
            return []
        result = self._run(accounting.argv(self._bin("sacct"), accounts, start, end), retry=True)
        if not result.ok:
            raise FabricError(f"sacct failed: {result.message()}", retryable=True)
        return accounting.charges(result.stdout, start, end)

    def close(self) -> None:
        self.ssh.close()

    def _bin(self, name: str) -> str:
        return posixpath.join(self.bin_dir, name) if self.bin_dir else name

    def _squeue(self, *filters: str, fields: str = "") -> list[str]:
        return [
            *UTC_ENV,
            self._bin("squeue"),
            "--noheader",
            "--states=all",
            *filters,
            "-O",
            fields or parse.squeue_format(),
        ]

    def _sacct(self, *filters: str, fields: Sequence[str] = parse.SACCT_FIELDS) -> list[str]:
        return [
            *UTC_ENV,
            self._bin("sacct"),
            "-X",
            "-n",
            "-P",
            f"--delimiter={parse.FIELD_END}",
            *filters,
            "-o",
            ",".join(fields),
        ]

    def _run(self, argv: list[str], *, retry: bool = False) -> Result:
        return self.ssh.run(argv, retry=retry)

    def _setup(self) -> list[list[str]]:
        return [["mkdir", "-p", "--", self.options.workdir, self._ids()]]

    def _ids(self) -> str:
        return posixpath.join(self.options.workdir, "ids")

    def _lock(self) -> str:
        return posixpath.join(self.options.workdir, ".submit.lock")

    def _run_steps(self, steps: list[batch.Step], *, retry: bool) -> dict[int, batch.Outcome]:
        text, marker = batch.script(steps)
        return batch.parse(self.ssh.run_script(text, retry=retry).stdout, marker, len(steps))

    def _step(
        self, wid: UUID, script: str | None = None, options: Sequence[str] = (), job: JobSpec | None = None
    ) -> batch.Step:
        """The keyed step for a workload: sbatch with its script, or (no script) only its look-up."""
        argv = self._sbatch(job, options) if script is not None else []
        return batch.Step(argv, stdin=script, key=f"{TAG_PREFIX}{wid}", record=posixpath.join(self._ids(), str(wid)))

    def _sbatch(self, job: JobSpec | None, options: Sequence[str]) -> list[str]:
        """sbatch's argv. A job with `run_as` is submitted as that person (fabrics.ssh.runas), with `account` and
        its priority tier's QOS and nice on the command line (before a native script's options, so a QOS the
        queue target forces wins; after the script's own #SBATCH lines, which the command line overrides).
        """
        account = [f"--account={job.account}"] if job is not None and job.account else []
        tier = tier_options(job.tier) if job is not None else []
        argv = [self._bin("sbatch"), "--parsable", *account, *tier, *options]
        if job is not None and self._as_person(job):
            argv = runas.argv(job.run_as, self.min_uid, argv, workdir=self.options.workdir)
        return argv

    def _as_owner(self, external_id: str, argv: list[str]) -> list[str]:
        """argv run as the job's owner, as Slurm names it (squeue, else sacct): directly when that is the submit
        account or Slurm names nobody (the job is long gone), else as the person behind the guard (runas)."""
        owner = (
            'u=$("$1" -h -t all -j "$3" -o %u 2>/dev/null); '
            '[ -n "$u" ] || u=$("$2" -X -n -P -j "$3" -o User 2>/dev/null | head -n 1); '
            "guard=$4 floor=$5; shift 5; "
            'if [ -z "$u" ] || [ "$u" = "$(id -un)" ]; then exec "$@"; fi; '
            'exec sh -c "$guard" gridlane-runas "$u" "$floor" "" "$@"'
        )
        lookup = [self._bin("squeue"), self._bin("sacct"), external_id]
        return ["bash", "-c", owner, "as-owner", *lookup, runas.GUARD, str(self.min_uid), *argv]

    def _as_person(self, job: JobSpec) -> bool:
        """Whether the job runs as someone other than the submit account."""
        return bool(job.run_as) and job.run_as != self.ssh.settings.user

    def _refused(self, job: JobSpec) -> FabricError | None:
        """A job whose run_as or account could never be passed on: refused before anything runs."""
        try:
            if job.run_as:
                runas.check_user(job.run_as)
        except ValueError as exc:
            return FabricError(str(exc), retryable=False)
        if job.account and not WORD.match(job.account):
            return FabricError(f"{job.account!r} is not a Slurm account name", retryable=False)
        return None

    def _native_options(self, job: JobSpec) -> list[str]:
        """sbatch's command line for a user's own script (fabrics.slurm.native); TemplateError when it cannot be."""
        try:
            read = directives.read(job.script)
            directives.check_allowed(read.directives, extra=directives.OPTIONS)  # NEVER, whatever got here
        except directives.DirectiveError as error:
            raise TemplateError(str(error)) from error
        return native.options(job, read, self.options)

    def _name(self, job: JobSpec) -> str:
        """The name the job has in Slurm: Gridlane's (an array element's: its array's), or the one a user's own
        script gives it."""
        if job.script:
            try:
                return native.job_name(job, directives.read(job.script))
            except directives.DirectiveError:
                pass
        return f"{NAME_PREFIX}{job.array_id if job.array else job.workload_id}"

    def _lookups(self, names: Sequence[str]) -> list[list[str]]:
        """squeue calls printing `<comment> <job id>` for the account's jobs with these names."""
        keys = sorted(set(names))
        return [
            [
                self._bin("squeue"),
                "--noheader",
                "--states=all",
                "--name=" + ",".join(keys[i : i + NAMES_PER_QUERY]),
                "-r",  # an array's elements a line each: `gridlane:<group id> 42_5`
                "--format=%k %i",  # the comment is the key: a job must have our name and our comment
            ]
            for i in range(0, len(keys), NAMES_PER_QUERY)
        ]

    def _run_keyed(
        self, steps: list[batch.Step], look_up: Sequence[str], *, retry: bool
    ) -> tuple[batch.Report, Result]:
        """Run keyed steps under the submit lock, after one squeue for the jobs named in `look_up`."""
        text, marker = batch.script(
            steps,
            parallel=self.parallel,
            setup=self._setup(),
            lock=self._lock(),
            lookups=self._lookups(look_up) if look_up else (),
            value=JOB_ID,
        )
        output = self.ssh.run_script(text, retry=retry)
        report = batch.parse_report(output.stdout, marker, batch.slots(steps))
        if report.lookup_failed is not None:
            raise FabricError(f"squeue failed: {_said(report.lookup_failed)}", retryable=True)
        return report, output

    def _place(self, jobs: Sequence[JobSpec], *, look_up: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
        """Submit each job that neither its record nor squeue (asked about `look_up` only) says has a job; an
        array's elements in groups, one sbatch each."""
        results: dict[UUID, str | FabricError] = {
            job.workload_id: error for job in jobs if (error := self._refused(job)) is not None
        }
        jobs = [job for job in jobs if job.workload_id not in results]
        steps, keys, refused = batch.keyed_steps([job for job in jobs if not job.array], self._submit_step)
        results |= refused
        for group in self._groups([job for job in jobs if job.array], results):
            try:
                steps.append(self._group_step(group))
            except TemplateError as exc:
                results |= dict.fromkeys((j.workload_id for j in group), _unrenderable(exc))
                continue
            keys += [job.workload_id for job in group]  # a report slot each, in the group's order
        if not steps:
            return results
        try:
            report, output = self._run_keyed(steps, [self._name(job) for job in look_up], retry=False)
        except FabricError as exc:
            return results | dict.fromkeys(keys, exc)
        for index, key in enumerate(keys):
            outcome = report.outcomes.get(index)
            if outcome is not None and outcome.found:
                found = self._found(key, outcome)
                results[key] = found or FabricError(f"unreadable job record: {outcome.stdout[:100]!r}", retryable=False)
            else:
                results[key] = _submitted(outcome, output)
        return results

    def _groups(self, elements: Sequence[JobSpec], refused: dict[UUID, str | FabricError]) -> list[list[JobSpec]]:
        """Array elements in groups that can share one sbatch: the same array and script (`_array_key`), each
        index once, at most `max_array_tasks`; elements that cannot go out at all go into `refused`."""
        alike: dict[tuple[str, ...], list[JobSpec]] = {}
        seen: set[UUID] = set()
        for job in elements:
            if job.workload_id in refused or job.workload_id in seen:
                continue  # one job per workload
            seen.add(job.workload_id)
            if not job.array.isdigit() or int(job.array) >= self.max_array_size:
                limit = f"this cluster's MaxArraySize ({self.max_array_size}) takes 0 to {self.max_array_size - 1}"
                refused[job.workload_id] = FabricError(f"array index {job.array!r}: {limit}", retryable=False)
                continue
            try:
                alike.setdefault(self._array_key(job), []).append(job)
            except TemplateError as exc:
                refused[job.workload_id] = _unrenderable(exc)
        groups = []
        for members in alike.values():
            group: list[JobSpec] = []
            for job in sorted(members, key=lambda j: int(j.array)):
                # Slurm takes at most max_array_tasks elements in one sbatch, and each index once.
                if len(group) >= self.max_array_tasks or (group and group[-1].array == job.array):
                    groups.append(group)
                    group = []
                group.append(job)
            groups.append(group)
        return groups

    def _array_key(self, job: JobSpec) -> tuple[str, ...]:
        """What elements must share to go out as one sbatch: who runs it, its tier, and its script less each
        element's own environment. TemplateError for an element whose script cannot be sent."""
        common = (job.run_as, job.account, *tier_options(job.tier), job.kind)
        if job.script:
            self._native_options(job)
            return (*common, *native.array_key(job))
        if job.template:
            self.check_template(job.template)
        return (*common, *rendering.array_key(job.template, job, self.options))

    def _group_step(self, group: list[JobSpec]) -> batch.Step:
        """One sbatch for these elements (the same `_array_key`): tagged with a fresh group id, and each element
        a member of it, whose pointer is on disk before sbatch runs."""
        first, tag = group[0], f"{TAG_PREFIX}{uuid.uuid4()}"
        if first.script:
            try:
                read = directives.read(first.script)
            except directives.DirectiveError as error:
                raise TemplateError(str(error)) from error
            script, options = first.script, native.array_options(group, read, self.options, tag)
        else:
            script = rendering.array_script(first.template, group, self.options, reveal=True)
            options = [f"--comment={tag}", batch.TASKS]
        ids = self._ids()
        members = [
            batch.Member(f"{TAG_PREFIX}{job.workload_id}", posixpath.join(ids, str(job.workload_id)), int(job.array))
            for job in group
        ]
        record = posixpath.join(ids, tag.removeprefix(TAG_PREFIX))
        return batch.Step(self._sbatch(first, options), stdin=script, key=tag, record=record, members=members)

    def _found(self, wid: UUID, outcome: batch.Outcome) -> str | None:
        """The job a look-up found for a workload: the first, should there ever be several."""
        ids = {job_id for value in outcome.values if (job_id := parse.submitted_id(value)) is not None}
        if len(ids) > 1:
            log.error("workload %s has several jobs on %s: %s", wid, self.config.name, sorted(ids, key=_order))
        return min(ids, key=_order) if ids else None

    def _submit_step(self, job: JobSpec) -> batch.Step:
        if job.script:  # the user's own script, byte for byte on sbatch's stdin
            return self._step(job.workload_id, job.script, self._native_options(job), job)
        return self._step(job.workload_id, self._script(job), job=job)

    def _script(self, job: JobSpec) -> str:
        """The script as sent: as `render`, with its secrets."""
        if job.template:
            self.check_template(job.template)
        return render(job.template, job, self.options, reveal=True)


def tier_options(tier: TierHints) -> list[str]:
    """sbatch options for a priority tier: its QOS and nice."""
    return [f"--{word[0].lower()}={word[1]}" for word in _tier_words(tier)]


def reprioritise_updates(tier: TierHints) -> list[str]:
    """scontrol update's words for a tier: QOS=<qos> and Nice=<n>, where it has them."""
    return [f"{name}={value}" for name, value in _tier_words(tier)]


def _tier_words(tier: TierHints) -> list[tuple[str, str]]:
    """(QOS, qos) and (Nice, n) where the tier has them: IT's values, checked when saved and checked again here,
    as every word that reaches the login node is."""
    words = []
    if tier.slurm_qos:
        if not QOS_NAME.match(tier.slurm_qos):
            raise TemplateError(f"{tier.slurm_qos!r} is not a Slurm QOS name")
        words.append(("QOS", tier.slurm_qos))
    if tier.slurm_nice is not None:
        words.append(("Nice", str(int(tier.slurm_nice))))
    return words


ARRAY_LIMITS = {"max_array_size": "MaxArraySize", "max_array_tasks": "max_array_tasks (SchedulerParameters)"}


def _ids(ids: Sequence[str]) -> str:
    """Job ids for --jobs, in order, each once."""
    return ",".join(sorted(set(ids), key=_order))


def _order(job_id: str) -> tuple[int, ...]:
    """42 before 42_3 before 42_10 before 43."""
    return tuple(int(part) for part in job_id.split("_"))


def _unrenderable(exc: TemplateError) -> FabricError:
    return FabricError(f"the job script does not render: {exc}", retryable=False)


def _submitted(outcome: batch.Outcome | None, output: Result) -> str | FabricError:
    if outcome is None:
        # The script did not get as far as reporting: sbatch may or may not have run.
        return FabricError(f"no answer from sbatch for this job ({output.message()})", retryable=True)
    job_id = parse.submitted_id(outcome.stdout) if outcome.status == 0 else None
    if job_id is not None:
        return job_id
    refused = runas.error(outcome.stderr)
    if refused is not None:
        return refused
    message, retryable = reasons.submit_error(outcome.stderr or outcome.stdout or f"exit status {outcome.status}")
    return FabricError(message, retryable=retryable)


def _said(outcome: batch.Outcome | None) -> str:
    if outcome is None:
        return "no answer"
    return (outcome.stderr.strip() or outcome.stdout.strip() or f"exit status {outcome.status}")[:300]

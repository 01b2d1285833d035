"""The PBS fabric (PBS Pro / OpenPBS, Torque): qsub, qstat and qdel on a login node over SSH.

Settings: the SSH ones (fabrics.ssh.settings) and

    {"flavor": "pro", "queue": "workq", "gpu_queue": "", "workdir": ".gridlane", "bin_dir": "",
     "submit_parallelism": 2, "connect_via": "direct"}

qsub reads no script from stdin on every PBS, so each script is written to
<workdir>/<workload id>.pbs and qsub run on it; qsub's output goes straight to
<workload id>.jobid beside it, so the job id is on disk the moment qsub prints it, and that is
where the look-up finds it. `place_many`, the dispatcher's, does both in one SSH command under the
submit lock: a workload whose record names a job is not submitted again. The job is named
g<14 hex digits of the workload id> (Torque keeps 15 characters). Status is `qstat -f` (with -x
on PBS Pro, for finished jobs) plus what the job recorded itself: its exit status and, when
Gridlane cancelled it, a marker (see render.py). Notebooks report their server as on Slurm
(fabrics.ssh.notebook), reached directly or through the login node (`connect_via`).

Run as the person, as on Slurm: a job whose spec names `run_as` goes through `sudo -n -u <user> qsub`
in their home, behind the guard of fabrics.ssh.runas (no root, no unknown user, no uid below `min_uid`).
Its script travels on qsub's stdin (`qsub /dev/stdin`, from a file in a folder only the submit account
enters, removed once read); its output and exit record land in the person's own .gridlane (so `workdir`
must be `.gridlane`, the folder the sudoers rule names); the submit account keeps `<job id>.owner` beside
its records, and poll reads the exit record, tail the output and qdel cancels, as that owner. The records
of what was submitted and the submit lock stay in the submit account's home: dispatch stays crash-safe.
"""

from __future__ import annotations

import logging
import posixpath
import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any
from uuid import UUID

from fabrics import templating
from fabrics.base import (
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
from fabrics.pbs import directives, native, parse, sampling
from fabrics.pbs import free as live
from fabrics.pbs.render import FLAVORS, Options, render
from fabrics.slurm import sampling as slurm_sampling
from fabrics.slurm.directives import DirectiveError
from fabrics.ssh import batch, notebook, runas
from fabrics.ssh.scripts import PATH, TEMPLATE_NAMES, WORD, split_template
from fabrics.ssh.settings import SshSettings
from fabrics.ssh.transport import Result, SshTransport, host_keys

log = logging.getLogger("gridlane.fabrics.pbs")
RESERVED = re.compile(r"^#PBS\s+-[Noe]\b")
JOB_ID = re.compile(r"^\d+(\.[A-Za-z0-9.-]+)?$")

# Reads the records the jobs left: `exit <id> <status>` and `cancelled <id>` lines. Builtins only.
_RECORDS = r"""
d=$1 guard=$2 floor=$3; shift 3
for id in "$@"; do
  if [ -f "$d/$id.exit" ]; then IFS= read -r code <"$d/$id.exit"; printf 'exit %s %s\n' "$id" "$code"
  elif [ -f "$d/$id.owner" ]; then
    IFS= read -r u <"$d/$id.owner"
    code=$(sh -c "$guard" gridlane-runas "$u" "$floor" "" tail -c 32 -- ".gridlane/$id.exit" 2>/dev/null) &&
      printf 'exit %s %s\n' "$id" "$code"
  fi
  if [ -f "$d/$id.cancelled" ]; then printf 'cancelled %s\n' "$id"; fi
done
"""
# A command run as the job's owner where the submit account recorded one (<id>.owner), else as itself.
_AS_OWNER = r"""
d=$1 id=$2 guard=$3 floor=$4; shift 4
if [ -f "$d/$id.owner" ]; then
  IFS= read -r u <"$d/$id.owner"
  exec sh -c "$guard" gridlane-runas "$u" "$floor" "" "$@"
fi
exec "$@"
"""
# Take a waiting job back: hold it (it can no longer start), then delete it only if it still has no execution
# host; one that started before the hold took is released and left (exit 3: nothing was cancelled).
_TAKE_BACK = r"""
id=$1 qhold=$2 qstat=$3 qdel=$4 qrls=$5
"$qhold" "$id" >/dev/null 2>&1 || exit 3
if "$qstat" -f "$id" 2>/dev/null | grep -Eq '^[[:space:]]*(exec_host = [^[:space:]]|job_state = [REX])'; then
  "$qrls" "$id" >/dev/null 2>&1
  exit 3
fi
exec "$qdel" "$id"
"""
# qsub as the person (the guarded argv after the first three words), its script on stdin, then the owner
# recorded under the job id. The script is written to a file in a folder only the submit account may enter,
# readable by its inode (0644): the person's qsub reaches it through the descriptor it is handed (/dev/stdin,
# which the Torque wrappers pass on to sbatch), never by its path; it is removed once qsub has read it.
_OWNED = r"""
u=$1 d=$2 f=$3; shift 3
{ mkdir -p -m 0700 -- "$d/run-as" && chmod 0700 -- "$d/run-as" && (umask 022 && cat >"$f"); } || exit 96
out=$("$@" <"$f"); rc=$?
rm -f -- "$f"
printf '%s\n' "$out"
id=$(printf '%s\n' "$out" | tail -n 1)
if [ "$rc" -eq 0 ] && [[ $id =~ ^[0-9]+(\.[A-Za-z0-9.-]+)?$ ]]; then
  rm -f -- "$d/$id.cancelled" "$d/$id.exit"  # an older job's, under an id come round again
  printf '%s\n' "$u" >"$d/$id.owner"
fi
exit "$rc"
"""
# qsub as the submit account itself, then the records an older job left under the same id removed.
_FRESH = r"""
d=$1; shift
out=$("$@"); rc=$?
printf '%s\n' "$out"
id=$(printf '%s\n' "$out" | tail -n 1)
if [ "$rc" -eq 0 ] && [[ $id =~ ^[0-9]+(\.[A-Za-z0-9.-]+)?$ ]]; then
  rm -f -- "$d/$id.cancelled" "$d/$id.exit" "$d/$id.owner"  # an older job's, under an id come round again
fi
exit "$rc"
"""
JOB_ID_RE = r"^[0-9]+(\.[A-Za-z0-9.-]+)?$"  # JOB_ID for bash, matched against what qsub recorded


class PbsFabric(Batched):
    # What does not fit now waits in the fabric's own queue, which says why (see portal/worker/capacity.py).
    queues_work = True

    def __init__(self, config: FabricConfig) -> None:
        self.check_settings(config.settings)
        self.config = config
        settings = config.settings
        self.options = Options(
            flavor=settings.get("flavor", "pro"),
            queue=settings.get("queue", ""),
            gpu_queue=settings.get("gpu_queue", ""),
            workdir=settings.get("workdir", ".gridlane"),
        )
        self.bin_dir: str = settings.get("bin_dir", "")
        self.min_uid: int = settings.get("min_uid", runas.DEFAULT_MIN_UID)
        self.parallel: int = settings.get("submit_parallelism", 2)
        self.ssh = SshTransport(SshSettings.from_settings(settings))
        self._queued: set[str] = set()  # jobs the last poll saw waiting; they have no output yet

    @classmethod
    def check_template(cls, template: str) -> None:
        templating.check(template, TEMPLATE_NAMES)
        templating.check_quoting(template)
        _, head, body = split_template(template)
        for line in head:
            if RESERVED.match(line.strip()):
                raise TemplateError(f"{line.strip()!r}: Gridlane names the job and places its output itself")
        for line in body.splitlines():
            if line.lstrip().startswith("#PBS"):
                raise TemplateError(f"{line.strip()!r} comes after a command, where qsub ignores it")

    @classmethod
    def check_settings(cls, settings: Mapping[str, Any]) -> None:
        host_keys(SshSettings.from_settings(settings).known_hosts)
        if settings.get("flavor", "pro") not in FLAVORS:
            raise ValueError(f"settings.flavor: one of {', '.join(FLAVORS)}")
        for key in ("queue", "gpu_queue"):
            value = settings.get(key, "")
            if not isinstance(value, str) or (value and not WORD.match(value)):
                raise ValueError(f"settings.{key}: a PBS queue name")
        for key in ("workdir", "bin_dir"):
            value = settings.get(key, "")
            if not isinstance(value, str) or (value and (not PATH.match(value) or ".." in value.split("/"))):
                raise ValueError(f"settings.{key}: a path without spaces or '..'")
        if not settings.get("workdir", ".gridlane"):
            raise ValueError("settings.workdir: where job scripts and output go, e.g. .gridlane")
        value = settings.get("submit_parallelism", 2)
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= 64:
            raise ValueError("settings.submit_parallelism: a whole number from 1 to 64")
        value = settings.get("min_uid", runas.DEFAULT_MIN_UID)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError("settings.min_uid: the lowest uid a job may run as (system accounts sit below), e.g. 1000")
        notebook.check_connect_via(settings)
        slurm_sampling.check_tools_path(settings.get("gpu_tools_path", ""))

    def render(self, job: JobSpec) -> str:
        if job.script:  # the user's own script: written as it is, Gridlane's options on qsub's command line
            self._native_options(job)
            return job.script
        if job.template:
            self.check_template(job.template)
        return render(job.template, job, self.options)

    def place_many(self, jobs: Sequence[JobSpec], *, fresh: Collection[UUID] = ()) -> dict[UUID, str | FabricError]:
        """Each job's PBS job id: the one its workload's record names, else a new one; one SSH command
        under the submit lock (a batch orphaned by a dropped connection ends first). The records are
        the only look-up, and cost nothing, so `fresh` changes nothing here."""
        refused: dict[UUID, str | FabricError] = {
            job.workload_id: error for job in jobs if (error := self._refused(job)) is not None
        }
        steps, keys, results = batch.keyed_steps([j for j in jobs if j.workload_id not in refused], self._qsub_step)
        results |= refused
        if not steps:
            return results
        try:
            outcomes, output = self._run_keyed(steps, retry=False)
        except FabricError as exc:
            return results | dict.fromkeys(keys, exc)
        for index, key in enumerate(keys):
            outcome = outcomes.get(index)
            if outcome is not None and outcome.found:
                job_id = _found(outcome)
                results[key] = job_id or FabricError(
                    f"unreadable job record: {outcome.stdout[:100]!r}", retryable=False
                )
            elif outcome is not None and outcome.status == 0 and (job_id := parse.submitted_id(outcome.stdout)):
                results[key] = job_id
            elif outcome is None:
                results[key] = FabricError(f"no answer from qsub for this job ({output.message()})", retryable=True)
            elif (refused_as := runas.error(outcome.stderr)) is not None:
                results[key] = refused_as  # never retried as anyone else
            else:
                said = (outcome.stderr.strip() or outcome.stdout.strip() or f"exit status {outcome.status}")[:300]
                transient = re.search(r"cannot connect|connection refused|timed out|try again|problem", said, re.I)
                results[key] = FabricError(f"PBS refused the job: {said}", retryable=bool(transient))
        return results

    def _native_options(self, job: JobSpec) -> list[str]:
        try:
            read = directives.read(job.script)
            directives.check_allowed(read.directives, extra=directives.OPTION_NAMES)  # NEVER, whatever got here
        except DirectiveError as error:
            raise TemplateError(str(error)) from error
        return native.options(job, read)

    def _qsub_step(self, job: JobSpec) -> batch.Step:
        """qsub of the job's script, written first where the Torque wrappers read it (no script on stdin)."""
        path = self._path(f"{job.workload_id}.pbs")
        account = ["-A", job.account] if job.account else []  # the team's project, charged in PBS's accounting
        account += tier_options(job.tier)  # before a native script's options: what the target forces wins
        if self._as_person(job):
            return self._person_step(job, account)
        fresh = ["bash", "-c", _FRESH, "fresh", self.options.workdir]
        if job.script:  # the user's own script, byte for byte; its output goes where it says
            argv = [*fresh, self._bin("qsub"), *account, *self._native_options(job), path]
            return self._step(job.workload_id, argv, job.script, write_to=path)
        script = self._script(job)
        argv = [*fresh, self._bin("qsub"), *account, "-o", "/dev/null", "-e", "/dev/null", path]
        return self._step(job.workload_id, argv, script, write_to=path)

    def _person_step(self, job: JobSpec, account: list[str]) -> batch.Step:
        """qsub as the person, the script on its stdin, behind the guard; the owner recorded by job id."""
        options = self._native_options(job) if job.script else ["-o", "/dev/null", "-e", "/dev/null"]
        qsub = [self._bin("qsub"), *account, *options, "/dev/stdin"]
        guarded = runas.argv(job.run_as, self.min_uid, qsub, workdir=self.options.workdir)
        script = job.script or self._script(job)
        held = self._path(f"run-as/{job.workload_id}.pbs")
        argv = ["bash", "-c", _OWNED, "owned", job.run_as, self.options.workdir, held, *guarded]
        return self._step(job.workload_id, argv, script)

    def _as_person(self, job: JobSpec) -> bool:
        return bool(job.run_as) and job.run_as != self.ssh.settings.user

    def _as_owner(self, external_id: str, argv: Sequence[str]) -> list[str]:
        """argv run as the job's recorded owner (a person's job), else as the submit account."""
        return ["bash", "-c", _AS_OWNER, "as-owner", self.options.workdir, external_id, runas.GUARD,
                str(self.min_uid), *argv]  # fmt: skip

    def _refused(self, job: JobSpec) -> FabricError | None:
        """A job this fabric must not submit: a run_as that is no POSIX name Gridlane runs as, a person's job
        where the workdir is not the one the sudoers rule names, or an account that is no PBS project name."""
        if job.run_as:
            try:
                runas.check_user(job.run_as)
            except ValueError as error:
                return FabricError(str(error), retryable=False)
        if self._as_person(job) and self.options.workdir != ".gridlane":
            return FabricError(
                f"jobs run as people write to their own .gridlane, which the sudoers rule names; this fabric's "
                f"workdir is {self.options.workdir!r}: IT sets it to .gridlane",
                retryable=False,
            )
        if job.account and not WORD.match(job.account):
            return FabricError(f"{job.account!r} is not a PBS project name", retryable=False)
        return None

    def submit_many(self, jobs: Sequence[JobSpec]) -> dict[UUID, str | FabricError]:
        """All the jobs in one SSH command (a workload whose record names a job is not submitted again)."""
        return self.place_many(jobs)

    def find_many(self, workload_ids: Sequence[UUID]) -> dict[UUID, str]:
        """The job ids earlier batches recorded for these workloads (written as qsub printed them)."""
        wanted = list(dict.fromkeys(workload_ids))
        if not wanted:
            return {}
        outcomes, output = self._run_keyed([self._step(wid) for wid in wanted], retry=True)
        found = {}
        for index, wid in enumerate(wanted):
            outcome = outcomes.get(index)
            if outcome is None:
                raise FabricError(f"the look-up did not report back ({output.message()})", retryable=True)
            if job_id := _found(outcome):
                found[wid] = job_id
        return found

    def poll(self, ids: Sequence[str]) -> dict[str, JobStatus]:
        statuses = {i: JobStatus(JobState.MISSING) for i in ids}
        wanted = [i for i in ids if JOB_ID.match(i)]
        if not wanted:
            return statuses
        history = ["-x"] if self.options.flavor == "pro" else []
        steps = [
            batch.Step(["env", "TZ=UTC", self._bin("qstat"), "-f", *history, *wanted]),
            batch.Step(
                ["bash", "-c", _RECORDS, "records", self.options.workdir, runas.GUARD, str(self.min_uid), *wanted]
            ),
        ]
        text, marker = batch.script(steps)
        outcomes = batch.parse(self.ssh.run_script(text, retry=True).stdout, marker, len(steps))
        qstat, records = outcomes.get(0), outcomes.get(1)
        if qstat is None or records is None:
            raise FabricError("qstat did not report back", retryable=True)
        jobs = {job.job_id: job for job in parse.qstat_full(qstat.stdout)}
        if not jobs and qstat.status != 0 and qstat.stderr.strip() and "Unknown Job" not in qstat.stderr:
            raise FabricError(f"the PBS server does not answer: {qstat.stderr.strip()[:300]}", retryable=True)
        exits: dict[str, int] = {}
        cancelled: set[str] = set()
        for line in records.stdout.splitlines():
            parts = line.split(" ")
            if len(parts) == 3 and parts[0] == "exit" and re.fullmatch(r"-?\d+", parts[2]):
                exits[parts[1]] = int(parts[2])
            elif len(parts) == 2 and parts[0] == "cancelled":
                cancelled.add(parts[1])
        for job_id in wanted:
            job = jobs.get(job_id) or jobs.get(job_id.split(".")[0])
            if job is not None:
                statuses[job_id] = job.status(exit_file=exits.get(job_id), cancelled=job_id in cancelled)
            elif job_id in exits or job_id in cancelled:
                # PBS forgot it (Torque's keep_completed, PBS Pro's job history), the job's records remain.
                statuses[job_id] = parse.finished_status(exits.get(job_id), cancelled=job_id in cancelled)
        self._queued = {i for i, s in statuses.items() if s.state is JobState.QUEUED}
        return statuses

    def reprioritise(self, external_id: str, tier: TierHints) -> bool:
        """A queued job's new tier inside PBS too: `qalter -p <priority> <id>`, run as its owner (as qdel is).
        False when the tier asks nothing of PBS."""
        options = tier_options(tier)
        if not options:
            return False
        if not JOB_ID.match(external_id):
            raise FabricError(f"{external_id!r} is no PBS job id", retryable=False)
        result = self.ssh.run(self._as_owner(external_id, [self._bin("qalter"), *options, external_id]), retry=True)
        if not result.ok:
            refused = runas.error(result.stderr)
            raise refused or FabricError(f"qalter {' '.join(options)} refused: {result.message()}", retryable=False)
        log.info("PBS job %s on %s: qalter %s", external_id, self.config.name, " ".join(options))
        return True

    def cancel(self, external_id: str) -> None:
        """qdel, then a marker that tells poll the job was cancelled (PBS alone may not say so)."""
        if not JOB_ID.match(external_id):
            return
        marker = self._path(f"{external_id}.cancelled")
        qdel = self._as_owner(external_id, [self._bin("qdel"), external_id])
        result = self.ssh.run(["bash", "-c", '"${@:2}" && touch "$1"', "cancel", marker, *qdel])
        if result.ok or re.search(r"Unknown Job|invalid.*state|completed|finished", result.message(), re.I):
            return
        if (refused := runas.error(result.stderr)) is not None:
            raise refused
        if result.status == 1 and not result.stderr.strip():
            return  # Slurm's qdel wrapper says nothing for a job that has already ended
        raise FabricError(f"qdel {external_id} failed: {result.message()}", retryable=True)

    def take_back(self, external_id: str) -> None:
        """Cancel the job only while it still waits: `qhold` first (a held job cannot start; PBS refuses to hold a
        running one, the Torque wrappers set a pending job's priority to 0), then, only if qstat still shows it
        without an execution host, `qdel` and the cancel marker; a job that started meanwhile is released from
        the hold and runs on. All as its owner, in one round trip; the caller polls to learn which happened."""
        if not JOB_ID.match(external_id):
            return
        marker = self._path(f"{external_id}.cancelled")
        script = self._as_owner(
            external_id,
            ["bash", "-c", _TAKE_BACK, "take-back", external_id, self._bin("qhold"), self._bin("qstat"),
             self._bin("qdel"), self._bin("qrls")],
        )  # fmt: skip
        result = self.ssh.run(["bash", "-c", '"${@:2}" && touch "$1"', "take-back", marker, *script])
        if result.ok or result.status == 3 or re.search(r"Unknown Job|completed|finished", result.message(), re.I):
            return  # taken back; or it started (3) or ended first: poll says which
        if (refused := runas.error(result.stderr)) is not None:
            raise refused
        raise FabricError(f"taking back {external_id} failed: {result.message()}", retryable=True)

    def tail(self, external_id: str, max_bytes: int = 16_384) -> str:
        if not JOB_ID.match(external_id) or external_id in self._queued:
            return ""  # a job that has not started has written nothing: no round trip for it
        steps = [  # as the owner, where a person's job wrote them in their own .gridlane
            batch.Step(
                self._as_owner(external_id, ["tail", "-c", str(max_bytes // 2), "--", self._path(f"{external_id}.err")])
            ),
            batch.Step(
                self._as_owner(external_id, ["tail", "-c", str(max_bytes), "--", self._path(f"{external_id}.out")])
            ),
        ]
        text, marker = batch.script(steps)
        outcomes = batch.parse(self.ssh.run_script(text, retry=True).stdout, marker, len(steps))
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
        """The GPU sampler beside a running job on every node, as its owner, where this PBS is Slurm's Torque
        wrappers (fabrics.pbs.sampling); FabricError naming what is missing elsewhere (the job is never touched)."""
        try:
            tools = self.config.settings.get("gpu_tools_path", "")
            srun = self._bin("srun")
            step = slurm_sampling.srun_argv(srun, external_id, nodes, slurm_sampling.with_tools(env, tools))
        except ValueError as error:
            raise FabricError(str(error), retryable=False) from error
        launch = slurm_sampling.launch_argv(self._as_owner(external_id, step))
        result = self.ssh.run(sampling.probe_argv(self._bin("qsub"), srun, launch), stdin=secret + "\n")
        if not result.ok or slurm_sampling.STARTED not in result.stdout:
            refused = runas.error(result.stderr)
            # A step that ended at once (the launcher's 3) may start later, once the job's own processes run.
            died = result.status == slurm_sampling.ENDED_AT_ONCE
            raise refused or FabricError(slurm_sampling.reason(result.stderr, result.status), retryable=died)

    def capacity(self) -> Capacity:
        """What IT declared, healthy while the PBS server answers `qstat -Q`."""
        try:
            result: Result = self.ssh.run(live.command(self._bin("qstat"), self._bin("pbsnodes")), retry=True)
        except FabricError as exc:
            return Capacity(self.config.capacity, healthy=False, detail=str(exc))
        if not result.ok:
            return Capacity(self.config.capacity, healthy=False, detail=f"qstat -Q failed: {result.message()}")
        free = live.read(live.split(result.stdout)[1]) if live.SEPARATOR in result.stdout else None
        return Capacity(self.config.capacity, healthy=True, detail="the PBS server answers", free=free)

    def close(self) -> None:
        self.ssh.close()

    def _bin(self, name: str) -> str:
        return posixpath.join(self.bin_dir, name) if self.bin_dir else name

    def _path(self, name: str) -> str:
        return posixpath.join(self.options.workdir, name)

    def _step(
        self, wid: UUID, argv: Sequence[str] = (), script: str | None = None, write_to: str | None = None
    ) -> batch.Step:
        """The keyed step for a workload: qsub on its script, or (no argv) only its look-up."""
        record = self._path(f"{wid}.jobid")
        return batch.Step(argv, stdin=script, key=f"gridlane:{wid}", record=record, write_to=write_to)

    def _run_keyed(self, steps: list[batch.Step], *, retry: bool) -> tuple[dict[int, batch.Outcome], Result]:
        text, marker = batch.script(
            steps,
            parallel=self.parallel,
            setup=[["mkdir", "-p", "--", self.options.workdir]],
            lock=self._path(".submit.lock"),
            value=JOB_ID_RE,
        )
        output = self.ssh.run_script(text, retry=retry)
        return batch.parse(output.stdout, marker, len(steps)), output

    def _script(self, job: JobSpec) -> str:
        """The script as sent: as `render`, with its secrets."""
        if job.template:
            self.check_template(job.template)
        return render(job.template, job, self.options, reveal=True)


def _found(outcome: batch.Outcome) -> str | None:
    """The job id an earlier batch recorded (the last line qsub printed, as it printed it)."""
    values = [value for value in outcome.values if JOB_ID.match(value)]
    return values[-1] if values else None


def tier_options(tier: TierHints) -> list[str]:
    """qsub's (and qalter's) -p for a priority tier: PBS's own priority, -1024 to 1023 (checked when saved, and
    again here)."""
    if tier.pbs_priority is None:
        return []
    priority = int(tier.pbs_priority)
    if not -1024 <= priority <= 1023:
        raise TemplateError(f"PBS priorities go from -1024 to 1023, not {priority}")
    return ["-p", str(priority)]

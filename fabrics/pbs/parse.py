"""What qstat and qsub print, read into values. Pure (but for a warning logged where a job's hosts do not fit
in a workload's host list); tested on `qstat -f` output of PBS Pro and Torque.

`qstat -f` prints a block per job:

    Job Id: 7013474.pbs
        Job_Name = g3f2a9c0d1e4b57
        job_state = R
        Resource_List.select = 1:ncpus=4:mem=8gb:ngpus=1:gpu_type=RTX6000:mpiprocs=
    \t4:ompthreads=1

Attributes are `name = value`; a long value goes on in lines that start with a tab. PBS Pro says
Exit_status and keeps finished jobs (state F) for `qstat -x`; Torque says exit_status and shows
finished jobs as C for keep_completed seconds. Times are ctime()-style in the client's zone
(the fabric runs qstat with TZ=UTC). Slurm's Torque wrapper prints the same shape, indented by tabs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime

from fabrics import hostlist
from fabrics.base import JobState, JobStatus

log = logging.getLogger("gridlane.pbs")

_ATTRIBUTE = re.compile(r"^([A-Za-z_][A-Za-z0-9_.]*) = ?(.*)$")
_HEADER = re.compile(r"^Job Id:\s*(\S+)")

STATES = {
    "Q": JobState.QUEUED,
    "H": JobState.QUEUED,  # held
    "W": JobState.QUEUED,  # waiting for its start time
    "T": JobState.QUEUED,  # in transit between servers
    "M": JobState.QUEUED,  # moved to another server
    "R": JobState.RUNNING,
    "E": JobState.RUNNING,  # exiting: still cleaning up
    "S": JobState.RUNNING,  # suspended
    "U": JobState.RUNNING,  # suspended while the workstation is busy
    "B": JobState.RUNNING,  # an array job that has started
}
FINISHED = frozenset({"F", "C", "X"})  # PBS Pro history, Torque completed, a finished subjob
WAITING = {"H": "Held by PBS (qhold or a dependency); it starts once released.", "W": "Waiting for its start time."}
# PBS Pro's negative exit statuses (JOB_EXEC_* in OpenPBS's job.h): PBS itself stopped or could not run the job.
KILLED_FOR = {
    -24: "it used more CPUs than it asked for",
    -25: "it used more CPUs than it asked for",
    -26: "it used more virtual memory than it asked for",
    -27: "it used more memory than it asked for",
    -28: "it used more CPU time than it asked for",
}
WALLTIME = -29
HOST_CHARS = 200  # what a workload keeps of the hosts its job runs on (Workload.host)


@dataclass(frozen=True)
class PbsJob:
    job_id: str
    attributes: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.attributes.get("Job_Name", "")

    @property
    def state(self) -> str:
        return self.attributes.get("job_state", "").strip()

    @property
    def exit_status(self) -> int | None:
        value = self.attributes.get("Exit_status", self.attributes.get("exit_status", "")).strip()
        return int(value) if re.fullmatch(r"-?\d+", value) else None

    @property
    def hosts(self) -> list[str]:
        """Every execution host, once each, in PBS's order (the first runs the job's script):
        `node1/8*8+node2/0*8` (Pro) or `n1/0+n1/1+n2/0-1` (Torque) -> [node1, node2] ([n1, n2]), names as PBS
        spells them (`node1.cluster.org` stays so). A name that is no host name is left out."""
        found: list[str] = []
        for chunk in self.attributes.get("exec_host", "").split("+"):
            name = chunk.split("/", 1)[0].strip()
            if hostlist.NAME.match(name) and name not in found:
                found.append(name)
        return found

    @property
    def host(self) -> str:
        """Every execution host as one node list (fabrics.hostlist: `node1,node2`, or `node[1-40]` where the names
        alone would pass HOST_CHARS). Where even that is too long, the leading hosts that fit, said in the log."""
        hosts = self.hosts
        text, left_out = hostlist.fitting(hosts, HOST_CHARS)
        if left_out:
            log.warning("PBS job %s runs on %d hosts; Gridlane keeps the first %d (%d characters at most)",
                        self.job_id, len(hosts), len(hosts) - left_out, HOST_CHARS)  # fmt: skip
        return text

    def time(self, *names: str) -> datetime | None:
        for name in names:
            parsed = parse_time(self.attributes.get(name, ""))
            if parsed is not None:
                return parsed
        return None

    def status(self, *, exit_file: int | None = None, cancelled: bool = False) -> JobStatus:
        """Status from qstat's view and what the job recorded itself (its exit file, a cancel marker)."""
        started = self.time("stime", "start_time")
        if self.state in FINISHED:
            finished = self.time("obittime", "comp_time", "mtime")
            code = self.exit_status if self.exit_status is not None else exit_file
            return finished_status(code, cancelled=cancelled, host=self.host, started=started, finished=finished)
        state = STATES.get(self.state, JobState.UNDETERMINED)
        if state is JobState.QUEUED:
            comment = self.attributes.get("comment", "").strip()
            reason = WAITING.get(self.state) or (f"PBS says: {comment}" if comment else "Queued by PBS.")
            return JobStatus(state, reason=reason, estimated_start=self.time("estimated.start_time"))
        if state is JobState.UNDETERMINED:
            return JobStatus(state, reason=f"PBS reports the state {self.state or '(none)'}")
        return JobStatus(state, host=self.host, started_at=started)


def finished_status(
    code: int | None,
    *,
    cancelled: bool = False,
    host: str = "",
    started: datetime | None = None,
    finished: datetime | None = None,
) -> JobStatus:
    """A finished job's status from its exit status: 256 + N means killed by signal N (Pro and Torque)."""
    exit_code = 128 + code - 256 if code is not None and code > 256 else code
    if cancelled:
        state, reason = JobState.CANCELLED, ""
    elif code is None:
        state, reason = JobState.FAILED, "PBS kept no exit status for it"
    elif code == WALLTIME:
        state, reason = JobState.TIMED_OUT, "PBS stopped it at its walltime"
    elif code < 0:
        state, reason = JobState.FAILED, KILLED_FOR.get(code, f"PBS could not run it (exit status {code})")
    else:
        state, reason = (JobState.SUCCEEDED if code == 0 else JobState.FAILED), ""
    return JobStatus(state, exit_code=exit_code, host=host, started_at=started, finished_at=finished, reason=reason)


def qstat_full(text: str) -> list[PbsJob]:
    """Every job block in `qstat -f` output."""
    jobs: list[PbsJob] = []
    job_id: str | None = None
    attributes: dict[str, str] = {}
    last = ""
    for line in text.splitlines():
        header = _HEADER.match(line)
        if header:
            if job_id is not None:
                jobs.append(PbsJob(job_id, attributes))
            job_id, attributes, last = header.group(1), {}, ""
            continue
        if job_id is None or not line.strip():
            continue
        attribute = _ATTRIBUTE.match(line.strip())
        if attribute and " = " in line:  # PBS wraps long values without " = " in the lines that go on
            last = attribute.group(1)
            attributes[last] = attribute.group(2)
        elif last:
            attributes[last] += line.strip()  # a wrapped value goes on where it broke
    if job_id is not None:
        jobs.append(PbsJob(job_id, attributes))
    return jobs


def parse_time(text: str) -> datetime | None:
    """`Mon Feb 13 19:00:07 2023` (ctime, UTC here) -> an aware datetime; None for anything else."""
    text = " ".join(text.split())
    try:
        return datetime.strptime(text, "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC)
    except ValueError:
        return None


def submitted_id(stdout: str) -> str | None:
    """qsub prints the new job's id, e.g. `1234.pbsserver` (Pro), `1234.head.example.org` (Torque)."""
    for line in reversed(stdout.strip().splitlines()):
        if re.fullmatch(r"\d+(\.[A-Za-z0-9.-]+)?", line.strip()):
            return line.strip()
    return None

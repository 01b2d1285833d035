"""GPU utilisation from inside a job: a sampler started beside the user's command, and its output's reader. Pure.

No fabric can tell how busy a job's GPUs are (Slurm and PBS count allocations), so the job says, as a
notebook's job says where its server listens (fabrics.ssh.notebook): the portal puts a samples URL, the
interval and the workload's secret into the job's environment; the sampler, python3 with the standard
library only, runs `nvidia-smi` every interval while the job's shell lives and POSTs its output as it
is, several readings at a time (GRIDLANE_SAMPLE_BATCH, each with its age); the portal reads it strictly
(`parse`). Where the node has no `nvidia-smi` (or no python3) no
sampler starts, and the workload has no utilisation data: "unknown", never 0 and never 100.

The sampler leaves the job alone: it reads nothing, writes to /dev/null, is started detached (a bare
`wait` in a template does not wait for it), and exits within a second of the job's shell (`GL_WATCH`).
Slurm and PBS: `preamble()` in the script, before the template's body. Local: the supervisor starts
it beside job.sh and stops it when job.sh ends.
"""

from __future__ import annotations

import inspect
import shlex
from dataclasses import dataclass

from fabrics import cputime, nvml
from fabrics.ssh.notebook import ENDPOINT_SECRET_ENV

SECRET_ENV = ENDPOINT_SECRET_ENV  # the workload's secret: the one its notebook callback reports with

SAMPLES_URL_ENV = "GRIDLANE_SAMPLES_URL"  # where the job posts its samples
SAMPLE_SECONDS_ENV = "GRIDLANE_SAMPLE_SECONDS"  # how often it samples
SAMPLE_BATCH_ENV = "GRIDLANE_SAMPLE_BATCH"  # how many readings it posts at a time
TOOLS_ENV = "GRIDLANE_GPU_TOOLS_PATH"  # folders searched for nvidia-smi before PATH (a fabric's gpu_tools_path)
WATCH_ENV = "GL_WATCH"  # the pid of the job's shell: the sampler ends with it
QUERY = ["--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
MAX_GPUS = 64  # a node with more GPUs than this is not a node
MAX_BODY = 8192  # bytes of nvidia-smi output sent (64 lines of "63, 100, 143771" fit many times over)
MAX_MEMORY_MIB = 4 * 1024 * 1024  # 4 TiB: no GPU holds more
MAX_READINGS = 120  # readings a post may carry (the portal's limit too): an hour's at 30 s
MAX_NODE = 64  # characters of a node's name kept

# Run by the job with python3 (standard library only). It reads every interval and posts its readings `batch`
# at a time with their ages (the first at once, the rest when the job's shell ends). A 404 means the secret no
# longer speaks for the workload (a later run took over), a 409 that it no longer runs: it stops. A 400 drops
# the readings; anything else (429, a portal away) keeps them for the next post, the newest MAX_READINGS.
# Its GPUs are read through NVML where the node has pynvml (fabrics.nvml: MIG slices' utilisation), else with
# nvidia-smi. With each reading goes the job's CPU time on the node (fabrics.cputime, whose source leads the
# script), so that a job's CPUs are judged too, a CPU-only job's included; a GPU job that can read neither NVML nor
# nvidia-smi ends at once, saying so.
# It reads only the job's GPUs (`job_gpus`: the step's, else the job's, else CUDA_VISIBLE_DEVICES; all the node
# shows where none of them says) and names its node. Beside Gridlane's own script it ends with the job's shell
# (GL_WATCH); as a step of a native job (fabrics.slurm.sampling) it has no shell to watch and ends with the
# job's allocation, and its secret comes on stdin rather than on a command line.
SAMPLER = (
    inspect.getsource(cputime)
    + inspect.getsource(nvml).split("from typing import Any", 1)[1]
    + f"""\
import json, os, shutil, socket, subprocess, sys, time, urllib.error, urllib.parse, urllib.request
watch = int(os.environ.get("{WATCH_ENV}") or 0)
every = max(1.0, float(os.environ.get("{SAMPLE_SECONDS_ENV}") or 30))
batch = max(1, int(os.environ.get("{SAMPLE_BATCH_ENV}") or 1))
node = socket.gethostname().split(".")[0][:{MAX_NODE}]
smi = shutil.which("nvidia-smi", path=os.pathsep.join(
    p for p in (os.environ.get("{TOOLS_ENV}"), os.environ.get("PATH", os.defpath)) if p))
job_id = os.environ.get("SLURM_JOB_ID", "")
own_step = "" if watch else os.environ.get("SLURM_STEP_ID", "")
def job_gpus():
    for name in ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"):
        value = os.environ.get(name, "").strip()
        if value and all(part.strip().isdigit() for part in value.split(",")):
            return {{int(part) for part in value.split(",")}}
    return None
gpus = job_gpus()
if smi is None and gpus and nvml_text(gpus) is None:
    print("gridlane-sampler: no nvidia-smi on " + node + " to read the job's GPUs", file=sys.stderr)
    sys.exit(3)
if smi is None and job_cpu_seconds(job_id, own_step) is None:
    print("gridlane-sampler: nothing to read on " + node + ": no nvidia-smi, no CPU time of the job", file=sys.stderr)
    sys.exit(3)
def mine(text):
    if gpus is None:
        return text
    return "".join(line + "\\n" for line in text.splitlines()
                   if line.split(",")[0].strip().isdigit() and int(line.split(",")[0]) in gpus)
secret = os.environ.get("{SECRET_ENV}") or sys.stdin.readline().strip()
headers = {{"Content-Type": "application/json", "Authorization": "Bearer " + secret}}
url = os.environ["{SAMPLES_URL_ENV}"] + "?node=" + urllib.parse.quote(node)
kept = []
def alive():
    if not watch:
        return True
    try:
        os.kill(watch, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
def send():
    now = time.monotonic()
    readings = [dict(reading, age=int(now - at), node=node) for at, reading in kept]
    request = urllib.request.Request(url, data=json.dumps({{"readings": readings}}).encode(), method="POST",
                                     headers=headers)
    try:
        urllib.request.urlopen(request, timeout=10).close()
    except urllib.error.HTTPError as error:
        if error.code in (404, 409):
            sys.exit(0)
        if error.code != 400:
            del kept[:-{MAX_READINGS}]
            return
    except Exception:
        del kept[:-{MAX_READINGS}]
        return
    kept.clear()
due, posted = time.monotonic(), 0
while alive():
    if time.monotonic() >= due:
        due = time.monotonic() + every
        reading = {{}}
        try:
            cpu = job_cpu_seconds(job_id, own_step)
            if cpu is not None:
                reading["cpu_seconds"] = round(cpu, 3)
        except Exception:
            pass
        try:
            through_nvml = nvml_text(gpus)
            if through_nvml:
                reading["nvidia_smi"] = through_nvml[:{MAX_BODY}]
        except Exception:
            pass
        try:
            if smi is not None and "nvidia_smi" not in reading:
                out = subprocess.run([smi, *{QUERY!r}], stdin=subprocess.DEVNULL, capture_output=True,
                                     timeout=20).stdout
                text = mine(out[:{MAX_BODY}].decode("utf-8", "replace"))
                if text:
                    reading["nvidia_smi"] = text
        except Exception:
            pass
        if reading:
            kept.append((time.monotonic(), reading))
        if kept and (posted == 0 or len(kept) >= batch):
            send()
            posted += 1
    time.sleep(1)
if kept:
    send()
"""
)

# Slurm and PBS scripts: fixed text, nothing of the user's in it. The double fork detaches the sampler from
# the job's shell; $$ is still that shell's pid inside ( ... ), and `exec` in the template keeps it.
PREAMBLE = f"""\
# Gridlane's GPU sampler (where the node has nvidia-smi): beside the job, its output to /dev/null.
_gl_sampler={shlex.quote(SAMPLER)}
if [ -n "${{{SAMPLES_URL_ENV}:-}}" ] && command -v nvidia-smi >/dev/null 2>&1 \\
    && command -v "${{GRIDLANE_PYTHON:-python3}}" >/dev/null 2>&1; then
  ( {WATCH_ENV}=$$ "${{GRIDLANE_PYTHON:-python3}}" -c "$_gl_sampler" </dev/null >/dev/null 2>&1 & )
fi
unset _gl_sampler
"""


@dataclass(frozen=True)
class Reading:
    """One GPU at one moment: its index on the node, utilisation (0-100) and memory in use (MiB); None
    where nvidia-smi says [N/A] (a MIG instance has no utilisation of its own)."""

    index: int
    utilisation: int | None
    memory_mib: int | None


def preamble(sampled: bool) -> list[str]:
    """The sampler's lines for a batch script, when the job is sampled (else nothing)."""
    return [PREAMBLE] if sampled else []


def parse(text: str) -> list[Reading]:
    """The readings in `nvidia-smi --query-gpu=index,utilization.gpu,memory.used --format=csv,noheader,nounits`
    output, one line per GPU: `0, 37, 10240`. ValueError for anything else: a wrong number of fields, a
    number out of range, a repeated index, no GPU at all, or more than MAX_GPUS."""
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    if not lines:
        raise ValueError("no GPU in the output")
    if len(lines) > MAX_GPUS:
        raise ValueError(f"more than {MAX_GPUS} GPUs")
    readings = [_reading(number, line) for number, line in enumerate(lines, 1)]
    if len({r.index for r in readings}) != len(readings):
        raise ValueError("a GPU index appears twice")
    return readings


def _reading(number: int, line: str) -> Reading:
    fields = [f.strip() for f in line.split(",")]
    if len(fields) != 3:
        raise ValueError(f"line {number}: want index, utilization.gpu, memory.used")
    index = _number(fields[0], number, "index", MAX_GPUS - 1)
    if index is None:
        raise ValueError(f"line {number}: the index must be a number")
    utilisation = _number(fields[1], number, "utilization.gpu", 100)
    memory = _number(fields[2], number, "memory.used", MAX_MEMORY_MIB)
    return Reading(index, utilisation, memory)


def _number(field: str, number: int, name: str, highest: int) -> int | None:
    # nvidia-smi prints "[N/A]" (or "[Not Supported]") where a device cannot say.
    if field.startswith("[") and field.endswith("]"):
        return None
    if not field.isascii() or not field.isdigit() or len(field) > 9:
        raise ValueError(f"line {number}: {name} must be a whole number")
    value = int(field)
    if value > highest:
        raise ValueError(f"line {number}: {name} must be at most {highest}")
    return value

"""Many commands in one SSH round trip: a bash script that runs them and reports each one. Pure.

An SSH command costs about 50 ms before it does anything, so submitting jobs one command at a
time cannot keep up with a scheduler that accepts a job in a few milliseconds. `script` turns
steps (argv, optional stdin) into one script; each step's input travels in a quoted here-document,
so it reaches the command byte for byte and is never read by the shell. Steps run up to
`parallel` at a time; their output is kept in files and reported at the end, one line per step:

    gridlane-<nonce> <index> <exit status> <stdout>\t<stderr>

with backslash, newline, carriage return and tab escaped. Lines without the marker (a login
shell's chatter) are ignored, and a step that did not report (the connection dropped) is absent.
If the connection drops, the script still runs to its end on the login node: every step either
ran or did not, and the caller looks for what ran (by tag) before it tries again.

Submissions are *keyed* steps: find and submit in one script. Under the lock, `lookups` (say, one
squeue) print `KEY VALUE` lines; a keyed step whose key they name, or whose record file already
holds a value, is not run and reports `found` with those values, a line each. Otherwise its
command runs with stdout going straight to the record (the job id is on disk the moment the
submitter prints it) and reports status 0 when the record then holds a value, else 1. A look-up
that fails ends the script before any step runs, with one `lookup` line instead.

A *group* step submits several keyed members with one command (a Slurm array: one sbatch for many
elements). Each member is looked up as a keyed step is; those nobody found are the group's tasks, and
the group's command runs once, its `--array=@tasks` argument replaced by their indexes (`0-4,7`).
Before it runs, each member's record gets a pointer beside it (`<record>.group`: the group's key,
its record and the member's task); afterwards the member's record holds `<job id>_<task>`. A look-up
follows a pointer when a record holds nothing yet: to the group's record (the job id is on disk the
moment the submitter prints it) or to a look-up line of the group's key naming `<job id>_<task>`. So
a script that died between the submission and the members' records still leaves every member
findable, and a later group with another subset of members submits only those still without a job.
Members report on slots of their own: a group of n members takes n report lines, a plain step one.
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from fabrics.base import FabricError, JobSpec, TemplateError

LOCK_WAIT_S = 300  # a batch of thousands of sbatch calls ends well within this
KEY = re.compile(r"[A-Za-z0-9._:+-]+")  # what a key may be (lookup lines with other keys are ignored)


TASKS = "--array=@tasks"  # in a group step's argv: replaced by the indexes of the members it submits


@dataclass(frozen=True)
class Member:
    """One of a group step's keyed members: its own key and record, and its index in the group's array."""

    key: str
    record: str
    task: int


@dataclass(frozen=True)
class Step:
    argv: Sequence[str]  # a keyed step may have none: then it is only looked up (find without submit)
    stdin: str | None = None  # given to the command on stdin
    key: str | None = None  # a submission's tag: not run when a lookup or its record already names a value
    record: str | None = None  # keyed steps: the file the command's stdout goes to, read by later look-ups
    write_to: str | None = None  # keyed steps: stdin is written to this file first, and argv runs without it
    members: Sequence[Member] = ()  # a group step: the members it submits together (argv holds TASKS once)

    @property
    def slots(self) -> int:
        """Report lines the step takes: one per member for a group, else one."""
        return len(self.members) or 1


@dataclass(frozen=True)
class Outcome:
    status: int
    stdout: str
    stderr: str
    found: bool = False  # a keyed step that did not run: stdout lists the values found for its key

    @property
    def values(self) -> list[str]:
        """What was found for a keyed step's key, or what it recorded, a value a line."""
        return [line.strip() for line in self.stdout.splitlines() if line.strip()]


@dataclass(frozen=True)
class Report:
    outcomes: dict[int, Outcome] = field(default_factory=dict)  # by step index; steps that did not report are absent
    lookup_failed: Outcome | None = None  # a look-up failed: no step ran


_RUNNER = r"""set +e
# Each step leaves small files: in memory (/dev/shm) where the login node has it, as on Linux.
_gl_dir=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d) || exit 90
trap 'rm -rf "$_gl_dir"' EXIT
_gl_running=0
declare -A _gl_have=()  # KEY -> the values look-ups found for it, a line each
_gl_rec=() _gl_ran=() _gl_found=()  # keyed steps by index: their record, whether they ran, what was found
_gl_step() {  # INDEX ARGV...: run ARGV with this function's stdin
  local i=$1
  shift
  "$@" >"$_gl_dir/$i.o" 2>"$_gl_dir/$i.e"
  echo "$?" >"$_gl_dir/$i.r"
}
_gl_lookup() {  # MARKER ARGV...: each `KEY VALUE` line ARGV prints is a value for KEY; a failure ends the script
  local m=$1 k v rest o e rc
  shift
  "$@" </dev/null >"$_gl_dir/lookup.o" 2>"$_gl_dir/lookup.e"
  rc=$?
  if [ "$rc" -ne 0 ]; then
    IFS= read -r -d '' o <"$_gl_dir/lookup.o"
    IFS= read -r -d '' e <"$_gl_dir/lookup.e"
    _gl_escape o "$o"
    _gl_escape e "$e"
    printf '%s lookup %s %s\t%s\n' "$m" "$rc" "$o" "$e"
    exit 0
  fi
  while read -r k v rest; do
    if [ -z "$rest" ] && [ -n "$v" ] && [[ $k =~ ^[A-Za-z0-9._:+-]+$ ]]; then _gl_have[$k]+="$v"$'\n'; fi
  done <"$_gl_dir/lookup.o"
}
_gl_recorded() {  # FILE: true when the last non-empty line of FILE is a value (it is then in _gl_line)
  local next
  _gl_line=
  [ -s "$1" ] || return 1
  while IFS= read -r next || [ -n "$next" ]; do [ -n "$next" ] && _gl_line=$next; done <"$1"
  [[ $_gl_line =~ $_gl_value ]]
}
_gl_known() {  # INDEX KEY RECORD: true when KEY has a job (its values then in _gl_found): a look-up names it, its
  local found=${_gl_have[$2]-} gkey grec task v  # record holds one, or its group's pointer leads to one
  _gl_rec[$1]=$3
  if _gl_recorded "$3"; then found+="$_gl_line"$'\n'; fi
  if [ -z "$found" ] && [ -s "$3.group" ] && read -r gkey grec task <"$3.group"; then
    for v in ${_gl_have[$gkey]-}; do [[ $v == *_"$task" ]] && found+="$v"$'\n'; done  # squeue -r: 42_5
    if [ -z "$found" ] && _gl_recorded "$grec"; then found="${_gl_line%%;*}_$task"$'\n'; fi
  fi
  _gl_found[$1]=$found
  [ -n "$found" ]
}
_gl_todo() {  # INDEX KEY RECORD [run]: true when the step is to run, false when its key already has a value
  if _gl_known "$1" "$2" "$3" || [ "${4-}" != run ]; then return 1; fi
  unset '_gl_found[$1]'
  _gl_ran[$1]=1
}
_gl_member() {  # INDEX KEY RECORD TASK: a group's member; one nobody found joins the group's tasks
  _gl_known "$1" "$2" "$3" && return
  unset '_gl_found[$1]'
  _gl_ran[$1]=1
  _gl_gslots+=("$1")
  _gl_gtasks+=("$4")
}
_gl_group() {  # KEY RECORD: true when members joined: each one's pointer is written, and _gl_array names their tasks
  local i j t start= prev=
  [ "${#_gl_gslots[@]}" -gt 0 ] || return 1
  _gl_array=
  for j in "${!_gl_gslots[@]}"; do
    i=${_gl_gslots[$j]} t=${_gl_gtasks[$j]}
    if ! printf '%s %s %s\n' "$1" "$2" "$t" >"${_gl_rec[$i]}.group" 2>"$_gl_dir/$i.e"; then
      for i in "${_gl_gslots[@]}"; do
        echo "gridlane: cannot record the group beside ${_gl_rec[$i]}" >>"$_gl_dir/$i.e"
      done
      return 1  # no pointer, no submission: a job nobody could find again is never started
    fi
    if [ -n "$prev" ] && [ "$t" -eq $((prev + 1)) ]; then prev=$t; continue; fi
    if [ -n "$start" ]; then
      _gl_array+=$start
      [ "$prev" = "$start" ] || _gl_array+=-$prev
      _gl_array+=,
    fi
    start=$t prev=$t
  done
  _gl_array+=$start
  [ "$prev" = "$start" ] || _gl_array+=-$prev
}
_gl_tasks() {  # ARGV...: ARGV with its --array=@tasks as --array=<the group's tasks>, run with this stdin
  local a=() x
  for x in "$@"; do
    [ "$x" = "--array=@tasks" ] && x=--array=$_gl_array
    a+=("$x")
  done
  "${a[@]}"
}
_gl_spread() {  # GROUP RECORD: after the group's command: each member's record <job id>_<task>, else its error
  local id= j i
  _gl_recorded "$2" && id=${_gl_line%%;*}
  for j in "${!_gl_gslots[@]}"; do
    i=${_gl_gslots[$j]}
    if [ -n "$id" ]; then
      printf '%s_%s\n' "$id" "${_gl_gtasks[$j]}" >"${_gl_rec[$i]}"
    else
      cat -- "$_gl_dir/g$1.e" "$2" >"$_gl_dir/$i.e" 2>/dev/null
    fi
  done
}
_gl_write() {  # FILE INDEX: this function's stdin into FILE, readable by the account only (a script may hold
  local body  # a notebook's secret); an error goes to the step's stderr
  IFS= read -r -d '' body
  (umask 077 && printf '%s' "$body" >"$1") 2>"$_gl_dir/$2.e"
}
_gl_throttle() {  # after starting a step in the background: wait while PARALLEL run
  _gl_running=$((_gl_running + 1))
  if [ "$_gl_running" -ge "$1" ]; then
    wait -n
    _gl_running=$((_gl_running - 1))
  fi
}
_gl_escape() {  # VAR TEXT: VAR = TEXT on one line (backslash, newline, carriage return and tab escaped)
  local s=${2//\\/\\\\}
  s=${s//$'\n'/\\n}
  s=${s//$'\r'/\\r}
  printf -v "$1" '%s' "${s//$'\t'/\\t}"
}
_gl_report() {  # MARKER COUNT: one line per step, with builtins only (no process per step)
  local i=0 r o e
  while [ "$i" -lt "$2" ]; do
    r=-1 o= e=
    if [ -n "${_gl_found[$i]+x}" ]; then
      r=found o=${_gl_found[$i]}
    elif [ -n "${_gl_ran[$i]+x}" ]; then
      [ -f "${_gl_rec[$i]}" ] && IFS= read -r -d '' o <"${_gl_rec[$i]}"
      r=1
      if [[ ${o%$'\n'} != *$'\n'* ]]; then  # one line, as a submitter prints a job id
        [[ ${o%$'\n'} =~ $_gl_value ]] && r=0
      else
        _gl_recorded "${_gl_rec[$i]}" && r=0
      fi
    else
      [ -f "$_gl_dir/$i.r" ] && IFS= read -r r <"$_gl_dir/$i.r"
      [ -f "$_gl_dir/$i.o" ] && IFS= read -r -d '' o <"$_gl_dir/$i.o"
    fi
    [ -s "$_gl_dir/$i.e" ] && IFS= read -r -d '' e <"$_gl_dir/$i.e"
    if [[ ${o%$'\n'} != *[$'\\\n\r\t']* ]]; then  # the usual case, a job id and its newline: no escaping to do
      [[ $o == *$'\n' ]] && o="${o%$'\n'}\\n"
    else
      _gl_escape o "$o"
    fi
    [[ $e == *[$'\\\n\r\t']* ]] && _gl_escape e "$e"
    printf '%s %s %s %s\t%s\n' "$1" "$i" "$r" "$o" "$e"
    i=$((i + 1))
  done
}
"""


def keyed_steps(
    jobs: Sequence[JobSpec], step_of: Callable[[JobSpec], Step]
) -> tuple[list[Step], list[UUID], dict[UUID, str | FabricError]]:
    """One step per workload (repeats of one are dropped: one job per workload), the workload ids in step
    order, and a non-retryable error for each job whose script does not render (step_of raised)."""
    steps: list[Step] = []
    keys: list[UUID] = []
    refused: dict[UUID, str | FabricError] = {}
    for job in jobs:
        if job.workload_id in refused or job.workload_id in keys:
            continue
        try:
            steps.append(step_of(job))
        except TemplateError as exc:
            refused[job.workload_id] = FabricError(f"the job script does not render: {exc}", retryable=False)
            continue
        keys.append(job.workload_id)
    return steps, keys, refused


def script(
    steps: Sequence[Step],
    *,
    parallel: int = 1,
    setup: Sequence[Sequence[str]] = (),
    lock: str | None = None,
    lookups: Sequence[Sequence[str]] = (),
    value: str = ".",
) -> tuple[str, str]:
    """The script running the steps after the setup commands and look-ups, and the marker its report lines carry.

    lock: a file the script holds (flock) while it runs, look-ups included. A submitting script
    holds it, and so does the look-up of the next: a batch orphaned by a dropped connection runs on
    to its end, and the look-up waits for it, so that it sees every job the batch submitted.
    value: a bash regular expression a record's last line must match to name a job (a job id).
    """
    marker = f"gridlane-{secrets.token_hex(8)}"
    delimiter = _delimiter(steps)
    lines = [_RUNNER, f"_gl_value={shlex.quote(value)}"]
    lines += [shlex.join(argv) for argv in setup]
    if lock:
        lines.append(f"exec 9>>{shlex.quote(lock)} && flock -w {LOCK_WAIT_S} 9 || exit 91")
    lines += [shlex.join(["_gl_lookup", marker, *argv]) for argv in lookups]
    background = " &" if parallel > 1 else ""
    throttle = f"_gl_throttle {parallel}\n" if parallel > 1 else ""
    slot = 0  # report slots: a plain step takes one, a group one per member
    for number, step in enumerate(steps):
        index, slot = slot, slot + step.slots
        if step.members:
            lines.append(_group(step, index, number, delimiter, background, throttle))
            continue
        body = step.stdin or ""
        if body and not body.endswith("\n"):
            body += "\n"
        heredoc = f"<<'{delimiter}'"
        document = f"\n{body}{delimiter}"
        if step.key is None:
            if step.record or step.write_to:
                raise ValueError("only a keyed step has a record or a file to write")
            call = shlex.join(["_gl_step", str(index), *step.argv])
            if step.stdin is None:
                lines.append(f"{call} </dev/null{background}")
            else:
                lines.append(f"{call} {heredoc}{background}{document}")
            if throttle:
                lines.append(throttle.rstrip("\n"))
            continue
        if not KEY.fullmatch(step.key) or not step.record:
            raise ValueError(f"a keyed step needs a key of letters, digits and ._:+- and a record: {step.key!r}")
        todo = shlex.join(["_gl_todo", str(index), step.key, step.record, *(["run"] if step.argv else [])])
        if not step.argv:
            lines.append(todo)  # looked up, never run
            continue
        # The command itself runs in the background, not a function: one process per step, as in a plain loop.
        out = f'>{shlex.quote(step.record)} 2>"$_gl_dir/{index}.e"'
        if step.write_to is not None:
            write = shlex.join(["_gl_write", step.write_to, str(index)])
            run = f"{shlex.join(step.argv)} </dev/null {out}{background}"
            lines.append(f"if {todo} && {write} {heredoc}; then {run}{document}\n{throttle}fi")
        elif step.stdin is not None:
            lines.append(f"if {todo}; then {shlex.join(step.argv)} {heredoc} {out}{background}{document}\n{throttle}fi")
        else:
            lines.append(f"if {todo}; then {shlex.join(step.argv)} </dev/null {out}{background}\n{throttle}fi")
    lines.append("wait")
    lines.append(shlex.join(["_gl_report", marker, str(slots(steps))]))
    return "\n".join(lines) + "\n", marker


def slots(steps: Sequence[Step]) -> int:
    """How many outcomes a script of these steps reports: `parse_report`'s count."""
    return sum(step.slots for step in steps)


def _group(step: Step, first: int, number: int, delimiter: str, background: str, throttle: str) -> str:
    """A group step's lines: its members looked up on slots first, first+1, ...; then, for those nobody found,
    their pointers and one run of the command (TASKS replaced by their indexes), and their records."""
    if not step.key or not KEY.fullmatch(step.key) or not step.record or not step.argv or step.write_to:
        raise ValueError(f"a group step needs a key, a record and a command: {step.key!r}")
    if list(step.argv).count(TASKS) != 1:
        raise ValueError(f"a group step's command holds {TASKS} once, where the members' indexes go")
    tasks = [member.task for member in step.members]
    if tasks != sorted(set(tasks)) or tasks[0] < 0:
        raise ValueError("a group's members come in order of their tasks, each task once")
    lines = ["_gl_gslots=() _gl_gtasks=()"]
    for offset, member in enumerate(step.members):
        if not KEY.fullmatch(member.key) or not member.record:
            raise ValueError(f"a member needs a key of letters, digits and ._:+- and a record: {member.key!r}")
        lines.append(shlex.join(["_gl_member", str(first + offset), member.key, member.record, str(member.task)]))
    out = f'>{shlex.quote(step.record)} 2>"$_gl_dir/g{number}.e"'
    if step.stdin is None:
        run = [f"_gl_tasks {shlex.join(step.argv)} </dev/null {out}"]
    else:
        body = step.stdin if step.stdin.endswith("\n") or not step.stdin else step.stdin + "\n"
        run = [f"_gl_tasks {shlex.join(step.argv)} <<'{delimiter}' {out}", f"{body}{delimiter}"]
    spread = shlex.join(["_gl_spread", str(number), step.record])
    block = "\n".join(["{", *run, spread, "}"])
    lines.append(f"if {shlex.join(['_gl_group', step.key, step.record])}; then {block}{background}\n{throttle}fi")
    return "\n".join(lines)


def parse_report(output: str, marker: str, count: int) -> Report:
    """Each reported step's outcome by its index, and the failed look-up if one ended the script."""
    outcomes: dict[int, Outcome] = {}
    lookup_failed = None
    prefix = marker + " "
    for line in output.split("\n"):
        if not line.startswith(prefix):
            continue
        head, _, err = line[len(prefix) :].partition("\t")
        index, status, out = [*head.split(" ", 2), "", ""][:3]
        if index == "lookup":
            lookup_failed = Outcome(_int(status), _unescape(out), _unescape(err))
            continue
        if not index.isdigit() or int(index) >= count:
            continue
        found = status == "found"
        outcomes[int(index)] = Outcome(0 if found else _int(status), _unescape(out), _unescape(err), found=found)
    return Report(outcomes, lookup_failed)


def parse(output: str, marker: str, count: int) -> dict[int, Outcome]:
    """Each reported step's outcome by its index; steps that did not report are absent."""
    return parse_report(output, marker, count).outcomes


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


_ESCAPES = {"\\\\": "\\", "\\n": "\n", "\\r": "\r", "\\t": "\t"}


def _unescape(text: str) -> str:
    return re.sub(r"\\[\\nrt]", lambda m: _ESCAPES[m.group()], text)


def _delimiter(steps: Sequence[Step]) -> str:
    """A here-document delimiter that is no line of any step's input."""
    while True:
        delimiter = f"GRIDLANE_EOF_{secrets.token_hex(8)}"
        if not any(delimiter in (step.stdin or "") for step in steps):
            return delimiter

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
"""

from __future__ import annotations

import re
import secrets
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

LOCK_WAIT_S = 300  # a batch of thousands of sbatch calls ends well within this


@dataclass(frozen=True)
class Step:
    argv: Sequence[str]
    stdin: str | None = None  # given to the command on stdin
    write_to: str | None = None  # or: stdin is written to this file first, and argv runs with no stdin
    record_to: str | None = None  # on success, the last line of stdout (a job id) is also written here


@dataclass(frozen=True)
class Outcome:
    status: int
    stdout: str
    stderr: str


_RUNNER = r"""set +e
# Each step leaves three small files: in memory (/dev/shm) where the login node has it, as on Linux.
_gl_dir=$(mktemp -d -p /dev/shm 2>/dev/null || mktemp -d) || exit 90
trap 'rm -rf "$_gl_dir"' EXIT
_gl_running=0
_gl_step() {  # INDEX FILE RECORD ARGV...: run ARGV with this function's stdin (or write it to FILE
  local i=$1 f=$2 record=$3 line next  # first); on success, the last line of its stdout is copied to RECORD
  shift 3
  if [ -n "$f" ]; then
    cat >"$f" 2>"$_gl_dir/$i.e" && "$@" </dev/null >"$_gl_dir/$i.o" 2>"$_gl_dir/$i.e"
  else
    "$@" >"$_gl_dir/$i.o" 2>"$_gl_dir/$i.e"
  fi
  local rc=$?
  if [ "$rc" -eq 0 ] && [ -n "$record" ]; then
    while IFS= read -r next || [ -n "$next" ]; do [ -n "$next" ] && line=$next; done <"$_gl_dir/$i.o"
    printf '%s\n' "$line" >"$record"
  fi
  echo "$rc" >"$_gl_dir/$i.r"
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
    [ -f "$_gl_dir/$i.r" ] && IFS= read -r r <"$_gl_dir/$i.r"
    [ -f "$_gl_dir/$i.o" ] && IFS= read -r -d '' o <"$_gl_dir/$i.o"
    [ -f "$_gl_dir/$i.e" ] && IFS= read -r -d '' e <"$_gl_dir/$i.e"
    _gl_escape o "$o"
    _gl_escape e "$e"
    printf '%s %s %s %s\t%s\n' "$1" "$i" "$r" "$o" "$e"
    i=$((i + 1))
  done
}
"""


def script(
    steps: Sequence[Step], *, parallel: int = 1, setup: Sequence[Sequence[str]] = (), lock: str | None = None
) -> tuple[str, str]:
    """The script running the steps after the setup commands, and the marker its report lines carry.

    lock: a file the script holds (flock) while it runs. A submitting script holds it, and so does
    the look-up before the next submission: a batch orphaned by a dropped connection runs on to its
    end, and the look-up waits for it, so that it sees every job the batch submitted.
    """
    marker = f"gridlane-{secrets.token_hex(8)}"
    delimiter = _delimiter(steps)
    lines = [_RUNNER]
    lines += [shlex.join(argv) for argv in setup]
    if lock:
        lines.append(f"exec 9>>{shlex.quote(lock)} && flock -w {LOCK_WAIT_S} 9 || exit 91")
    for index, step in enumerate(steps):
        call = shlex.join(["_gl_step", str(index), step.write_to or "", step.record_to or "", *step.argv])
        background = " &" if parallel > 1 else ""
        if step.stdin is None and step.write_to is None:
            lines.append(f"{call} </dev/null{background}")
        else:
            body = step.stdin or ""
            if body and not body.endswith("\n"):
                body += "\n"
            lines.append(f"{call} <<'{delimiter}'{background}\n{body}{delimiter}")
        if parallel > 1:
            lines.append(f"_gl_throttle {parallel}")
    lines.append("wait")
    lines.append(shlex.join(["_gl_report", marker, str(len(steps))]))
    return "\n".join(lines) + "\n", marker


def parse(output: str, marker: str, count: int) -> dict[int, Outcome]:
    """Each reported step's outcome by its index; steps that did not report are absent."""
    outcomes: dict[int, Outcome] = {}
    prefix = marker + " "
    for line in output.split("\n"):
        if not line.startswith(prefix):
            continue
        head, _, err = line[len(prefix) :].partition("\t")
        index, status, out = [*head.split(" ", 2), "", ""][:3]
        if not index.isdigit() or int(index) >= count:
            continue
        try:
            code = int(status)
        except ValueError:
            code = -1
        outcomes[int(index)] = Outcome(code, _unescape(out), _unescape(err))
    return outcomes


_ESCAPES = {"\\\\": "\\", "\\n": "\n", "\\r": "\r", "\\t": "\t"}


def _unescape(text: str) -> str:
    return re.sub(r"\\[\\nrt]", lambda m: _ESCAPES[m.group()], text)


def _delimiter(steps: Sequence[Step]) -> str:
    """A here-document delimiter that is no line of any step's input."""
    while True:
        delimiter = f"GRIDLANE_EOF_{secrets.token_hex(8)}"
        if not any(delimiter in (step.stdin or "") for step in steps):
            return delimiter

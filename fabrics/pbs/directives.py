"""What a qsub script asks for, read from its `#PBS` lines as qsub reads them. Pure.

qsub (PBS Pro / OpenPBS, Torque) reads `#PBS` lines (in the first column) up to the first line that is
neither blank nor a comment. Their words are qsub's single-letter options, the value attached (`-Nname`)
or the next word (`-N name`). Resources come from `-l` lists, comma-separated:

    -l select=2:ncpus=8:ngpus=1:mem=16gb     (PBS Pro: N chunks, one per node here, and what each holds)
    -l nodes=2:ppn=8:gpus=1,mem=32gb         (Torque: mem is the job's in all)
    -l walltime=01:00:00                      ([[H:]M:]S)
    -l place=excl                             (the whole node)

`-N` names the job, `-J` (PBS Pro) or `-t` (Torque) makes it an array; `-W depend=` is refused.
`read(script)` gives the request as the Slurm reader's `Directives`; `DirectiveError` names the line.

What a script may carry is an allowlist (`check_allowed`), as for Slurm: UNDERSTOOD options and, within
`-l`, the RESOURCES and CHUNK keys Gridlane counts; other options only where IT allows them on the queue
target; NEVER ones (priority, account, project, user, environment, job attributes) whatever IT lists. A
resource Gridlane does not count is refused, never passed on unread.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Sequence

from fabrics.slurm.directives import Directive, DirectiveError, Directives, words

# qsub's options: letter -> (name used in errors and policies, takes a value).
OPTIONS: dict[str, tuple[str, bool]] = {
    "a": ("date_time", True),
    "A": ("account", True),
    "c": ("checkpoint", True),
    "C": ("prefix", True),
    "e": ("error", True),
    "f": ("foreground", False),
    "h": ("hold", False),
    "I": ("interactive", False),
    "j": ("join", True),
    "J": ("array", True),
    "k": ("keep", True),
    "l": ("resource", True),
    "m": ("mail_points", True),
    "M": ("mail_list", True),
    "N": ("name", True),
    "o": ("output", True),
    "p": ("priority", True),
    "P": ("project", True),
    "q": ("queue", True),
    "r": ("rerunnable", True),
    "S": ("shell", True),
    "t": ("array", True),  # Torque's arrays
    "u": ("user_list", True),
    "v": ("variable_list", True),
    "V": ("export_all", False),
    "W": ("attributes", True),
    "X": ("x11", False),
    "z": ("quiet", False),
}
OPTION_NAMES = frozenset(name for name, _ in OPTIONS.values())
REFUSED = {
    "interactive": "an interactive job needs a terminal; Gridlane runs batch work (use a notebook instead)",
    "user_list": "Gridlane decides whom a job runs as",
    "foreground": "-f would hold Gridlane's submission",
}
FORCEABLE = ("queue", "account", "project")
UNDERSTOOD = frozenset({"resource", "name", "output", "error", "join", "array"})
NEVER = REFUSED | {
    "priority": "a job's priority is Gridlane's (its tier), never the script's",
    "account": "the account a job is charged to is Gridlane's (the team's mapping)",
    "project": "the project a job is charged to is Gridlane's (the team's mapping)",
    "variable_list": "a job's environment is the one Gridlane gives it",
    "export_all": "a job's environment is the one Gridlane gives it",
    "attributes": "-W sets job attributes (group_list, depend, ...) that are Gridlane's to set",
    "prefix": "-C changes which lines are directives",
    "hold": "a held job would keep its place without running",
    "date_time": "Gridlane decides when a job starts",
}
# -l keys Gridlane counts (job-wide), and the keys of a select chunk it counts.
RESOURCES = frozenset({"select", "nodes", "walltime", "mem", "ncpus", "ngpus", "place"})
CHUNK = frozenset({"ncpus", "ngpus", "mem", "mpiprocs", "ompthreads"})
PLACE = frozenset({"excl", "exclhost", "shared", "free", "pack", "scatter", "vscatter"})
MAGIC = "#PBS"
SIZE = re.compile(r"^([0-9]+)(b|kb|mb|gb|tb|pb|w|kw|mw|gw|tw)?$", re.IGNORECASE)
UNIT_BYTES = {
    "b": 1,
    "kb": 1024,
    "mb": 1024**2,
    "gb": 1024**3,
    "tb": 1024**4,
    "pb": 1024**5,
    "w": 8,
    "kw": 8 * 1024,
    "mw": 8 * 1024**2,
    "gw": 8 * 1024**3,
    "tw": 8 * 1024**4,
}
ARRAY = re.compile(r"^[0-9]+(?:-[0-9]+(?::[0-9]+)?)?(?:,[0-9]+(?:-[0-9]+(?::[0-9]+)?)?)*(?:%[0-9]+)?$")
NAME = re.compile(r"^[A-Za-z0-9_.+-]{1,236}$")


def options(script: str) -> list[Directive]:
    if not script.startswith("#!"):
        raise DirectiveError(1, "a batch script starts with #! and the path of an interpreter, e.g. #!/bin/bash")
    found: list[Directive] = []
    for number, line in enumerate(script.split("\n"), start=1):
        if number == 1:
            continue
        line = line.rstrip("\r")
        if not line.startswith(MAGIC):
            stripped = line.strip()
            if stripped and not stripped.startswith("#"):
                break
            continue
        args = words(number, line[len(MAGIC) :])
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            if not arg.startswith("-") or len(arg) < 2:
                raise DirectiveError(number, f"{arg!r} is not a qsub option")
            letter = arg[1]
            if letter not in OPTIONS:
                raise DirectiveError(number, f"-{letter} is not a qsub option")
            name, takes = OPTIONS[letter]
            if not takes:
                if len(arg) > 2:
                    raise DirectiveError(number, f"-{letter} takes no value")
                found.append(Directive(number, name, None, line))
            elif len(arg) > 2:
                found.append(Directive(number, name, arg[2:], line))
            elif i < len(args):
                found.append(Directive(number, name, args[i], line))
                i += 1
            else:
                raise DirectiveError(number, f"-{letter} needs a value")
    return found


def size_mib(line: int, key: str, value: str) -> int:
    """A PBS size (bytes without a unit; b, kb, mb, gb, tb, and words) in MiB, rounded up."""
    m = SIZE.match(value)
    if not m:
        raise DirectiveError(line, f"{key}={value}: give a size such as 16gb or 4096mb")
    return math.ceil(int(m.group(1)) * UNIT_BYTES[(m.group(2) or "b").lower()] / 1024**2)


def seconds(line: int, value: str) -> int:
    """A PBS walltime, [[hours:]minutes:]seconds, in whole seconds."""
    m = re.match(r"^(?:(?:([0-9]+):)?([0-9]+):)?([0-9]+)(?:\.[0-9]+)?$", value)
    if not m:
        raise DirectiveError(line, f"walltime={value}: give [[hours:]minutes:]seconds, e.g. 01:30:00")
    total = int(m.group(1) or 0) * 3600 + int(m.group(2) or 0) * 60 + int(m.group(3))
    if total <= 0:
        raise DirectiveError(line, f"walltime={value}: give a time limit above zero")
    return total


def _count(line: int, key: str, value: str, least: int = 0) -> int:
    if not value.isdigit() or int(value) < least:
        raise DirectiveError(line, f"{key}={value}: give a whole number of at least {least}")
    return int(value)


def _resources(d: Directive, into: dict[str, object]) -> None:
    """One -l list: select=, nodes=, walltime=, mem=, ncpus=, ngpus=, place=; any other resource is refused
    (Gridlane would not count it)."""
    text = d.value or ""
    for item in _split(text):
        key, eq, value = item.partition("=")
        if not eq:
            raise DirectiveError(d.line, f"-l {item}: give resource=value")
        if key == "select":
            chunks = value.split("+")
            if len(chunks) > 1:
                raise DirectiveError(d.line, "select with several kinds of chunk (+): Gridlane counts one kind per job")
            count, _, rest = chunks[0].partition(":")
            if not count.isdigit():
                rest, count = chunks[0], "1"
            into["nodes"] = _count(d.line, "select", count, 1)
            for part in filter(None, rest.split(":")):
                k, eq2, v = part.partition("=")
                if not eq2:
                    raise DirectiveError(d.line, f"select: {part!r} is not resource=value")
                _chunk(d.line, k, v, into)
            into["style"] = "select"
        elif key == "nodes":
            count, _, rest = value.partition(":")
            into["nodes"] = _count(d.line, "nodes", count, 1)
            for part in filter(None, rest.split(":")):
                k, eq2, v = part.partition("=")
                if k == "ppn":
                    into["ncpus"] = _count(d.line, "ppn", v, 1)
                elif k == "gpus":
                    into["ngpus"] = _count(d.line, "gpus", v)
                elif eq2:
                    raise DirectiveError(d.line, f"nodes: {part!r} is not ppn= or gpus=")
                # a bare word is a node property, which qsub passes on
            into["style"] = "nodes"
        elif key == "walltime":
            into["walltime"] = seconds(d.line, value)
        elif key in ("mem", "ncpus", "ngpus"):
            into[f"job_{key}"] = size_mib(d.line, key, value) if key == "mem" else _count(d.line, key, value, 1)
        elif key == "place":
            parts = value.split(":")
            if any(p not in PLACE for p in parts):
                raise DirectiveError(d.line, f"place={value}: give excl, shared, free, pack or scatter")
            into["exclusive"] = "excl" in parts or "exclhost" in parts
        else:
            raise DirectiveError(d.line, f"-l {key}: Gridlane counts only {', '.join(sorted(RESOURCES))}")


def _split(text: str) -> list[str]:
    """A -l list's items: commas separate them, except inside select's chunk specs (no commas there)."""
    return [item for item in text.split(",") if item]


def _chunk(line: int, key: str, value: str, into: dict[str, object]) -> None:
    if key == "ncpus":
        into["ncpus"] = _count(line, key, value, 1)
    elif key == "ngpus":
        into["ngpus"] = _count(line, key, value)
    elif key == "mem":
        into["mem"] = size_mib(line, key, value)
    elif key in ("mpiprocs", "ompthreads"):
        into[key] = _count(line, key, value, 1)
    else:
        raise DirectiveError(line, f"select: {key} is not counted by Gridlane (give {', '.join(sorted(CHUNK))})")


def read(script: str) -> Directives:
    """The script's request; DirectiveError naming the line for anything qsub or Gridlane would refuse."""
    found = options(script)
    res: dict[str, object] = {}
    last: dict[str, Directive] = {}
    for d in found:
        if d.option in REFUSED:
            raise DirectiveError(d.line, f"-{_letter(d.option)}: {REFUSED[d.option]}")
        if d.option == "attributes" and (d.value or "").startswith("depend"):
            raise DirectiveError(d.line, "-W depend: Gridlane cannot wait for another job; submit this one later")
        if d.option == "resource":
            _resources(d, res)
        else:
            last[d.option] = d
    if res.get("style") == "select":
        both = [key for key in ("ncpus", "ngpus", "mem") if f"job_{key}" in res and key in res]
        if both:
            line = next(d.line for d in found if d.option == "resource")
            raise DirectiveError(line, f"{both[0]} both in select and for the whole job: give it in select only")
    nodes = int(res.get("nodes", 1))  # type: ignore[call-overload]
    ncpus = int(res.get("ncpus", 0))  # type: ignore[call-overload]
    ngpus = int(res.get("ngpus", 0))  # type: ignore[call-overload]
    memory: int | None = res.get("mem")  # type: ignore[assignment]
    if "job_ncpus" in res and not ncpus:
        ncpus = math.ceil(int(res["job_ncpus"]) / nodes)  # type: ignore[call-overload]
    if "job_ngpus" in res and not ngpus:
        ngpus = math.ceil(int(res["job_ngpus"]) / nodes)  # type: ignore[call-overload]
    if "job_mem" in res and memory is None:
        memory = math.ceil(int(res["job_mem"]) / nodes)  # type: ignore[call-overload]
    tasks = int(res.get("mpiprocs", 1))  # type: ignore[call-overload]
    name = last.get("name")
    if name is not None and not NAME.match(name.value or ""):
        raise DirectiveError(name.line, f"-N {name.value}: letters, digits and . _ + - only")
    array = last.get("array")
    spec = (array.value or "") if array else ""
    if array is not None and not ARRAY.match(spec):
        raise DirectiveError(array.line, f"-J {spec}: give indexes as 0-99, 0-99:2 or 0-99%10")
    return Directives(
        directives=tuple(found),
        nodes=nodes,
        tasks_per_node=tasks,
        cpus_per_task=max(1, math.ceil(ncpus / tasks)),
        gpus_per_node=ngpus,
        memory_mib=memory,
        time_s=res.get("walltime"),  # type: ignore[arg-type]
        job_name=(name.value or "") if name else "",
        exclusive=bool(res.get("exclusive", False)),
        array=spec,
        output=(last["output"].value or "") if "output" in last else "",
        error=(last["error"].value or "") if "error" in last else "",
        forceable={k: last[k].value or "" for k in FORCEABLE if k in last},
    )


def check_allowed(found: Sequence[Directive], extra: Collection[str] = (), forced: Collection[str] = ()) -> None:
    """DirectiveError for the first directive a script may not carry here: one in NEVER, or one neither
    UNDERSTOOD nor in `extra` (IT's, on the queue target) nor `forced` (IT's value wins)."""
    for d in found:
        if d.option in NEVER:
            raise DirectiveError(d.line, f"-{_letter(d.option)}: {NEVER[d.option]}")
        if d.option not in UNDERSTOOD and d.option not in extra and d.option not in forced:
            raise DirectiveError(d.line, f"-{_letter(d.option)} ({d.option}): Gridlane does not take it from a script "
                                 "here (IT may allow it on the queue)")  # fmt: skip


def _letter(name: str) -> str:
    return next(letter for letter, (n, _) in OPTIONS.items() if n == name)

"""What an sbatch script asks for, read from its `#SBATCH` lines as sbatch reads them. Pure.

sbatch's rules, followed here:
- the first line must be `#!` and an interpreter;
- directives are lines that begin (in the first column) with `#SBATCH` (or the old `#SLURM`); reading stops
  at the first line that is neither blank nor a comment, so `#SBATCH` lines after a command are ignored;
- a directive line holds words as a shell would split them (quotes and backslashes), and an unquoted `#`
  starts a comment; words are sbatch options: `--opt=value`, `--opt value`, `-o value`, `-ovalue`, and a
  long option may be shortened to any unambiguous prefix (getopt's rule).

`read(script)` gives every directive with its line number and a `Directives` value: the request
(nodes, tasks, CPUs, GPUs, memory, time, ...). `DirectiveError` names the line it is about.

What a script may carry is an allowlist (`check_allowed`): UNDERSTOOD, the directives Gridlane reads and
counts (resources, time, names, output paths, arrays), plus those IT lets a queue target's scripts carry.
NEVER are refused whatever IT lists: they change who goes first (--priority, a negative --nice), whom the
job runs as or what it inherits (--uid, --gid, --get-user-env, --export), what it is charged to (--account,
--qos, --reservation, --wckey, the tag in --comment), or ask for GPUs, CPUs, tasks or memory in a way
Gridlane does not count (--gpus-per-socket, --ntasks-per-gpu, --sockets-per-node, ...). The portal's submit
account may hold a Slurm operator's level; a script never borrows it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, field

from fabrics.base import Resources

# sbatch 22.05's options: long name -> (short letter or "", takes a value: "yes" | "no" | "optional").
OPTIONS: dict[str, tuple[str, str]] = {
    "account": ("A", "yes"),
    "acctg-freq": ("", "yes"),
    "array": ("a", "yes"),
    "batch": ("", "yes"),
    "bb": ("", "yes"),
    "bbf": ("", "yes"),
    "begin": ("b", "yes"),
    "chdir": ("D", "yes"),
    "cluster-constraint": ("", "yes"),
    "clusters": ("M", "yes"),
    "comment": ("", "yes"),
    "constraint": ("C", "yes"),
    "container": ("", "yes"),
    "contiguous": ("", "no"),
    "core-spec": ("S", "yes"),
    "cores-per-socket": ("", "yes"),
    "cpu-freq": ("", "yes"),
    "cpus-per-gpu": ("", "yes"),
    "cpus-per-task": ("c", "yes"),
    "deadline": ("", "yes"),
    "delay-boot": ("", "yes"),
    "dependency": ("d", "yes"),
    "distribution": ("m", "yes"),
    "error": ("e", "yes"),
    "exclude": ("x", "yes"),
    "exclusive": ("", "optional"),
    "export": ("", "yes"),
    "export-file": ("", "yes"),
    "extra-node-info": ("B", "yes"),
    "get-user-env": ("", "optional"),
    "gid": ("", "yes"),
    "gpu-bind": ("", "yes"),
    "gpu-freq": ("", "yes"),
    "gpus": ("G", "yes"),
    "gpus-per-node": ("", "yes"),
    "gpus-per-socket": ("", "yes"),
    "gpus-per-task": ("", "yes"),
    "gres": ("", "yes"),
    "gres-flags": ("", "yes"),
    "hint": ("", "yes"),
    "hold": ("H", "no"),
    "ignore-pbs": ("", "no"),
    "input": ("i", "yes"),
    "job-name": ("J", "yes"),
    "kill-on-invalid-dep": ("", "yes"),
    "licenses": ("L", "yes"),
    "mail-type": ("", "yes"),
    "mail-user": ("", "yes"),
    "mcs-label": ("", "yes"),
    "mem": ("", "yes"),
    "mem-bind": ("", "yes"),
    "mem-per-cpu": ("", "yes"),
    "mem-per-gpu": ("", "yes"),
    "mincpus": ("", "yes"),
    "network": ("", "yes"),
    "nice": ("", "optional"),
    "no-kill": ("k", "optional"),
    "no-requeue": ("", "no"),
    "nodefile": ("F", "yes"),
    "nodelist": ("w", "yes"),
    "nodes": ("N", "yes"),
    "ntasks": ("n", "yes"),
    "ntasks-per-core": ("", "yes"),
    "ntasks-per-gpu": ("", "yes"),
    "ntasks-per-node": ("", "yes"),
    "ntasks-per-socket": ("", "yes"),
    "open-mode": ("", "yes"),
    "output": ("o", "yes"),
    "overcommit": ("O", "no"),
    "oversubscribe": ("s", "no"),
    "parsable": ("", "no"),
    "partition": ("p", "yes"),
    "power": ("", "yes"),
    "prefer": ("", "yes"),
    "priority": ("", "yes"),
    "profile": ("", "yes"),
    "propagate": ("", "optional"),
    "qos": ("q", "yes"),
    "quiet": ("Q", "no"),
    "reboot": ("", "no"),
    "requeue": ("", "no"),
    "reservation": ("", "yes"),
    "signal": ("", "yes"),
    "sockets-per-node": ("", "yes"),
    "spread-job": ("", "no"),
    "switches": ("", "yes"),
    "test-only": ("", "no"),
    "thread-spec": ("", "yes"),
    "threads-per-core": ("", "yes"),
    "time": ("t", "yes"),
    "time-min": ("", "yes"),
    "tmp": ("", "yes"),
    "uid": ("", "yes"),
    "use-min-nodes": ("", "no"),
    "verbose": ("v", "no"),
    "wait": ("W", "no"),
    "wait-all-nodes": ("", "yes"),
    "wckey": ("", "yes"),
    "wrap": ("", "yes"),
}
SHORT = {short: name for name, (short, _) in OPTIONS.items() if short}
# Options a script may not carry through Gridlane, and why.
REFUSED = {
    "dependency": "Gridlane cannot wait for another Slurm job: submit this one when that one has ended",
    "wrap": "--wrap replaces the script; put the command in the script instead",
    "test-only": "--test-only submits nothing",
    "uid": "Gridlane decides whom a job runs as",
    "gid": "Gridlane decides whom a job runs as",
    "batch": "--batch is not supported",
    "clusters": "a queue's fabric is one cluster; --clusters would send the job elsewhere",
    "parsable": "--parsable changes what sbatch prints, which Gridlane reads",
    "wait": "--wait would hold Gridlane's submission until the job ends",
}
# What Gridlane reads from a script and counts as the fabric does (see `read`): every other option is refused
# unless IT allows it on the queue target.
UNDERSTOOD = frozenset(
    {
        "nodes", "ntasks", "ntasks-per-node", "cpus-per-task", "cpus-per-gpu", "gpus", "gpus-per-node",
        "gpus-per-task", "gres", "mem", "mem-per-cpu", "mem-per-gpu", "time", "exclusive", "job-name", "output",
        "error", "open-mode", "array", "nice", "signal",
    }
)  # fmt: skip
# Never honoured from a script, whatever IT allows on a target (REFUSED's and these).
_NEVER_TOO = {
    "priority": "a job's priority is Gridlane's (its tier), never the script's",
    "account": "the account a job is charged to is Gridlane's (the team's mapping)",
    "qos": "a job's QOS comes from Gridlane's tier, never the script",
    "reservation": "reservations are IT's to give, through the queue target",
    "wckey": "what a job is charged to is Gridlane's",
    "comment": "Gridlane tags its jobs with --comment",
    "get-user-env": "a job's environment is the one Gridlane gives it",
    "export": "a job's environment is the one Gridlane gives it",
    "export-file": "a job's environment is the one Gridlane gives it",
    "gpus-per-socket": "Gridlane cannot count GPUs per socket: give --gpus-per-node or --gres=gpu:N",
    "ntasks-per-gpu": "Gridlane cannot count tasks per GPU: give --ntasks-per-node",
    "ntasks-per-socket": "Gridlane cannot count tasks per socket: give --ntasks-per-node",
    "ntasks-per-core": "Gridlane cannot count tasks per core: give --ntasks-per-node",
    "sockets-per-node": "Gridlane cannot count sockets: give --cpus-per-task",
    "cores-per-socket": "Gridlane cannot count cores per socket: give --cpus-per-task",
    "threads-per-core": "Gridlane cannot count threads per core: give --cpus-per-task",
    "extra-node-info": "Gridlane cannot count sockets, cores and threads: give --cpus-per-task",
    "mincpus": "Gridlane cannot count --mincpus: give --cpus-per-task",
    "core-spec": "cores kept from the job change what it holds: Gridlane cannot count them",
    "thread-spec": "threads kept from the job change what it holds: Gridlane cannot count them",
    "overcommit": "--overcommit changes the CPUs a job holds: Gridlane cannot count it",
    "oversubscribe": "sharing a node's CPUs with other jobs is IT's to decide",
    "hint": "--hint changes the CPUs a job holds: give --cpus-per-task",
    "time-min": "give --time: Gridlane plans with the job's whole limit",
    "use-min-nodes": "give --nodes=N: Gridlane plans with the job's whole node count",
    "hold": "a held job would keep its place without running",
    "begin": "Gridlane decides when a job starts",
    "deadline": "Gridlane decides when a job starts",
    "reboot": "rebooting nodes is IT's",
    "uid": "Gridlane decides whom a job runs as",
    "gid": "Gridlane decides whom a job runs as",
}
# Where IT may force a value (the queue target's `native` policy): the option, as sbatch's command line takes it.
FORCEABLE = ("partition", "account", "qos", "constraint", "reservation")
MAGIC = ("#SBATCH", "#SLURM")
SIZE = re.compile(r"^([0-9]+)(?:([KMGT])B?)?$", re.IGNORECASE)  # sbatch also takes 16GB as 16G
UNIT_MIB = {"": 1, "K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
COUNT = re.compile(r"^[0-9]+$")
GPU_SPEC = re.compile(r"^(?:([A-Za-z0-9_.+-]+):)?([0-9]+)$")  # [type:]N
GRES_GPU = re.compile(r"^gpu(?::([A-Za-z0-9_.+-]*[A-Za-z_.+-][A-Za-z0-9_.+-]*))?(?::([0-9]+))?$")  # gpu[:type][:N]
ARRAY = re.compile(r"^[0-9]+(?:-[0-9]+(?::[0-9]+)?)?(?:,[0-9]+(?:-[0-9]+(?::[0-9]+)?)?)*(?:%[0-9]+)?$")
NAME = re.compile(r"^[^\s\x00-\x1f]{1,200}$")


class DirectiveError(ValueError):
    """A directive sbatch or Gridlane cannot take; `line` is its line number in the script (1 is the first)."""

    def __init__(self, line: int, message: str) -> None:
        super().__init__(f"line {line}: {message}" if line else message)
        self.line = line
        self.message = message


@dataclass(frozen=True)
class Directive:
    line: int  # 1 is the script's first line
    option: str  # sbatch's long name, e.g. "nodes"
    value: str | None  # None for a flag (--exclusive)
    text: str  # the line as written, without its newline


@dataclass(frozen=True)
class Directives:
    """What the script asks for. Counts are per node where sbatch counts them so; None: the script did not say."""

    directives: tuple[Directive, ...] = ()
    nodes: int = 1
    tasks_per_node: int = 1
    cpus_per_task: int = 1
    gpus_per_node: int = 0
    gpu_type: str = ""
    memory_mib: int | None = None  # per node, from --mem, --mem-per-cpu or --mem-per-gpu
    time_s: int | None = None
    job_name: str = ""
    exclusive: bool = False
    array: str = ""
    output: str = ""
    error: str = ""
    forceable: dict[str, str] = field(default_factory=dict)  # partition, account, qos, constraint, reservation

    def given(self, option: str) -> Directive | None:
        """The last directive for this option (sbatch keeps the last), or None."""
        return next((d for d in reversed(self.directives) if d.option == option), None)

    @property
    def cpus_per_node(self) -> int:
        return self.cpus_per_task * self.tasks_per_node

    def per_node(self, *, default_mem_per_cpu_mib: int = 1024, node: Resources | None = None) -> Resources:
        """The request per node as Gridlane counts it. --exclusive counts the whole `node` (IT's declaration);
        without a --mem of any kind, memory is `default_mem_per_cpu_mib` per CPU (the cluster's DefMemPerCPU)."""
        if self.exclusive and node is not None:
            return node
        memory = self.memory_mib if self.memory_mib is not None else default_mem_per_cpu_mib * self.cpus_per_node
        return Resources(self.gpus_per_node * 1000, self.cpus_per_node * 1000, memory)


def lines(script: str) -> list[str]:
    return script.split("\n")


def directive_lines(script: str) -> Iterator[tuple[int, str, str]]:
    """(line number, the line, the text after the magic word) for each directive sbatch reads."""
    for number, line in enumerate(lines(script), start=1):
        if number == 1:
            continue  # the #! line
        line = line.rstrip("\r")
        magic = next((m for m in MAGIC if line.startswith(m)), None)
        if magic is not None:
            yield number, line, line[len(magic) :]
            continue
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            return  # the first command: sbatch reads no further


def words(line_number: int, text: str) -> list[str]:
    """A directive's words as sbatch splits them: whitespace apart, quotes and backslashes, `#` a comment."""
    out: list[str] = []
    i, n = 0, len(text)
    while True:
        while i < n and text[i].isspace():
            i += 1
        if i >= n:
            return out
        word: list[str] = []
        quote = ""
        escaped = False
        started = False
        while i < n and (quote or not text[i].isspace()):
            ch = text[i]
            i += 1
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
                continue
            elif quote:
                if ch == quote:
                    quote = ""
                    continue
            elif ch in "\"'":
                quote, started = ch, True
                continue
            elif ch == "#":
                if word or started:
                    out.append("".join(word))
                return out
            word.append(ch)
        if quote:
            raise DirectiveError(line_number, f"unmatched {quote} quote")
        out.append("".join(word))


def _long(line: int, given: str) -> str:
    if given in OPTIONS:
        return given
    matches = [name for name in OPTIONS if name.startswith(given)]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise DirectiveError(line, f"--{given} is ambiguous (it could be --{', --'.join(sorted(matches)[:4])})")
    raise DirectiveError(line, f"--{given} is not an sbatch option")


def options(script: str) -> list[Directive]:
    """Every option the script's directives give, in order, with its line; DirectiveError for what sbatch refuses."""
    if not script.startswith("#!"):
        raise DirectiveError(1, "a batch script starts with #! and the path of an interpreter, e.g. #!/bin/bash")
    found: list[Directive] = []
    for number, line, text in directive_lines(script):
        args = words(number, text)
        i = 0
        while i < len(args):
            arg = args[i]
            i += 1
            if arg.startswith("--") and len(arg) > 2:
                given, eq, value = arg[2:].partition("=")
                name = _long(number, given)
                takes = OPTIONS[name][1]
                if takes == "no":
                    if eq:
                        raise DirectiveError(number, f"--{name} takes no value")
                    found.append(Directive(number, name, None, line))
                elif eq or takes == "optional":
                    found.append(Directive(number, name, value if eq else None, line))
                elif i < len(args):
                    found.append(Directive(number, name, args[i], line))
                    i += 1
                else:
                    raise DirectiveError(number, f"--{name} needs a value")
            elif arg.startswith("-") and len(arg) > 1 and arg != "--":
                j = 1
                while j < len(arg):
                    letter = arg[j]
                    if letter not in SHORT:
                        raise DirectiveError(number, f"-{letter} is not an sbatch option")
                    name = SHORT[letter]
                    takes = OPTIONS[name][1]
                    rest = arg[j + 1 :]
                    if takes == "no":
                        found.append(Directive(number, name, None, line))
                        j += 1
                        continue
                    if rest:
                        found.append(Directive(number, name, rest, line))
                    elif takes == "optional":
                        found.append(Directive(number, name, None, line))
                    elif i < len(args):
                        found.append(Directive(number, name, args[i], line))
                        i += 1
                    else:
                        raise DirectiveError(number, f"-{letter} needs a value")
                    break
            else:
                raise DirectiveError(number, f"{arg!r} is not an option (sbatch takes no arguments in directives)")
    return found


def read(script: str) -> Directives:
    """The script's request; DirectiveError naming the line for anything sbatch or Gridlane would refuse."""
    found = options(script)
    last: dict[str, Directive] = {}
    for d in found:
        if d.option in REFUSED:
            raise DirectiveError(d.line, f"--{d.option}: {REFUSED[d.option]}")
        last[d.option] = d  # sbatch keeps the last value given

    def count(option: str, *, least: int = 1) -> int | None:
        d = last.get(option)
        if d is None:
            return None
        value = d.value or ""
        if not COUNT.match(value) or int(value) < least:
            raise DirectiveError(d.line, f"--{option}={value}: give a whole number of at least {least}")
        return int(value)

    nodes = _nodes(last.get("nodes"))
    ntasks = count("ntasks")
    per_node = count("ntasks-per-node")
    if per_node is None and ntasks is not None:
        if "nodes" not in last:
            nodes = 1  # Gridlane places the tasks on one node unless the script says how many
        per_node = math.ceil(ntasks / nodes)
    tasks_per_node = per_node or 1
    cpus_per_task = count("cpus-per-task") or 1

    gpus, gpu_type = _gpus(last, nodes, tasks_per_node)
    cpus_per_gpu = count("cpus-per-gpu")
    if cpus_per_gpu is not None:
        if not gpus:
            raise DirectiveError(last["cpus-per-gpu"].line, "--cpus-per-gpu without GPUs")
        if "cpus-per-task" in last:
            d = last["cpus-per-task"]
            raise DirectiveError(d.line, "--cpus-per-task and --cpus-per-gpu together: give one")
        cpus_per_task = max(1, math.ceil(cpus_per_gpu * gpus / tasks_per_node))

    memory = _memory(last, gpus, cpus_per_task * tasks_per_node)
    time_s = _time(last["time"]) if "time" in last else None
    name = last.get("job-name")
    if name is not None and not NAME.match(name.value or ""):
        raise DirectiveError(name.line, "--job-name: up to 200 characters, without spaces or control characters")
    array = last.get("array")
    if array is not None and not ARRAY.match(array.value or ""):
        raise DirectiveError(array.line, f"--array={array.value}: give indexes as 0-99, 1,3,5, 0-99:2 or 0-99%10")
    exclusive = last.get("exclusive")
    if exclusive is not None and exclusive.value not in (None, "", "user", "mcs", "topo"):
        raise DirectiveError(exclusive.line, f"--exclusive={exclusive.value}: give user, mcs, topo or nothing")
    return Directives(
        directives=tuple(found),
        nodes=nodes,
        tasks_per_node=tasks_per_node,
        cpus_per_task=cpus_per_task,
        gpus_per_node=gpus,
        gpu_type=gpu_type,
        memory_mib=memory,
        time_s=time_s,
        job_name=(name.value or "") if name else "",
        exclusive=exclusive is not None and exclusive.value in (None, ""),
        array=(array.value or "") if array else "",
        output=(last["output"].value or "") if "output" in last else "",
        error=(last["error"].value or "") if "error" in last else "",
        forceable={k: last[k].value or "" for k in FORCEABLE if k in last},
    )


def _nodes(d: Directive | None) -> int:
    """--nodes=N or min-max (Gridlane plans with the most the job may take)."""
    if d is None:
        return 1
    m = re.match(r"^([0-9]+)(?:-([0-9]+))?$", d.value or "")
    if not m or int(m.group(1)) < 1 or (m.group(2) and int(m.group(2)) < int(m.group(1))):
        raise DirectiveError(d.line, f"--nodes={d.value}: give a number of nodes, or min-max")
    return int(m.group(2) or m.group(1))


def _gpu_spec(d: Directive) -> tuple[int, str]:
    m = GPU_SPEC.match(d.value or "")
    if not m:
        raise DirectiveError(d.line, f"--{d.option}={d.value}: give [type:]count, e.g. 4 or a100:4")
    return int(m.group(2)), m.group(1) or ""


def _gres_gpus(d: Directive, strict: bool = False) -> tuple[int, str]:
    """The GPUs in --gres=gpu[:type][:N][,other...]; other GRES are not counted (refused where `strict`: a GRES
    Gridlane does not count is not taken from a script). Two gpu items: refused (Slurm would add them)."""
    gpus: tuple[int, str] | None = None
    for item in (d.value or "").split(","):
        item = item.split("(")[0]
        if not item.startswith("gpu") or (item[3:4] not in ("", ":")):
            if strict or not re.match(r"^[A-Za-z0-9_.+-]+(:[A-Za-z0-9_.+-]+)*$", item):
                raise DirectiveError(d.line, f"--gres={d.value}: {item!r} is no GRES Gridlane counts (gpu[:type][:N])")
            continue
        if gpus is not None:
            raise DirectiveError(d.line, f"--gres={d.value}: give one gpu item (gpu:type:N)")
        m = GRES_GPU.match(item)
        if not m:
            raise DirectiveError(d.line, f"--gres={d.value}: give gpu, gpu:N or gpu:type:N")
        gpus = (int(m.group(2)) if m.group(2) is not None else 1, m.group(1) or "")
    return gpus or (0, "")


def _gpus(last: dict[str, Directive], nodes: int, tasks_per_node: int) -> tuple[int, str]:
    """GPUs per node and their type from --gpus-per-node, --gres, --gpus-per-task and --gpus; where several are
    given they must agree."""
    said: list[tuple[Directive, int, str]] = []
    if "gpus-per-node" in last:
        said.append((last["gpus-per-node"], *_gpu_spec(last["gpus-per-node"])))
    if "gres" in last:
        count, kind = _gres_gpus(last["gres"])
        if count or "gpu" in (last["gres"].value or ""):
            said.append((last["gres"], count, kind))
    if "gpus-per-task" in last:
        count, kind = _gpu_spec(last["gpus-per-task"])
        said.append((last["gpus-per-task"], count * tasks_per_node, kind))
    if "gpus" in last:
        count, kind = _gpu_spec(last["gpus"])
        if count % nodes:
            d = last["gpus"]
            raise DirectiveError(d.line, f"--gpus={d.value} does not share out evenly over {nodes} nodes")
        said.append((last["gpus"], count // nodes, kind))
    if not said:
        return 0, ""
    said.sort(key=lambda s: s[0].line)
    first, count, kind = said[0]
    for other, other_count, other_kind in said[1:]:
        if other_count != count or (kind and other_kind and kind != other_kind):
            raise DirectiveError(
                other.line,
                f"--{other.option}={other.value} asks for {_gpus_said(other_count, other_kind)} per node, "
                f"but --{first.option}={first.value} (line {first.line}) for {_gpus_said(count, kind)}",
            )
        kind = kind or other_kind
    return count, kind


def _gpus_said(count: int, kind: str) -> str:
    return f"{count} {kind} GPUs" if kind else f"{count} GPUs"


def size_mib(line: int, option: str, value: str) -> int:
    """An sbatch size (default unit MB; K, M, G, T suffixes, any case, optionally with B) in MiB, rounded up."""
    m = SIZE.match(value)
    if not m:
        raise DirectiveError(line, f"--{option}={value}: give a size such as 4096, 4096M, 16G or 1T")
    return math.ceil(int(m.group(1)) * UNIT_MIB[(m.group(2) or "").upper()])


def _memory(last: dict[str, Directive], gpus: int, cpus: int) -> int | None:
    given = [last[o] for o in ("mem", "mem-per-cpu", "mem-per-gpu") if o in last]
    if len(given) > 1:
        a, b = given[0], given[1]
        raise DirectiveError(b.line, f"--{b.option} and --{a.option} (line {a.line}) together: give one")
    if not given:
        return None
    d = given[0]
    amount = size_mib(d.line, d.option, d.value or "")
    if d.option == "mem":
        if amount == 0:
            raise DirectiveError(d.line, "--mem=0 (all of a node's memory): give the amount the job needs")
        return amount
    if d.option == "mem-per-cpu":
        return amount * cpus
    if not gpus:
        raise DirectiveError(d.line, "--mem-per-gpu without GPUs")
    return amount * gpus


def _time(d: Directive) -> int:
    """Seconds from any sbatch time: M, M:S, H:M:S, D-H, D-H:M, D-H:M:S."""
    value = (d.value or "").strip()
    if value.lower() in ("infinite", "unlimited", "-1"):
        raise DirectiveError(d.line, f"--time={value}: give a time limit (the queue sets a maximum)")
    m = re.match(r"^(?:([0-9]+)-)?([0-9]+)(?::([0-9]+))?(?::([0-9]+))?$", value)
    if not m:
        raise DirectiveError(d.line, f"--time={value}: give minutes, M:S, H:M:S, D-H, D-H:M or D-H:M:S")
    days, a, b, c = m.group(1), int(m.group(2)), m.group(3), m.group(4)
    if days is not None:
        hours, minutes, seconds = a, int(b or 0), int(c or 0)
        total = int(days) * 86400 + hours * 3600 + minutes * 60 + seconds
    elif c is not None:
        total = a * 3600 + int(b or 0) * 60 + int(c)
    elif b is not None:
        total = a * 60 + int(b)
    else:
        total = a * 60
    if total <= 0:
        raise DirectiveError(d.line, f"--time={value}: give a time limit above zero")
    return total


NEVER = REFUSED | _NEVER_TOO


def check_allowed(found: Sequence[Directive], extra: Collection[str] = (), forced: Collection[str] = ()) -> None:
    """DirectiveError for the first directive a script may not carry here: one in NEVER, a negative --nice,
    or one neither UNDERSTOOD nor in `extra` (IT's, on the queue target) nor `forced` (IT's value wins on the
    command line, so the script's is never honoured)."""
    for d in found:
        if d.option in NEVER:
            raise DirectiveError(d.line, f"--{d.option}: {NEVER[d.option]}")
        if d.option == "nice" and d.value and not COUNT.match(d.value):
            raise DirectiveError(d.line, f"--nice={d.value}: only a nice of 0 or more (lowering your own priority)")
        if d.option not in UNDERSTOOD and d.option not in extra and d.option not in forced:
            raise DirectiveError(d.line, f"--{d.option}: Gridlane does not take it from a script here (IT may allow it "
                                 "on the queue)")  # fmt: skip
        if d.option == "gres":
            _gres_gpus(d, strict=True)


def check_policy(found: Sequence[Directive], allowed: Sequence[str] | None, forbidden: Sequence[str]) -> None:
    """DirectiveError for the first directive the queue does not let users set: one in `forbidden`, or, where
    `allowed` is given, one not in it."""
    for d in found:
        if d.option in forbidden or (allowed is not None and d.option not in allowed):
            raise DirectiveError(d.line, f"--{d.option}: this queue does not let you set it")

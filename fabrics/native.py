"""Native work: a user's own sbatch or qsub script, and what IT lets it do on a queue target. Pure.

A queue target's `native` policy (JSON, IT's):

    {"forced": {"partition": "gpu", "account": "ml"},   # on sbatch's/qsub's command line, over the script's
     "forbidden": ["reservation", "exclusive"],          # directives users may not set (a 400 naming the line)
     "allowed": null,                                     # or the only directives users may set
     "node": {"gpus": 8, "cpus": 32, "memory_gb": 62.5},  # a node's size: what --exclusive counts
     "default_mem_per_cpu_mb": 256,                       # the cluster's DefMemPerCPU, for scripts without --mem
     "max_array": 1000}                                   # the most elements an array may have

A script carries only what its fabric kind's reader UNDERSTANDS (fabrics.slurm.directives,
fabrics.pbs.directives), what the target forces (its value wins), and the directives IT lists on the target
(`QueueTarget.directives_allowed`, `extra` here); never what the reader's NEVER names.

A local fabric's target that IT lets run scripts (`QueueTarget.runs_scripts`) reads sbatch scripts with Slurm's
reader and takes only what one host can honour (fabrics.local.scripts.HONOURED): nothing forced, no extras.

Directive names are sbatch's long options (`partition`, `gpus-per-node`) or qsub's (`queue`, `account`,
`resource`, see fabrics.pbs.directives).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from fabrics.base import Resources
from fabrics.local import scripts as local_scripts
from fabrics.pbs import directives as pbs_directives
from fabrics.slurm import directives as slurm_directives
from fabrics.slurm.directives import Directive, Directives

KINDS = ("slurm", "pbs")  # the scripts' kinds: sbatch's and qsub's
# The fabric kinds that run each kind of script, the fabric's own scheduler first; "": a plain script (no
# directives), which any of them runs. A local fabric runs sbatch scripts on one host, where IT lets it.
RUN_BY = {"slurm": ("slurm", "local"), "pbs": ("pbs",), "": ("slurm", "pbs", "local")}
MAX_ARRAY = 1000


def script_kind(script: str) -> str:
    """`slurm` for a script with #SBATCH directives, `pbs` for one with #PBS directives (and none of Slurm's),
    else "" (a plain script either can run)."""
    if any(True for _ in slurm_directives.directive_lines(script)):
        return "slurm"
    for line in script.split("\n")[1:]:
        if line.startswith(pbs_directives.MAGIC):
            return "pbs"
        stripped = line.strip()
        if stripped and not stripped.startswith("#"):
            break
    return ""


def read(kind: str, script: str) -> Directives:
    """The script's request as `kind`'s submitter reads it; DirectiveError names the line."""
    if kind == "pbs":
        return pbs_directives.read(script)
    return slurm_directives.read(script)


def forceable(kind: str) -> tuple[str, ...]:
    if kind == "local":
        return ()  # no scheduler of its own to force a partition or account on
    return pbs_directives.FORCEABLE if kind == "pbs" else slurm_directives.FORCEABLE


def check_allowed(kind: str, found: Sequence[Directive], extra: Collection[str], forced: Collection[str]) -> None:
    """DirectiveError (naming the line) for a directive the kind's allowlist and IT's extras do not take."""
    reader = pbs_directives if kind == "pbs" else slurm_directives
    reader.check_allowed(found, extra, forced)
    if kind == "local":
        local_scripts.check(found)


def never(kind: str) -> Mapping[str, str]:
    """The directives no target may let a script carry, with why."""
    return pbs_directives.NEVER if kind == "pbs" else slurm_directives.NEVER


def check_extra(kind: str, extra: Any) -> list[str]:
    """IT's extra directives for a target, checked: a list of the kind's option names, none of NEVER;
    ValueError saying which is wrong."""
    if not isinstance(extra, list) or not all(isinstance(v, str) for v in extra):
        raise ValueError('a list of directive names, such as ["partition", "mail-type"]')
    if kind == "local" and extra:
        raise ValueError("a local fabric honours only the directives it reads: it takes no others")
    unknown = sorted(set(extra) - option_names(kind))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: no {kind} directive")
    refused = sorted(set(extra) & set(never(kind)))
    if refused:
        raise ValueError(f"{', '.join(refused)}: never taken from a script ({never(kind)[refused[0]]})")
    return list(extra)


def option_names(kind: str) -> set[str]:
    if kind == "pbs":
        return {name for name, _ in pbs_directives.OPTIONS.values()}
    return set(slurm_directives.OPTIONS)


@dataclass(frozen=True)
class Policy:
    forced: Mapping[str, str] = field(default_factory=dict)
    forbidden: tuple[str, ...] = ()
    allowed: tuple[str, ...] | None = None
    node: Resources | None = None
    default_mem_per_cpu_mib: int = 1024
    max_array: int = MAX_ARRAY
    kind: str = "slurm"
    extra: tuple[str, ...] = ()  # directives IT lets scripts carry beyond the kind's UNDERSTOOD

    @classmethod
    def of(cls, kind: str, data: Mapping[str, Any] | None, extra: Sequence[str] = ()) -> Policy:
        """The policy from IT's JSON and the target's extra directives; ValueError saying which key is wrong."""
        data = data or {}
        unknown = set(data) - {"forced", "forbidden", "allowed", "node", "default_mem_per_cpu_mb", "max_array"}
        if unknown:
            raise ValueError(f"native: unknown keys {', '.join(sorted(unknown))}")
        forced = data.get("forced") or {}
        if not isinstance(forced, dict):
            raise ValueError('native.forced: an object such as {"partition": "gpu"}')
        for option, value in forced.items():
            if option not in forceable(kind):
                may = ", ".join(forceable(kind)) or "nothing (it has no scheduler of its own)"
                raise ValueError(f"native.forced: a {kind} queue may force {may}")
            if not isinstance(value, str) or not value or not slurm_directives.NAME.match(value):
                raise ValueError(f"native.forced.{option}: a name without spaces")
        names = option_names(kind)
        lists: dict[str, tuple[str, ...] | None] = {}
        for key in ("forbidden", "allowed"):
            value = data.get(key)
            if value is None:
                lists[key] = None
                continue
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"native.{key}: a list of directive names")
            bad = sorted(set(value) - names)
            if bad:
                raise ValueError(f"native.{key}: {', '.join(bad)} is no {kind} directive")
            lists[key] = tuple(value)
        node = None
        if data.get("node") is not None:
            n = data["node"]
            try:
                node = Resources(
                    round(float(n.get("gpus", 0)) * 1000),
                    round(float(n["cpus"]) * 1000),
                    round(float(n["memory_gb"]) * 1024),
                )
            except (AttributeError, KeyError, TypeError, ValueError) as error:
                raise ValueError('native.node: {"gpus": 8, "cpus": 32, "memory_gb": 64}') from error
        mem = data.get("default_mem_per_cpu_mb", 1024)
        most = data.get("max_array", MAX_ARRAY)
        for key, value in (("default_mem_per_cpu_mb", mem), ("max_array", most)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"native.{key}: a whole number above 0")
        extras = tuple(check_extra(kind, list(extra)))
        return cls(forced, lists["forbidden"] or (), lists["allowed"], node, mem, most, kind, extras)

    def check(self, read: Directives) -> None:
        """DirectiveError (naming the line) for a directive this queue does not let users set: off the kind's
        allowlist and IT's extras, or off IT's own narrower lists (`allowed`, `forbidden`)."""
        check_allowed(self.kind, read.directives, self.extra, tuple(self.forced))
        slurm_directives.check_policy(read.directives, self.allowed, self.forbidden)

    def per_node(self, read: Directives) -> Resources:
        """What the script takes per node; --exclusive counts the node IT declared (ValueError when it declared
        none)."""
        if read.exclusive and self.node is None:
            raise ValueError("the queue does not say how big a node is, so --exclusive cannot be counted")
        return read.per_node(default_mem_per_cpu_mib=self.default_mem_per_cpu_mib, node=self.node)


ARRAY_SPEC = slurm_directives.ARRAY


def array_indexes(spec: str, most: int = MAX_ARRAY) -> tuple[list[int], int]:
    """The indexes an array spec names, in order without repeats, and its % limit (0: none), as sbatch reads
    --array: 0-99%10, 1,3,5-11:2. ValueError for a spec that is not one, or that names more than `most`."""
    if not ARRAY_SPEC.match(spec):
        raise ValueError(f"{spec!r} is no array: give indexes as 0-99, 1,3,5, 0-99:2 or 0-99%10")
    body, _, limit = spec.partition("%")
    seen: dict[int, None] = {}
    for part in body.split(","):
        bounds, _, step = part.partition(":")
        first, _, last = bounds.partition("-")
        start, stop, every = int(first), int(last or first), int(step or 1)
        if stop < start or every < 1:
            raise ValueError(f"{part!r}: give first-last with first <= last and a step of at least 1")
        if (stop - start) // every + 1 + len(seen) > most:
            raise ValueError(f"an array of at most {most} elements")
        seen.update(dict.fromkeys(range(start, stop + 1, every)))
    throttle = int(limit) if limit else 0
    if limit and throttle < 1:
        raise ValueError("%0 would run nothing: give a limit of at least 1")
    return list(seen), throttle

"""Node lists as Slurm writes them, expanded and compressed: "gpu[01-02],login" is gpu01, gpu02 and login. Pure.

A workload keeps the nodes its job runs on in one short text (`Workload.host`, 200 characters): Slurm reports
its node list compressed; PBS reports every host of `exec_host`, which `compress` writes the same way, so that
every reader (the connect proxy's node names, the agents' readings of a multi-node PBS job, the efficiency
page's nodes) expands either with `expand`. Compressing keeps the order of the names: only neighbours that
share a name's head and tail and count up by one merge into a range, so `expand(compress(names)) == names`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

NODES_KEPT = 500  # the names one list expands to at most; a cluster's running jobs rarely span more
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")  # a host name as a batch system reports it (no [ ] or ,)
_PART = re.compile(r"([^\[\],]+)(?:\[([0-9,\-]+)\])?([^\[\],]*)")  # node[01-03,07]suffix
_NUMBERED = re.compile(r"^(.*?[^0-9])([0-9]+)$")  # a short name's head and the number it ends with


def expand(text: str) -> list[str]:
    """Slurm's compressed node list expanded: "gpu[01-02],login" -> ["gpu01", "gpu02", "login"] (at most
    NODES_KEPT names)."""
    names: list[str] = []
    for match in re.finditer(r"[^,\[]+(?:\[[^\]]*\])?[^,]*", text):
        part = _PART.fullmatch(match.group(0).strip())
        if part is None:
            continue
        head, ranges, tail = part.groups()
        if not ranges:
            names.append(head + tail)
            continue
        for span in ranges.split(","):
            low, _, high = span.partition("-")
            if not low.isdigit() or (high and not high.isdigit()):
                continue
            for n in range(int(low), int(high or low) + 1):
                names.append(f"{head}{n:0{len(low)}d}{tail}")
                if len(names) >= NODES_KEPT:
                    return names
    return names


def short(name: str) -> str:
    """A host's short name as a comparison key: up to its first dot, in lower case ("GPU-7.cluster.org." -> "gpu-7"):
    batch systems, agents and samplers spell the same node with or without its domain."""
    return name.lower().rstrip(".").split(".", 1)[0]


def _split(name: str) -> tuple[str, str, str] | None:
    """(head, number, tail) of a name whose short part ends with a number ("node07.x.org": "node", "07", ".x.org");
    None for one that does not ("login", "7")."""
    short, dot, domain = name.partition(".")
    numbered = _NUMBERED.match(short)
    return (numbered.group(1), numbered.group(2), dot + domain) if numbered else None


def compress(names: Sequence[str]) -> str:
    """The names as one Slurm node list, in their order: neighbours "node01", "node02", "node03", "node07" that
    share head and tail are "node[01-03,07]"; others are listed as they are, comma-separated."""
    groups: list[tuple[str, str, list[list[str]]]] = []  # (head, tail, spans: [low, high] as written)
    for name in names:
        split = _split(name)
        if split is None:
            groups.append((name, "", []))
            continue
        head, number, tail = split
        if groups and groups[-1][2] and groups[-1][:2] == (head, tail):
            low, high = groups[-1][2][-1]
            if int(number) == int(high) + 1 and f"{int(number):0{len(low)}d}" == number:
                groups[-1][2][-1][1] = number
            else:
                groups[-1][2].append([number, number])
            continue
        groups.append((head, tail, [[number, number]]))
    parts = []
    for head, tail, spans in groups:
        if not spans:
            parts.append(head)
        elif len(spans) == 1 and spans[0][0] == spans[0][1]:
            parts.append(f"{head}{spans[0][0]}{tail}")
        else:
            ranges = ",".join(low if low == high else f"{low}-{high}" for low, high in spans)
            parts.append(f"{head}[{ranges}]{tail}")
    return ",".join(parts)


def fitting(names: Sequence[str], limit: int) -> tuple[str, int]:
    """The names as one list of at most `limit` characters: all of them, comma-separated where that fits, else
    compressed; where even that does not fit, the leading names whose list does. Returns the list and how many
    names were left out (0: none), for the caller to say so."""
    plain = ",".join(names)
    if len(plain) <= limit:
        return plain, 0
    kept = len(names)
    while kept and len(compress(names[:kept])) > limit:
        kept -= 1
    return compress(names[:kept]), len(names) - kept

"""A stand-in `nvidia-smi` for nodes without a GPU (the test cluster, this host): it prints what the real one
prints for the sampler's query (fixtures/README.md), with values that change on each call, and refuses any
other query as the real one would not answer it in this shape."""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from pathlib import Path

from fabrics.sampler import QUERY

SCRIPT = """\
#!/bin/sh
# Stand-in nvidia-smi: one line per GPU, "index, utilization.gpu, memory.used", the next row of values each call.
[ "$*" = {query} ] || {{ echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2; }}
count_file={count}
n=$(cat "$count_file" 2>/dev/null || echo 0)
echo $((n + 1)) > "$count_file"
case $((n % {rows})) in
{cases}
esac
"""


def install(directory: Path, rows: Sequence[Sequence[int]]) -> Path:
    """Write `nvidia-smi` into `directory` (put it first on PATH); call k prints rows[k % len(rows)], one
    utilisation per GPU (memory grows with it). Returns the file counting the calls."""
    directory.mkdir(parents=True, exist_ok=True)
    count = directory / "nvidia-smi.calls"
    printed = ["".join(f"{i}, {u}, {1024 + 100 * u}\n" for i, u in enumerate(row)) for row in rows]
    cases = "\n".join(f"  {k}) printf '%s' {shlex.quote(text)};;" for k, text in enumerate(printed))
    script = directory / "nvidia-smi"
    script.write_text(
        SCRIPT.format(query=shlex.quote(" ".join(QUERY)), count=shlex.quote(str(count)), rows=len(rows), cases=cases)
    )
    script.chmod(0o755)
    return count


PER_NODE = """\
#!/bin/sh
# Stand-in nvidia-smi for a cluster of several nodes: one line per GPU the node shows, by the node's name.
[ "$*" = {query} ] || {{ echo "stand-in nvidia-smi: unexpected arguments: $*" >&2; exit 2; }}
case $(hostname -s) in
{cases}
  *) echo "stand-in nvidia-smi: no GPUs for $(hostname -s)" >&2; exit 9;;
esac
"""


def install_per_node(directory: Path, nodes: dict[str, Sequence[int]]) -> Path:
    """Write `nvidia-smi` into `directory`: on node N it prints one line per utilisation in nodes[N] (GPU
    indexes from 0, memory growing with the utilisation), the same each call. Returns the file's path."""
    directory.mkdir(parents=True, exist_ok=True)
    printed = {node: "".join(f"{i}, {u}, {1024 + 100 * u}\n" for i, u in enumerate(row)) for node, row in nodes.items()}
    cases = "\n".join(f"  {shlex.quote(node)}) printf '%s' {shlex.quote(text)};;" for node, text in printed.items())
    script = directory / "nvidia-smi"
    script.write_text(PER_NODE.format(query=shlex.quote(" ".join(QUERY)), cases=cases))
    script.chmod(0o755)
    return script

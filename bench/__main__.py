"""Run every benchmark module (bench/bench_*.py), or those named: `python -m bench scheduler slurm`.

Each module has `run() -> dict`: it prints its own report and returns its numbers, which are
gathered into one JSON summary at the end (also written to var/bench.json).
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import sys
import time
from pathlib import Path

import bench


def main(names: list[str]) -> int:
    found = sorted(m.name[len("bench_") :] for m in pkgutil.iter_modules(bench.__path__) if m.name.startswith("bench_"))
    chosen = names or found
    unknown = set(chosen) - set(found)
    if unknown:
        print(f"unknown benchmark(s): {', '.join(sorted(unknown))}; have: {', '.join(found)}", file=sys.stderr)
        return 2
    summary = {}
    for name in chosen:
        print(f"\n=== bench {name}", flush=True)
        started = time.perf_counter()
        module = importlib.import_module(f"bench.bench_{name}")
        summary[name] = module.run()
        print(f"--- {name} took {time.perf_counter() - started:.1f} s", flush=True)
    out = Path(__file__).resolve().parents[1] / "var" / "bench.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=2, default=str))
    print(f"\nsummary written to {out.relative_to(out.parents[1])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))

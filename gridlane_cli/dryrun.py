"""`gridlane submit --dry-run`: ask where a submission would land, recording nothing (POST workloads/dry-run/, or
workloads/bulk/dry-run/ with --from-file), and print the answer for a person (or the JSON with --json)."""

from __future__ import annotations

import json
from typing import Any

WORDS = {"admit": "would start now", "wait": "would wait"}


def readable(answer: dict[str, Any]) -> str:
    """The answer in a few lines: the outcome and target, then place, estimate, reason, borrowing and cost."""
    target = f" on {answer['target']}" if answer.get("target") else ""
    lines = [f"{WORDS.get(answer['outcome'], answer['outcome'])}{target}"]
    if answer.get("position") is not None:
        lines.append(f"  place in line: {answer['position']}")
    if answer["outcome"] == "wait":
        estimate = answer.get("estimated_start") or "no estimate"
        band = answer.get("estimate_band")
        lines.append(f"  estimated start: {estimate}" + (f" (between {band[0]} and {band[1]})" if band else ""))
    lines.append(f"  why: {answer['reason']}")
    if answer.get("borrowing"):
        preemptible = ", and may be preempted" if answer.get("preemptible") else ""
        lines.append(f"  borrows beyond your team's reservation{preemptible}")
    cost = answer.get("estimated_cost")
    if cost:
        lines.append(f"  at most {cost['amount']} {cost.get('currency') or ''}".rstrip() + " for its runtime limit")
    return "\n".join(lines) + "\n"


def run(api: Any, body: dict[str, Any], as_json: bool) -> int:
    answer = api.post("workloads/dry-run/", body)
    print(json.dumps(answer, indent=2) if as_json else readable(answer), end="\n" if as_json else "")
    return 0


def run_many(api: Any, bodies: list[dict[str, Any]], as_json: bool) -> int:
    out = api.post("workloads/bulk/dry-run/", {"items": bodies})
    for number, answer in enumerate(out["items"], start=1):
        print(json.dumps(answer) if as_json else f"{number}: {readable(answer)}", end="\n" if as_json else "")
    return 0

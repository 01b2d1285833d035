"""`gridlane policy export | plan FILE | apply FILE`: the site's policy as one YAML document, for IT.

export writes the live policy (to stdout, or -o FILE); plan shows what applying FILE would change and what the
what-if engine predicts of it over the last days of work; apply applies FILE in one transaction, or nothing,
and says what changed. All three speak the REST API (/api/v1/policy/); none imports Django.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from fabrics.agent.client import Api, ApiError

PLAN_TIMEOUT_S = 600.0  # a plan replays the last days of work under both policies


def add_parser(commands: Any) -> None:
    policy = commands.add_parser("policy", help="IT: the site's policy as a YAML document (export, plan, apply)")
    verbs = policy.add_subparsers(dest="verb", required=True)
    export = verbs.add_parser("export", help="write the live policy as one YAML document")
    export.add_argument("-o", "--output", metavar="FILE", help="write it here instead of stdout")
    plan = verbs.add_parser("plan", help="what applying FILE would change, and its predicted effect")
    plan.add_argument("file", help="a policy document ('-' reads stdin)")
    plan.add_argument("--days", type=int, default=30, help="predict over this many past days (0: no prediction)")
    apply = verbs.add_parser("apply", help="apply FILE: all of it, or nothing")
    apply.add_argument("file", help="a policy document ('-' reads stdin)")


def _text(path: str) -> str:
    return sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")


def run(args: argparse.Namespace, api: Api) -> int:
    out: Any
    if args.verb == "export":
        out = api.get("policy/")
        if args.json:
            print(json.dumps(out, indent=2))
        elif args.output:
            Path(args.output).write_text(out["document"], encoding="utf-8")
        else:
            sys.stdout.write(out["document"])
        return 0
    try:
        text = _text(args.file)
    except OSError as error:
        raise ApiError(0, f"cannot read {args.file}: {error.strerror}") from None
    if args.verb == "plan":
        out = api.post("policy/plan/", {"document": text, "whatif_days": args.days}, timeout=PLAN_TIMEOUT_S)
    else:
        out = api.post("policy/apply/", {"document": text})
    if args.json:
        print(json.dumps(out, indent=2))
        return 0
    sys.stdout.write(describe(out, applied=args.verb == "apply"))
    return 0


def describe(report: dict[str, Any], applied: bool) -> str:
    """The changes as lines a reviewer reads (`~ quotas vision.h100: gpu_reservation 2 -> 3`), then the prediction."""
    changes = report.get("changes") or []
    lines = [f"{'Applied' if applied else 'Would apply'} {len(changes)} change(s) to policy {report.get('version')}"
             + (f", now {report.get('after')}." if applied else ".")]  # fmt: skip
    signs = {"create": "+", "change": "~", "delete": "-"}
    for change in changes:
        head = f"{signs.get(change['action'], '?')} {change['kind']} {change['key']}"
        if change["action"] == "change":
            said = ", ".join(f"{k} {_v(v[0])} -> {_v(v[1])}" for k, v in change["fields"].items())
            lines.append(f"{head}: {said}")
        else:
            lines.append(head)
    whatif = report.get("whatif")
    if whatif:
        lines.append(f"Predicted over the last {whatif['days']} days ({whatif['workloads']} workloads), now -> then:")
        for name, (was, will) in whatif["overall"].items():
            lines.append(f"  {name}: {_v(was)} -> {_v(will)}")
        for side in ("gain", "lose"):
            for team in whatif[side]:
                was, will = team["p95_wait_s"]
                lines.append(f"  {side}s: {team['team']} p95 wait {_v(was)} s -> {_v(will)} s")
        lines.append(f"  (not modelled: {', '.join(whatif['not_modelled'])})")
    return "\n".join(lines) + "\n"


def _v(value: Any) -> str:
    return "empty" if value is None else json.dumps(value) if isinstance(value, dict | list) else str(value)

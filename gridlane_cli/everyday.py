"""The everyday terminal commands, readable by default (`--json` for the API's JSON):

- `gridlane login`: takes a token (pasted, `--token`, or GRIDLANE_TOKEN), checks it against the portal and
  writes the config file (mode 0600) so that later commands need neither flag;
- `gridlane ls`: the caller's own work, with an owner column (`--team` for the work of the caller's teams);
- `gridlane show ID`: the workload in lines a person reads;
- `gridlane logs -f ID`: follows the output until the workload ends, saying why there is none yet.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

from fabrics.agent.client import Api, ApiError
from gridlane_cli.config import config_path

FINISHED = {"succeeded", "failed", "cancelled", "expired"}
FOLLOW_EVERY_S = 2.0


def add_commands(commands: Any) -> None:
    """The subcommands' arguments (ls, show and logs replace the plain ones of main.build_parser)."""
    login = commands.add_parser("login", help="store the portal's URL and your API token in the config file")
    login.add_argument("--paste", action="store_true", help="read the token from standard input")
    ls = commands.add_parser("ls", help="list your workloads (--team: your teams')")
    ls.add_argument("--state")
    ls.add_argument("--queue")
    ls.add_argument("--team", action="store_true", help="the work of your teams, not only yours")
    ls.add_argument("--mine", action="store_true", help=argparse.SUPPRESS)  # the default; kept for scripts
    ls.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON")
    show = commands.add_parser("show", help="show one workload")
    show.add_argument("id")
    show.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON")
    logs = commands.add_parser("logs", help="one workload's output")
    logs.add_argument("id")
    logs.add_argument("-f", "--follow", action="store_true", help="keep printing new output until it ends")


def login(server: str | None, token: str | None, paste: bool, stdin: Any = None) -> int:
    """Check the token with the portal, then write url and token to the config file (readable by you only)."""
    if not server:
        print("gridlane: give --server URL (the portal's address) or set GRIDLANE_URL", file=sys.stderr)
        return 2
    server = server.rstrip("/")
    if not token:
        where = f"{server}/accounts/#tokens"
        print(f"Create an API token on your account page, {where} (API tokens), and paste it here.", file=sys.stderr)
        source = stdin or sys.stdin
        token = (source.readline() if paste or not source.isatty() else getpass.getpass("Token: ")).strip()
    if not token:
        print("gridlane: no token given", file=sys.stderr)
        return 2
    try:
        me = Api(server, token).get("me/")
    except ApiError as error:
        print(f"gridlane: the portal refused this token: {error}", file=sys.stderr)
        return 1
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(f"url = {json.dumps(server)}\ntoken = {json.dumps(token)}\n")  # TOML basic strings
    os.chmod(path, 0o600)
    teams = ", ".join(t["slug"] for t in me.get("teams", [])) or "none yet"
    print(f"Signed in to {server} as {me['username']} (teams: {teams}); wrote {path}")
    return 0


def ls(args: argparse.Namespace, api: Api) -> int:
    query = {k: v for k, v in (("state", args.state), ("queue", args.queue)) if v}
    if not args.team:
        query["mine"] = "1"
    out = api.get(f"workloads/?{urllib.parse.urlencode(query)}")
    rows = out.get("results", out) if isinstance(out, dict) else out
    if getattr(args, "json", False):
        print(json.dumps(out, indent=2))
        return 0
    if not rows:
        print("No workloads." if args.team else "No workloads of yours (--team lists your teams').")
        return 0
    print(f"{'ID':<36}  {'STATE':<11} {'QUEUE':<12} {'OWNER':<12} NAME")
    for w in rows:
        print(f"{w['id']:<36}  {w['state']:<11} {w['queue']:<12} {w['owner']:<12} {w['name']}")
    return 0


def _count(value: Any, noun: str) -> str:
    """ "1 GPU", "0.25 GPU", "2 GPUs" (as the portal says them)."""
    return f"{float(value):g} {noun}" + ("" if 0 < float(value) <= 1 else "s")


def _minutes(seconds: int) -> int:
    """Whole minutes, rounded up, of a length of time either way (as the portal says a band)."""
    return -(-abs(int(seconds)) // 60)


def readable(w: dict[str, Any]) -> str:
    """A workload as a person reads it: what, where, why it waits, when, how it ended."""
    r = w.get("resources") or {}
    asks = f"{_count(r.get('gpus', 0), 'GPU')}, {_count(r.get('cpus', 0), 'CPU')}, {r.get('memory_gb', 0):g} GB"
    lines = [
        f"{w['name']}  ({w['kind']}, {w['state']})",
        f"  id        {w['id']}",
        f"  queue     {w['queue']}   team {w['group']}   owner {w['owner']}",
        f"  asks for  {asks}" + (f" x {r['nodes']} nodes" if r.get("nodes", 1) > 1 else ""),
    ]
    if w.get("pending_reason") and w["state"] == "pending":
        lines.append(f"  waiting   {w['pending_reason']}")
    if w.get("estimated_start"):
        band = w.get("estimate_band") or {}
        within = (
            f"  (usually within -{_minutes(band['low_seconds'])}/+{_minutes(band['high_seconds'])} min)" if band else ""
        )
        lines.append(f"  expected  {w['estimated_start']}{within}")
    for label, key in (("submitted", "submitted_at"), ("started", "started_at"), ("finished", "finished_at")):
        if w.get(key):
            off = w.get("estimate_error_seconds") if key == "started_at" else None
            said = "" if off is None else f"  ({_minutes(off)} min {'later' if off > 0 else 'earlier'} than estimated)"
            lines.append(f"  {label:<9} {w[key]}{said}")
    if w.get("fabric"):
        lines.append(f"  ran on    {w['fabric']}")
    if w.get("exit_code") is not None:
        lines.append(f"  exit code {w['exit_code']}")
    if w.get("connect_url"):
        lines.append(f"  open      {w['connect_url']}")
    if w.get("command"):
        lines.append(f"  command   {w['command']}")
    return "\n".join(lines)


def show(args: argparse.Namespace, api: Api) -> int:
    out = api.get(f"workloads/{args.id}/")
    print(json.dumps(out, indent=2) if getattr(args, "json", False) else readable(out))
    return 0


def new_part(seen: str, tail: str) -> str:
    """What of `tail` (the end of the output, as the portal keeps it) was not printed yet, given the end
    printed so far: all of it when the two no longer overlap."""
    if tail.startswith(seen):
        return tail[len(seen) :]
    for size in range(min(len(seen), len(tail)), 0, -1):
        if tail.startswith(seen[-size:]):
            return tail[size:]
    return tail


def why_no_output(w: dict[str, Any]) -> str:
    if w["state"] == "pending":
        return f"waiting to start: {w.get('pending_reason') or 'in line'}"
    if w["state"] in ("admitted", "dispatching"):
        return f"{w['state']}: its fabric is starting it"
    return f"{w['state']}: no output yet (the worker reads it every few seconds)"


def logs(args: argparse.Namespace, api: Api, sleep: Callable[[float], None] = time.sleep, out: Any = None) -> int:
    out = out or sys.stdout
    tail = api.get(f"workloads/{args.id}/logs/")["tail"]
    out.write(tail)
    out.flush()
    if not args.follow:
        return 0
    said = ""
    while True:
        w = api.get(f"workloads/{args.id}/")
        if not tail:
            why = why_no_output(w)
            if why != said:
                print(f"gridlane: {why}", file=sys.stderr)
                said = why
        if w["state"] in FINISHED:
            out.write(new_part(tail, api.get(f"workloads/{args.id}/logs/")["tail"]))
            code = f" (exit code {w['exit_code']})" if w.get("exit_code") is not None else ""
            print(f"gridlane: {w['state']}{code}", file=sys.stderr)
            return 0 if w["state"] == "succeeded" else 1
        sleep(FOLLOW_EVERY_S)
        latest = api.get(f"workloads/{args.id}/logs/")["tail"]
        out.write(new_part(tail, latest))
        out.flush()
        tail = latest

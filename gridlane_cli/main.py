"""`gridlane login | submit | ls | show | cancel | logs | agent | policy`: the REST API v1 from a terminal."""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import urllib.parse
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fabrics.agent import agent as agent_program
from fabrics.agent.client import Api, ApiError
from gridlane_cli import bundle, dryrun, everyday, policy, stats
from gridlane_cli.config import config_path, resolve

CAP_HEADER = "Gridlane-Code-Max-Bytes"  # the portal's size cap for code, on its answers about bundles
BULK = 1000  # the most workloads the API takes in one bulk request


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gridlane", description="Gridlane from the terminal.")
    parser.add_argument("--server", help="the portal's URL (or GRIDLANE_URL, or url in the config file)")
    parser.add_argument("--token", help="an API token (or GRIDLANE_TOKEN, or token in the config file)")
    parser.add_argument("--json", action="store_true", help="print the API's JSON as it came")
    commands = parser.add_subparsers(dest="command", required=True)

    submit = commands.add_parser(
        "submit",
        help="submit a workload: gridlane submit --queue Q -- python train.py (the words after -- arrive as given; "
        "one word is a shell line), or a batch script as sbatch takes it: gridlane submit job.sbatch --queue Q "
        "(- reads it from stdin); or many: --from-file F",
    )
    submit.add_argument(
        "script",
        nargs="?",
        help="an sbatch/qsub script or a Kubernetes Job manifest (read for the request); - is stdin",
    )
    submit.add_argument("--queue")
    submit.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON")
    submit.add_argument(
        "--dry-run", action="store_true",
        help="ask where it would land (start now where, or wait: place, estimate, reason, cost), recording nothing; "
        "--code is left out of what is asked (nothing is uploaded)",
    )  # fmt: skip
    submit.add_argument(
        "--from-file", metavar="JSONL",
        help="submit many: one API workload body per line (with an optional idempotency_key), '-' for stdin; "
        f"sent {BULK} at a time, each request all or nothing",
    )  # fmt: skip
    submit.add_argument("--kind", default="batch", choices=["notebook", "training", "batch", "vm"])
    submit.add_argument("--name")
    submit.add_argument("--gpus")
    submit.add_argument("--cpus")
    submit.add_argument("--memory-gb")
    submit.add_argument("--nodes", type=int)
    submit.add_argument(
        "--gpu-type", metavar="TYPE", help="a GPU type the queue's targets have (h100, a100...); default: any"
    )
    submit.add_argument("--runtime-minutes", type=int)
    submit.add_argument(
        "--priority",
        default="normal",
        help="a priority tier your team may use (IT defines them; to begin with low, normal, and high for team leads)",
    )
    submit.add_argument("--lease-hours")
    submit.add_argument("--image", default="")
    submit.add_argument("--group")
    submit.add_argument(
        "--array", help="an array: one element per index, e.g. 0-99%%10 ($GRIDLANE_ARRAY_INDEX in each)"
    )
    code = submit.add_mutually_exclusive_group()
    code.add_argument(
        "--code", metavar="DIR",
        help="run the command in a copy of this directory, as .gitignore leaves it (uploaded to your team's bundles "
        "unless the portal has this exact tree already)",
    )  # fmt: skip
    code.add_argument(
        "--git", metavar="URL@COMMIT",
        help="run the command in this git repository at this commit (its full sha), e.g. "
        "https://git.example.org/ml/train.git@<40 hex digits>",
    )  # fmt: skip
    submit.add_argument(
        "--requirements", metavar="FILE",
        help="a requirements file: its packages are installed into a virtual environment on the node (built once "
        "per node for the same requirements) that comes first on the command's PATH",
    )  # fmt: skip

    everyday.add_commands(commands)  # login, ls, show, logs
    cancel = commands.add_parser("cancel", help="cancel one workload")
    cancel.add_argument("id")
    commands.add_parser("stats", help="how one workload used what it held").add_argument("id")
    agent = commands.add_parser("agent", help="serve queues on this host (VMs, bare metal)")
    agent_program.add_arguments(agent)
    policy.add_parser(commands)
    return parser


RESOURCE_DEFAULTS = {"gpus": "0", "cpus": "1", "memory_gb": "4", "nodes": 1}


def command_line(words: Sequence[str]) -> str:
    """The command as the fabric's shell runs it: one word is a shell line as written (`"make && make test"`);
    several are an argv, each word quoted so it arrives exactly as given."""
    return words[0] if len(words) == 1 else shlex.join(words)


def submit_body(args: argparse.Namespace, stdin: Any = None) -> dict[str, Any]:
    given = {"gpus": args.gpus, "cpus": args.cpus, "memory_gb": args.memory_gb, "nodes": args.nodes}
    given = {key: value for key, value in given.items() if value is not None}
    body: dict[str, Any] = {"queue": args.queue, "kind": args.kind, "priority": args.priority}
    if args.script is not None:
        if args.cmd:
            raise SystemExit("gridlane: give a batch script or a command after --, not both")
        source = stdin or sys.stdin
        try:
            text = source.read() if args.script == "-" else Path(args.script).read_text()
        except OSError as error:
            raise SystemExit(f"gridlane: cannot read {args.script}: {error.strerror}") from error
        # A batch script starts with #!; anything else is a Kubernetes Job manifest (YAML or JSON).
        body["script" if text.startswith("#!") else "manifest"] = text
        if given:  # beside a script, resources are only a check: they must agree with its directives
            body["resources"] = given
        if args.name:
            body["name"] = args.name
    else:
        body |= {"name": args.name or "job", "command": command_line(args.cmd), "resources": RESOURCE_DEFAULTS | given}
    if args.image:
        body["image"] = args.image
    if args.runtime_minutes:
        body["runtime_limit_minutes"] = args.runtime_minutes
    if args.lease_hours:
        body["lease_hours"] = args.lease_hours
    if args.group:
        body["group"] = args.group
    if args.array:
        body["array"] = args.array
    if args.gpu_type:
        body["gpu_type"] = args.gpu_type
    if args.git:
        url, _, commit = args.git.rpartition("@")
        if not url or not re.fullmatch(r"[0-9a-f]{40}", commit):
            raise SystemExit("gridlane: give --git URL@COMMIT, the commit as its full 40-hex sha")
        body["code"] = {"git": url, "commit": commit}
    if args.requirements:
        try:
            body["requirements"] = Path(args.requirements).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as error:
            raise SystemExit(f"gridlane: cannot read {args.requirements}: {error}") from error
    return body


def upload_code(api: Api, directory: str, group: str | None) -> str:
    """Pack the directory and upload it unless the team has it already; its sha256. ApiError when refused."""
    try:
        packed = bundle.pack(directory)
    except OSError as error:
        raise ApiError(0, f"cannot pack {directory}: {error}") from None
    with packed.file:
        where = f"code/{packed.digest}/" + (f"?{urllib.parse.urlencode({'group': group})}" if group else "")
        status, headers = api.send("HEAD", where)
        if status == 200:
            print(f"gridlane: code {packed.digest[:12]} is on the portal already", file=sys.stderr)
            return packed.digest
        if status != 404:
            raise ApiError(status, "the portal takes no code for that team: give --group (one of your teams)")
        cap = int(headers.get(CAP_HEADER) or 0)
        if cap and max(packed.size, packed.unpacked) > cap:
            raise ApiError(413, f"{directory} comes to {_mb(packed.unpacked)} ({_mb(packed.size)} packed); this site "
                           f"takes code up to {_mb(cap)}: leave large files out with .gitignore")  # fmt: skip
        api.send("PUT", where, packed.file.read(), "application/gzip")
    print(f"gridlane: uploaded code {packed.digest[:12]}: {len(packed.files)} files, {_mb(packed.size)}",
          file=sys.stderr)  # fmt: skip
    return packed.digest


def _mb(size: int) -> str:
    return f"{size / 1e6:.1f} MB"


def read_jsonl(path: str) -> list[dict[str, Any]]:
    """The workload bodies of a JSON Lines file (blank lines skipped); raises ApiError naming a bad line."""
    text = sys.stdin.read() if path == "-" else Path(path).read_text(encoding="utf-8")
    bodies = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            body = json.loads(line)
        except ValueError as error:
            raise ApiError(0, f"{path}, line {number}: not JSON ({error})") from None
        if not isinstance(body, dict):
            raise ApiError(0, f"{path}, line {number}: not a JSON object")
        bodies.append(body)
    return bodies


def submit_file(args: argparse.Namespace, api: Api) -> int:
    """POST workloads/bulk/ in requests of up to BULK items; prints each workload's id in the file's order.

    A request that is refused stops the run: the requests before it stand (give items idempotency keys to
    send the file again safely)."""
    bodies = read_jsonl(args.from_file)
    for start in range(0, len(bodies), BULK):
        try:
            out = api.post("workloads/bulk/", {"items": bodies[start : start + BULK]})
        except ApiError as error:
            if start:
                raise ApiError(
                    error.status, f"{error} (items {start + 1} on were not sent; the {start} before stand)"
                ) from None
            raise
        for item in out["items"]:
            print(json.dumps(item) if args.json else item["id"])
    return 0


def run(args: argparse.Namespace, api: Api) -> int:
    out: Any
    if args.command == "agent":
        return agent_program.main(args, api)
    if args.command == "policy":
        return policy.run(args, api)
    if args.command == "submit" and args.from_file:
        if args.dry_run:
            return dryrun.run_many(api, read_jsonl(args.from_file)[:BULK], args.json)
        return submit_file(args, api)
    if args.command == "submit":
        if not args.queue:
            raise ApiError(0, "give --queue (or --from-file)")
        body = submit_body(args)
        if args.dry_run:
            return dryrun.run(api, body, args.json)
        if args.code:
            body["code"] = {"digest": upload_code(api, args.code, args.group)}
        out = api.post("workloads/", body)
        if not args.json:
            print(out["id"])
            return 0
    elif args.command == "ls":
        return everyday.ls(args, api)
    elif args.command == "show":
        return everyday.show(args, api)
    elif args.command == "stats":
        out = api.get(f"workloads/{args.id}/efficiency/")
        if not args.json:
            sys.stdout.write(stats.render(out))
            return 0
    elif args.command == "cancel":
        out = api.post(f"workloads/{args.id}/cancel/")
        if not args.json:
            print(f"{out['id']} {out['state']}")
            return 0
    else:
        return everyday.logs(args, api)
    print(json.dumps(out, indent=2))
    return 0


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """The arguments; for submit, every word after the first `--` is the command, taken as it is."""
    argv = list(argv)
    cmd: list[str] = []
    if "submit" in argv and "--" in argv[argv.index("submit") :]:
        cut = argv.index("--", argv.index("submit"))
        argv, cmd = argv[:cut], argv[cut + 1 :]
    args = build_parser().parse_args(argv)
    args.cmd = cmd
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    server, token = resolve(args.server, args.token)
    if args.command == "login":
        return everyday.login(server, args.token or os.environ.get("GRIDLANE_TOKEN"), args.paste)
    if args.command == "agent" and args.enroll and server:
        token = ""  # the agent enrolls first and gets its own token
    elif not server or not token:
        print(f"gridlane: give --server and --token, set GRIDLANE_URL and GRIDLANE_TOKEN, or write {config_path()}",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        return run(args, Api(server, token or ""))
    except ApiError as error:
        print(f"gridlane: {error}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())

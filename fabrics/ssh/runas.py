"""Running a command on a login node as the person a job belongs to: `sudo -n -u <user>`, guarded. Pure.

The portal's SSH account (the submit user) may run a few commands as other people under a sudoers rule
that names exactly them, never root, and lets it choose the working directory (the person's home):

    Defaults:gridlane !requiretty, runcwd=*
    gridlane ALL=(ALL,!root) NOPASSWD: /usr/bin/sbatch, /usr/bin/scancel, /usr/bin/qsub, /usr/bin/qdel, \\
        /usr/bin/mkdir -p -m 0700 -- .gridlane, /usr/bin/tail -c [0-9]* -- .gridlane/[0-9]*

`argv(user, min_uid, command)` wraps a command in a guard that runs as the submit user first: the
user must be a portable POSIX name, not root, exist on the node (getent) with a uid of at least
`min_uid` (system accounts sit below it); then `sudo -n -D <home> -u <user> -- command` runs it in
their home, with nothing asked interactively (-n: a missing rule fails at once), after making the job's
output directory there (`mkdir`, as them) where one is named. Every refusal is a
line on stderr that starts with `gridlane-runas:`, or sudo's own `sudo:` line; `error` turns either
into a FabricError that no retry helps, so a job is never submitted as anyone else instead.
The command's own stdin, stdout and exit status pass through (exec), so keyed submissions
(fabrics.ssh.batch) work as before: their record still gets the job id.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fabrics.base import FabricError

USER = re.compile(r"[a-z_][a-z0-9_-]{0,31}")  # as portal.accounts.models.POSIX_NAME
DEFAULT_MIN_UID = 1000
MARK = "gridlane-runas:"

GUARD = " ".join(  # one line: the guard travels as one argument, inside scripts that use here-documents
    [
        "u=$1 floor=$2 dir=$3; shift 3;",
        "case $u in root | '' | [!a-z_]* | *[!a-z0-9_-]*)",
        """echo "gridlane-runas: refusing to run as '$u'" >&2; exit 97;; esac;""",
        'entry=$(getent passwd "$u") ||',
        '{ echo "gridlane-runas: there is no user $u on $(hostname -s)" >&2; exit 97; };',
        'uid=$(printf %s "$entry" | cut -d: -f3); home=$(printf %s "$entry" | cut -d: -f6);',
        'if [ "$uid" -lt "$floor" ]; then',
        'echo "gridlane-runas: $u has uid $uid, below $floor: a system account runs nothing for Gridlane" >&2;',
        "exit 97; fi;",
        'if [ -n "$dir" ]; then sudo -n -D "$home" -u "$u" -- mkdir -p -m 0700 -- "$dir" || exit 98; fi;',
        'exec sudo -n -D "$home" -u "$u" -- "$@"',
    ]
)


def check_user(user: str) -> None:
    """ValueError unless `user` is a POSIX user name Gridlane may run as (a second check; the guard has a third)."""
    if not USER.fullmatch(user) or user == "root":
        raise ValueError(f"{user!r} is not a POSIX user name Gridlane runs as")


def argv(user: str, min_uid: int, command: Sequence[str], *, workdir: str = "") -> list[str]:
    """`command` run as `user` in their home, behind the guard (an argv list: nothing is read by a shell).

    workdir: a directory (relative to their home) made first, as them, where the job writes its output.
    """
    check_user(user)
    return ["sh", "-c", GUARD, "gridlane-runas", user, str(int(min_uid)), workdir, *command]


def error(stderr: str) -> FabricError | None:
    """The FabricError for a guard's or sudo's refusal in a command's stderr; None when neither refused."""
    for line in stderr.splitlines():
        line = line.strip()
        if line.startswith(MARK):
            return FabricError(f"cannot run as the person: {line[len(MARK) :].strip()}", retryable=False)
        if line.startswith("sudo:"):
            return FabricError(
                f"the submit account may not run this as the person ({line}); IT grants it in sudoers",
                retryable=False,
            )
    return None

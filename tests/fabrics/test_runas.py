"""The guard in front of `sudo -u` (fabrics/ssh/runas.py): names it refuses before anything runs, and how refusals read.

The guard itself runs for real in tests/fabrics/slurm/test_run_as.py; here, what never reaches it.
"""

from __future__ import annotations

import pytest

from fabrics.ssh import runas


@pytest.mark.parametrize("user", ["root", "", "Alice", "a b", "-u", "x;id", "$(id)", "a" * 33, "#0"])
def test_what_is_no_posix_user_name_never_reaches_a_command_line(user):
    with pytest.raises(ValueError, match="is not a POSIX user name"):
        runas.argv(user, 1000, ["sbatch"])


def test_the_command_runs_behind_the_guard_as_argv_never_joined_into_a_shell_line():
    argv = runas.argv("gl-alice", 1000, ["sbatch", "--parsable", "--account=gl-vision"], workdir=".gridlane")
    assert argv[:3] == ["sh", "-c", runas.GUARD]
    assert argv[3:] == [
        "gridlane-runas",
        "gl-alice",
        "1000",
        ".gridlane",
        "sbatch",
        "--parsable",
        "--account=gl-vision",
    ]
    assert "\n" not in runas.GUARD  # one line: it travels inside scripts that use here-documents


@pytest.mark.parametrize(
    ("stderr", "said"),
    [
        ("gridlane-runas: there is no user gl-bob on vm\n", "cannot run as the person: there is no user gl-bob on vm"),
        ("sudo: a password is required\n", "may not run this as the person (sudo: a password is required)"),
    ],
)
def test_a_refusal_is_an_error_no_retry_helps(stderr, said):
    error = runas.error(stderr)
    assert error is not None
    assert not error.retryable
    assert said in str(error)


def test_other_failures_are_left_to_the_caller():
    assert runas.error("sbatch: error: Batch job submission failed: Invalid account\n") is None

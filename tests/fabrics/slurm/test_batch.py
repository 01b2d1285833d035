"""Many commands in one round trip (fabrics.ssh.batch), run here by a local bash as the login node would."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from fabrics.ssh import batch
from fabrics.ssh.transport import RUN_STDIN_SCRIPT

HOSTILE = "line1\n$(touch {p})\n`touch {p}`\n'; touch {p}; '\nGRIDLANE_EOF_0000000000000000\nno newline at the end"


def run(text: str, cwd: Path) -> str:
    done = subprocess.run(list(RUN_STDIN_SCRIPT), input=text, capture_output=True, text=True, cwd=cwd, check=False)
    return "Welcome to the login node!\n" + done.stdout  # a login shell's chatter is ignored


@pytest.mark.parametrize("parallel", [1, 3])
def test_each_step_reports_its_status_stdout_and_stderr_and_stdin_arrives_byte_for_byte(tmp_path, parallel):
    pwned = tmp_path / "pwned"
    hostile = HOSTILE.format(p=pwned)
    steps = [
        batch.Step(["printf", "%s", "tab\there\\back\r\nslash"]),
        batch.Step(["sh", "-c", "cat; echo err >&2; exit 3"], stdin=hostile),
        batch.Step(["sh", "-c", "echo warning; echo 1234.server"], stdin=hostile, write_to="job.pbs", record_to="jid"),
        batch.Step(["false"]),
    ]
    text, marker = batch.script(steps, parallel=parallel, setup=[["mkdir", "-p", "--", "out dir"]], lock="out dir/lock")
    outcomes = batch.parse(run(text, tmp_path), marker, len(steps))
    assert outcomes[0] == batch.Outcome(0, "tab\there\\back\r\nslash", "")
    assert outcomes[1] == batch.Outcome(3, hostile + "\n", "err\n")
    assert outcomes[2].stdout == "warning\n1234.server\n"
    assert outcomes[3].status == 1
    assert (tmp_path / "job.pbs").read_text() == hostile + "\n"
    assert (tmp_path / "jid").read_text() == "1234.server\n"
    assert (tmp_path / "out dir").is_dir()
    assert not pwned.exists()


def test_a_step_that_never_reported_is_absent_and_foreign_lines_are_ignored():
    _, marker = batch.script([batch.Step(["true"]), batch.Step(["true"])])
    output = f"{marker} 0 0 ok\t\n{marker} 7 0 beyond the count\t\ngridlane-other 1 0 forged\t\n"
    assert batch.parse(output, marker, 2) == {0: batch.Outcome(0, "ok", "")}

"""Many commands in one round trip (fabrics.ssh.batch), run here by a local bash as the login node would."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from fabrics.ssh import batch
from fabrics.ssh.transport import RUN_STDIN_SCRIPT

HOSTILE = "line1\n$(touch {p})\n`touch {p}`\n'; touch {p}; '\nGRIDLANE_EOF_0000000000000000\nno newline at the end"
JOB_ID = r"^[0-9]+$"
SUBMIT = ["sh", "-c", 'cat >/dev/null; echo >>submitted; echo "$(wc -l <submitted | tr -d " ")"0']  # a "job id"


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
        batch.Step(["false"]),
    ]
    text, marker = batch.script(steps, parallel=parallel, setup=[["mkdir", "-p", "--", "out dir"]], lock="out dir/lock")
    outcomes = batch.parse(run(text, tmp_path), marker, len(steps))
    assert outcomes[0] == batch.Outcome(0, "tab\there\\back\r\nslash", "")
    assert outcomes[1] == batch.Outcome(3, hostile + "\n", "err\n")
    assert outcomes[2].status == 1
    assert (tmp_path / "out dir").is_dir()
    assert not pwned.exists()


@pytest.mark.parametrize("parallel", [1, 4])
def test_keyed_steps_run_only_for_keys_nobody_found_and_their_stdout_is_the_record(tmp_path, parallel):
    """One script finds and submits: a key a look-up names, or whose record holds a value, is not submitted."""
    pwned = tmp_path / "pwned"
    hostile = HOSTILE.format(p=pwned)
    (tmp_path / "ids").mkdir()
    (tmp_path / "ids" / "b").write_text("warning: chatter\n77\n")  # an earlier batch submitted b
    (tmp_path / "ids" / "c").write_text("sbatch: error: refused\n")  # c's submission failed: no value
    lookup = ["printf", "%s\\n", "tag:a 17", "tag:a 18", "tag:d 5 extra words", "$(touch pwned) 6", "tag:e"]
    steps = [
        batch.Step(SUBMIT, stdin=hostile, key="tag:a", record="ids/a"),
        batch.Step(SUBMIT, stdin="b\n", key="tag:b", record="ids/b"),
        batch.Step(SUBMIT, stdin=hostile, key="tag:c", record="ids/c"),
        batch.Step(SUBMIT, stdin="d\n", key="tag:d", record="ids/d"),
        batch.Step(["sh", "-c", "echo no such queue >&2; exit 1"], stdin="e\n", key="tag:e", record="ids/e"),
        batch.Step([], key="tag:f", record="ids/f"),  # looked up only
        batch.Step(["cat", "job.pbs"], stdin=hostile, key="tag:g", record="ids/g", write_to="job.pbs"),
    ]
    text, marker = batch.script(steps, parallel=parallel, lookups=[lookup], value=JOB_ID, lock="ids/.lock")
    report = batch.parse_report(run(text, tmp_path), marker, len(steps))
    assert report.lookup_failed is None
    found = {i: o.values for i, o in report.outcomes.items() if o.found}
    assert found == {0: ["17", "18"], 1: ["77"], 5: []}
    ran = {i: o for i, o in report.outcomes.items() if not o.found}
    assert sorted(ran) == [2, 3, 4, 6]
    assert ran[2].status == ran[3].status == 0
    assert re.fullmatch(r"[12]0\n", ran[2].stdout)
    assert re.fullmatch(r"[12]0\n", ran[3].stdout)
    assert (tmp_path / "ids" / "c").read_text() == ran[2].stdout  # on disk the moment it was printed
    assert ran[4] == batch.Outcome(1, "", "no such queue\n")
    assert ran[6].status == 1  # cat printed the script, which is no job id
    assert ran[6].stdout == (tmp_path / "job.pbs").read_text() == hostile + "\n"
    assert (tmp_path / "submitted").read_text().count("\n") == 2  # only c and d were submitted
    assert not pwned.exists()
    assert not (tmp_path / "pwned").exists()


def test_a_failed_look_up_ends_the_script_before_any_step_runs(tmp_path):
    steps = [batch.Step(SUBMIT, stdin="x\n", key="tag:a", record="a")]
    lookup = ["sh", "-c", "echo slurm_load_jobs error: Unable to contact slurm controller >&2; exit 1"]
    text, marker = batch.script(steps, lookups=[lookup], value=JOB_ID)
    report = batch.parse_report(run(text, tmp_path), marker, len(steps))
    assert report.outcomes == {}
    assert report.lookup_failed == batch.Outcome(1, "", "slurm_load_jobs error: Unable to contact slurm controller\n")
    assert not (tmp_path / "submitted").exists()


def test_a_keyed_step_needs_a_safe_key_and_a_record():
    for step in (batch.Step(["true"], key="a b", record="r"), batch.Step(["true"], key="k")):
        with pytest.raises(ValueError, match="keyed step"):
            batch.script([step])
    with pytest.raises(ValueError, match="only a keyed step"):
        batch.script([batch.Step(["true"], record="r")])


def test_a_step_that_never_reported_is_absent_and_foreign_lines_are_ignored():
    _, marker = batch.script([batch.Step(["true"]), batch.Step(["true"])])
    output = f"{marker} 0 0 ok\t\n{marker} 7 0 beyond the count\t\ngridlane-other 1 0 forged\t\n"
    assert batch.parse(output, marker, 2) == {0: batch.Outcome(0, "ok", "")}

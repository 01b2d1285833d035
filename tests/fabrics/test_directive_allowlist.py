"""Every sbatch and qsub option against the allowlist, both ways: what Gridlane understands passes, what it
never takes from a script is refused even where IT lists it, and every other option is refused until IT
allows it on the queue target. Every spelling of a GPU, node, CPU, memory or time request is counted as the
fabric counts it, or refused, naming the line."""

from __future__ import annotations

import pytest

from fabrics import native
from fabrics.pbs import directives as pbs
from fabrics.slurm import directives as slurm
from fabrics.slurm.directives import DirectiveError, Directives

# A value each option takes in a script that read() accepts (the reader checks these; the others are passed).
SLURM_VALUES = {
    "nodes": "2", "ntasks": "4", "ntasks-per-node": "2", "cpus-per-task": "2", "cpus-per-gpu": "2", "gpus": "2",
    "gpus-per-node": "2", "gpus-per-task": "1", "gres": "gpu:2", "mem": "4G", "mem-per-cpu": "1G",
    "mem-per-gpu": "8G", "time": "10", "job-name": "train", "array": "0-3", "nice": "10", "exclusive": None,
    "output": "out.log", "error": "err.log", "open-mode": "append", "signal": "B:USR1@60",
}  # fmt: skip
NEEDS_GPUS = {"cpus-per-gpu", "mem-per-gpu"}


def slurm_script(option: str) -> str:
    takes = slurm.OPTIONS[option][1]
    value = SLURM_VALUES.get(option, "x")
    words = f"--{option}" if takes == "no" or value is None else f"--{option}={value}"
    gpus = "#SBATCH --gpus-per-node=2\n" if option in NEEDS_GPUS else ""
    return f"#!/bin/bash\n{gpus}#SBATCH {words}\nsrun x\n"


def slurm_policy(extra: tuple[str, ...] = ()) -> native.Policy:
    return native.Policy.of("slurm", {"node": {"gpus": 8, "cpus": 32, "memory_gb": 64}}, extra)


def refused_line(kind: str, script: str, policy: native.Policy) -> int | None:
    """The line Gridlane refuses (read, then the target's policy), or None when it takes the script."""
    try:
        policy.check(native.read(kind, script))
    except DirectiveError as error:
        return error.line
    return None


def line_of(script: str, option_words: str) -> int:
    return next(n for n, line in enumerate(script.split("\n"), start=1) if option_words in line)


@pytest.mark.parametrize("option", sorted(slurm.OPTIONS))
def test_every_sbatch_option_is_taken_only_as_the_allowlist_says(option):
    script = slurm_script(option)
    line = line_of(script, f"--{option}")
    if option in slurm.UNDERSTOOD:
        assert refused_line("slurm", script, slurm_policy()) is None, script
    elif option in slurm.NEVER:
        assert refused_line("slurm", script, slurm_policy()) == line
        with pytest.raises(ValueError, match="never taken from a script"):
            slurm_policy((option,))  # IT cannot list it either
    else:
        assert refused_line("slurm", script, slurm_policy()) == line  # refused until IT allows it
        assert refused_line("slurm", script, slurm_policy((option,))) is None


@pytest.mark.parametrize(
    ("spelling", "line"),
    [
        ("#SBATCH --priority=4294967000", 2), ("#SBATCH --prio=99999", 2), ("#SBATCH --nice=-10000", 2),
        ("#SBATCH --nice -1", 2), ("#SBATCH --uid=0", 2), ("#SBATCH --gid 0", 2), ("#SBATCH --get-user-env", 2),
        ("#SBATCH --get-user-env=10L", 2), ("#SBATCH --export=ALL", 2), ("#SBATCH --export-file=/etc/env", 2),
        ("#SBATCH -A other-team", 2), ("#SBATCH --account=other-team", 2), ("#SBATCH -q high", 2),
        ("#SBATCH --qos high", 2), ("#SBATCH --reservation=maint", 2), ("#SBATCH --comment=gridlane:x", 2),
        ("#SBATCH --wckey=x", 2), ("#SBATCH --gpus-per-socket=4", 2), ("#SBATCH --gpus-per-s=4", 2),
        ("#SBATCH --ntasks-per-gpu=2", 2), ("#SBATCH --sockets-per-node=2", 2), ("#SBATCH -B 2:8:2", 2),
        ("#SBATCH --mincpus=64", 2), ("#SBATCH --hint=multithread", 2), ("#SBATCH --overcommit", 2),
        ("#SBATCH -O", 2), ("#SBATCH --time-min=5", 2), ("#SBATCH -H", 2), ("#SBATCH --begin=now+1hour", 2),
        ("#SBATCH --gres=gpu:2,gpu:2", 2), ("#SBATCH --gres=nvme:1", 2), ("#SBATCH --gres=gpu:1,shard:8", 2),
        ("#SBATCH --tres-per-task=gres/gpu:4", 2), ("#SBATCH -N 1 --qos=high", 2), ("#SBATCH -N1 -qhigh", 2),
        ("#SBATCH --nodes=1\n#SBATCH --partition=gpu", 3), ("#SBATCH -p gpu", 2),
    ],
)  # fmt: skip
def test_what_changes_priority_identity_environment_charging_or_counts_is_refused_naming_the_line(spelling, line):
    assert refused_line("slurm", f"#!/bin/bash\n{spelling}\nsrun x\n", slurm_policy()) == line


def test_a_positive_nice_lowers_only_ones_own_priority_and_passes():
    assert refused_line("slurm", "#!/bin/bash\n#SBATCH --nice=100\nx\n", slurm_policy()) is None
    assert refused_line("slurm", "#!/bin/bash\n#SBATCH --nice\nx\n", slurm_policy()) is None


def test_an_option_the_target_forces_may_stand_in_the_script_its_value_is_never_honoured():
    policy = native.Policy.of("slurm", {"forced": {"partition": "gpu"}})
    assert refused_line("slurm", "#!/bin/bash\n#SBATCH --partition=cpu\nx\n", policy) is None
    forced_qos = native.Policy.of("slurm", {"forced": {"qos": "normal"}})
    assert refused_line("slurm", "#!/bin/bash\n#SBATCH --qos=high\nx\n", forced_qos) == 2  # never, forced or not


def counted(kind: str, script: str) -> Directives:
    read = native.read(kind, script)
    native.Policy.of(kind, {}).check(read)
    return read


@pytest.mark.parametrize(
    ("lines", "want"),
    [
        # (nodes, GPUs per node, CPUs per node, memory per node MiB or None, time s or None)
        ("#SBATCH --gpus-per-node=4", (1, 4, 1, None, None)),
        ("#SBATCH --gpus-per-node a100:4", (1, 4, 1, None, None)),
        ("#SBATCH --gres=gpu:4", (1, 4, 1, None, None)),
        ("#SBATCH --gres gpu:a100:4", (1, 4, 1, None, None)),
        ("#SBATCH --gres=gpu", (1, 1, 1, None, None)),
        ("#SBATCH -G 4", (1, 4, 1, None, None)),
        ("#SBATCH --gpus=8 -N 2", (2, 4, 1, None, None)),
        ("#SBATCH --gpus=h100:8\n#SBATCH --nodes 2", (2, 4, 1, None, None)),
        ("#SBATCH --ntasks-per-node=4 --gpus-per-task=2", (1, 8, 4, None, None)),
        ("#SBATCH -n 4\n#SBATCH --gpus-per-task 1", (1, 4, 4, None, None)),
        ("#SBATCH -N2 --ntasks-per-node=2 -c 8", (2, 0, 16, None, None)),
        ("#SBATCH --gpus-per-node=2 --cpus-per-gpu=6", (1, 2, 12, None, None)),
        ("#SBATCH --gpus-per-node=2 --mem-per-gpu=10G", (1, 2, 1, 20480, None)),
        ("#SBATCH -c 4 --mem-per-cpu=2G", (1, 0, 4, 8192, None)),
        ("#SBATCH --mem 64G", (1, 0, 1, 65536, None)),
        ("#SBATCH --mem=512", (1, 0, 1, 512, None)),
        ("#SBATCH -t 90", (1, 0, 1, None, 5400)),
        ("#SBATCH --time=1-00:00:00", (1, 0, 1, None, 86400)),
        ("#SBATCH --time 2:30:00", (1, 0, 1, None, 9000)),
        ("#SBATCH --nodes=2-4", (4, 0, 1, None, None)),
    ],
)
def test_every_slurm_spelling_of_a_request_is_counted_as_slurm_counts_it(lines, want):
    read = counted("slurm", f"#!/bin/bash\n{lines}\nx\n")
    assert (read.nodes, read.gpus_per_node, read.cpus_per_node, read.memory_mib, read.time_s) == want


@pytest.mark.parametrize(
    "lines",
    [
        "#SBATCH --gpus-per-node=4\n#SBATCH --gres=gpu:2",
        "#SBATCH --gpus=3 -N 2",
        "#SBATCH --mem=4G --mem-per-cpu=1G",
        "#SBATCH --mem=0",
        "#SBATCH --time=UNLIMITED",
        "#SBATCH --cpus-per-gpu=4",
        "#SBATCH --mem-per-gpu=4G",
        "#SBATCH --gpus-per-node=2 -c 2 --cpus-per-gpu=4",
    ],
)
def test_a_request_slurm_would_count_otherwise_or_not_at_all_is_refused(lines):
    with pytest.raises(DirectiveError):
        counted("slurm", f"#!/bin/bash\n{lines}\nx\n")


# qsub's options: a value each takes (the reader checks some).
PBS_VALUES = {"resource": "select=1:ncpus=2", "name": "train", "array": "0-3", "output": "out", "error": "err",
              "join": "oe"}  # fmt: skip


@pytest.mark.parametrize("letter", sorted(pbs.OPTIONS))
def test_every_qsub_option_is_taken_only_as_the_allowlist_says(letter):
    name, takes = pbs.OPTIONS[letter]
    script = f"#!/bin/bash\n#PBS -{letter}" + (f" {PBS_VALUES.get(name, 'x')}" if takes else "") + "\nx\n"
    policy = native.Policy.of("pbs", {})
    if name in pbs.UNDERSTOOD:
        assert refused_line("pbs", script, policy) is None, script
    elif name in pbs.NEVER:
        assert refused_line("pbs", script, policy) == 2
        with pytest.raises(ValueError, match="never taken from a script"):
            native.Policy.of("pbs", {}, (name,))
    else:
        assert refused_line("pbs", script, policy) == 2
        assert refused_line("pbs", script, native.Policy.of("pbs", {}, (name,))) is None


@pytest.mark.parametrize(
    ("lines", "want"),
    [
        ("#PBS -l select=2:ncpus=8:ngpus=2:mem=16gb", (2, 2, 8, 16384, None)),
        ("#PBS -l select=ncpus=4:ngpus=1", (1, 1, 4, None, None)),
        ("#PBS -l select=1:ncpus=4:mpiprocs=4:ngpus=4", (1, 4, 4, None, None)),
        ("#PBS -l nodes=2:ppn=8:gpus=1,mem=32gb", (2, 1, 8, 16384, None)),
        ("#PBS -l ngpus=4,ncpus=8", (1, 4, 8, None, None)),
        ("#PBS -l walltime=01:30:00", (1, 0, 1, None, 5400)),
        ("#PBS -l select=1:ncpus=2\n#PBS -l walltime=90", (1, 0, 2, None, 90)),
    ],
)
def test_every_pbs_spelling_of_a_request_is_counted_as_pbs_counts_it(lines, want):
    read = counted("pbs", f"#!/bin/bash\n{lines}\nx\n")
    assert (read.nodes, read.gpus_per_node, read.cpus_per_node, read.memory_mib, read.time_s) == want


@pytest.mark.parametrize(
    "lines",
    [
        "#PBS -l select=1:ncpus=2:ngpus=1+1:ncpus=4",
        "#PBS -l select=1:ncpus=2:accelerator_model=a100",
        "#PBS -l select=1:ncpus=2:host=node1",
        "#PBS -l select=1:ngpus=1,ngpus=4",
        "#PBS -l gpus=4",
        "#PBS -l nodect=4",
        "#PBS -l place=excl:group=switch",
        "#PBS -p 1023",
        "#PBS -W group_list=wheel",
        "#PBS -V",
        "#PBS -v PATH=/tmp",
        "#PBS -A other",
        "#PBS -P other",
        "#PBS -u root",
    ],
)
def test_a_pbs_request_it_would_count_otherwise_or_that_borrows_the_account_is_refused(lines):
    with pytest.raises(DirectiveError) as refused:
        counted("pbs", f"#!/bin/bash\n{lines}\nx\n")
    assert refused.value.line == 2

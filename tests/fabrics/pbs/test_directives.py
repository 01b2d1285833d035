"""The #PBS reader over scripts as PBS Pro and Torque users write them."""

from __future__ import annotations

from typing import Any

import pytest

from fabrics.pbs import directives
from fabrics.slurm.directives import DirectiveError

CASES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "pbspro-select-chunk",
        "#!/bin/bash\n#PBS -N train\n#PBS -l select=2:ncpus=16:ngpus=4:mem=64gb\n#PBS -l walltime=04:00:00\n"
        "cd $PBS_O_WORKDIR\nmpiexec ./a.out\n",
        dict(job_name="train", nodes=2, cpus_per_node=16, gpus_per_node=4, memory_mib=65536, time_s=14400),
    ),
    (
        "pbspro-mpiprocs",
        "#!/bin/bash\n#PBS -l select=1:ncpus=8:mpiprocs=4\nx\n",
        dict(tasks_per_node=4, cpus_per_task=2, cpus_per_node=8),
    ),
    (
        "torque-nodes-ppn",
        "#!/bin/bash\n#PBS -l nodes=2:ppn=8:gpus=2,mem=32gb,walltime=1:30:00\n#PBS -q batch\nx\n",
        dict(nodes=2, cpus_per_node=8, gpus_per_node=2, memory_mib=16384, time_s=5400, forceable={"queue": "batch"}),
    ),
    ("walltime-seconds", "#!/bin/bash\n#PBS -l walltime=600\nx\n", dict(time_s=600)),
    ("walltime-minutes-seconds", "#!/bin/bash\n#PBS -l walltime=10:30\nx\n", dict(time_s=630)),
    ("mem-bytes-default", "#!/bin/bash\n#PBS -l mem=1073741824\nx\n", dict(memory_mib=1024)),
    ("mem-megabytes", "#!/bin/bash\n#PBS -l mem=500mb\nx\n", dict(memory_mib=500)),
    ("attached-values", "#!/bin/bash\n#PBS -Nattached -lwalltime=00:05:00\nx\n", dict(job_name="attached", time_s=300)),
    ("pbspro-array", "#!/bin/bash\n#PBS -J 1-20%5\nx\n", dict(array="1-20%5")),
    ("torque-array", "#!/bin/bash\n#PBS -t 0-9\nx\n", dict(array="0-9")),
    ("pbspro-array-plain", "#!/bin/bash\n#PBS -J 0-99\nx\n", dict(array="0-99")),
    ("pbspro-array-step", "#!/bin/bash\n#PBS -J 0-99:2\nx\n", dict(array="0-99:2")),
    ("place-excl", "#!/bin/bash\n#PBS -l select=1:ncpus=4\n#PBS -l place=scatter:excl\nx\n", dict(exclusive=True)),
    (
        "after-first-command-ignored",
        "#!/bin/bash\n#PBS -l select=1:ncpus=2\ncd $PBS_O_WORKDIR\n#PBS -l select=4:ncpus=64\nx\n",
        dict(nodes=1, cpus_per_node=2),
    ),
    (
        "join-mail-env-pass-through",
        "#!/bin/bash\n#PBS -j oe\n#PBS -m abe\n#PBS -M a@example.test\n#PBS -V\n#PBS -o out.log\nx\n",
        dict(output="out.log", nodes=1),
    ),
    (
        "account-project",
        "#!/bin/bash\n#PBS -A acct1\n#PBS -P proj\nx\n",
        dict(forceable={"account": "acct1", "project": "proj"}),
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), CASES, ids=[c[0] for c in CASES])
def test_reads_what_the_script_asks_for(name: str, text: str, expected: dict[str, Any]) -> None:
    read = directives.read(text)
    for key, value in expected.items():
        assert getattr(read, key) == value, key


ERRORS: list[tuple[str, str, int, str]] = [
    ("no-shebang", "#PBS -N x\nx\n", 1, "#!"),
    ("unknown-option", "#!/bin/bash\n#PBS -Y 2\nx\n", 2, "-Y"),
    ("bad-size", "#!/bin/bash\n#PBS -l select=1:mem=4gib\nx\n", 2, "mem=4gib"),
    ("bad-walltime", "#!/bin/bash\n#PBS -l walltime=1h\nx\n", 2, "walltime=1h"),
    ("depend-refused", "#!/bin/bash\n#PBS -W depend=afterok:12.server\nx\n", 2, "depend"),
    ("interactive-refused", "#!/bin/bash\n#PBS -I\nx\n", 2, "interactive"),
    ("mixed-chunks", "#!/bin/bash\n#PBS -l select=1:ncpus=8+2:ncpus=4\nx\n", 2, "several kinds"),
    ("bad-array", "#!/bin/bash\n#PBS -J x\nx\n", 2, "-J"),
    ("missing-value", "#!/bin/bash\n#PBS -N\nx\n", 2, "needs a value"),
]


@pytest.mark.parametrize(("name", "text", "line", "words"), ERRORS, ids=[e[0] for e in ERRORS])
def test_refuses_naming_the_line(name: str, text: str, line: int, words: str) -> None:
    with pytest.raises(DirectiveError) as caught:
        directives.read(text)
    assert caught.value.line == line
    assert words in str(caught.value)

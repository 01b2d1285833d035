"""The #SBATCH reader over a table of scripts as people write them: what each asks for, or the line it refuses."""

from __future__ import annotations

import textwrap
from typing import Any

import pytest

from fabrics.base import Resources
from fabrics.slurm import directives
from fabrics.slurm.directives import DirectiveError


def script(text: str) -> str:
    return textwrap.dedent(text).lstrip("\n")


# The multi-node PyTorch script of the Slurm-vs-Kueue write-up, as written (its `//` banner lines removed).
WRITEUP = script("""
    #!/bin/bash
    #SBATCH --job-name=multinode-example
    #SBATCH --nodes=2
    #SBATCH --ntasks-per-node=8
    #SBATCH --gpus-per-node=8
    #SBATCH --cpus-per-task=12
    #SBATCH --mem=1000G
    #SBATCH --time=04:00:00
    #SBATCH --output=%x-%j.out

    nodes=( $( scontrol show hostnames $SLURM_JOB_NODELIST ) )
    head_node=${nodes[0]}
    export MASTER_ADDR=$(srun --nodes=1 --ntasks=1 -w "$head_node" hostname --ip-address)
    srun torchrun --nnodes $SLURM_NNODES --nproc_per_node $SLURM_GPUS_PER_NODE \\
        --rdzv_id $RANDOM --rdzv_backend c10d --rdzv_endpoint $MASTER_ADDR:29500 train.py
    """)

# (id, script, expected fields of Directives; per_node is Resources from per_node())
CASES: list[tuple[str, str, dict[str, Any]]] = [
    (
        "writeup-multinode-torchrun",
        WRITEUP,
        dict(
            nodes=2,
            tasks_per_node=8,
            cpus_per_task=12,
            gpus_per_node=8,
            memory_mib=1000 * 1024,
            time_s=4 * 3600,
            job_name="multinode-example",
            output="%x-%j.out",
            per_node=Resources(8000, 96000, 1024000),
        ),
    ),
    (
        "minimal-no-directives",
        "#!/bin/bash\necho hello\n",
        dict(nodes=1, tasks_per_node=1, cpus_per_task=1, gpus_per_node=0, memory_mib=None, time_s=None),
    ),
    (
        "short-forms-separate",
        script("""
            #!/bin/bash
            #SBATCH -J short
            #SBATCH -N 3
            #SBATCH -n 12
            #SBATCH -c 2
            #SBATCH -t 90
            #SBATCH -p gpu
            #SBATCH -A proj123
            #SBATCH -o out.%j
            #SBATCH -e err.%j
            hostname
            """),
        dict(
            job_name="short",
            nodes=3,
            tasks_per_node=4,
            cpus_per_task=2,
            time_s=90 * 60,
            output="out.%j",
            error="err.%j",
            forceable={"partition": "gpu", "account": "proj123"},
        ),
    ),
    (
        "short-forms-attached",
        "#!/bin/bash\n#SBATCH -N2 -n8 -c4 -t1:00:00 -Jattached\nsrun hostname\n",
        dict(nodes=2, tasks_per_node=4, cpus_per_task=4, time_s=3600, job_name="attached"),
    ),
    (
        "long-forms-space-separated",
        "#!/bin/bash\n#SBATCH --nodes 2 --ntasks-per-node 4 --time 2-00:00:00\nsrun x\n",
        dict(nodes=2, tasks_per_node=4, time_s=2 * 86400),
    ),
    (
        "several-options-on-one-line-with-comment",
        "#!/bin/bash\n#SBATCH --nodes=1 --cpus-per-task=8  # eight cores for the data loader\npython x.py\n",
        dict(nodes=1, cpus_per_task=8),
    ),
    (
        "abbreviated-long-option",
        "#!/bin/bash\n#SBATCH --ntasks-per-n=2\n#SBATCH --cpus-per-t=3\nsrun x\n",
        dict(tasks_per_node=2, cpus_per_task=3),
    ),
    (
        "directives-after-first-command-ignored",
        script("""
            #!/bin/bash
            #SBATCH --nodes=1
            module load cuda
            #SBATCH --nodes=4
            #SBATCH --gpus-per-node=8
            srun x
            """),
        dict(nodes=1, gpus_per_node=0),
    ),
    (
        "comments-and-blank-lines-before-directives",
        script("""
            #!/bin/bash
            # Training job for the ranking model.

            #   (owner: ml-platform)
            #SBATCH --gpus-per-node=2
              # indented comment
            #SBATCH --mem=32G
            python train.py
            """),
        dict(gpus_per_node=2, memory_mib=32 * 1024),
    ),
    (
        "indented-sbatch-is-a-comment",
        "#!/bin/bash\n  #SBATCH --nodes=4\n#SBATCH --nodes=2\nsrun x\n",
        dict(nodes=2),
    ),
    (
        "old-slurm-magic-word",
        "#!/bin/bash\n#SLURM --ntasks=2\nsrun x\n",
        dict(tasks_per_node=2),
    ),
    (
        "commented-out-directive",
        "#!/bin/bash\n##SBATCH --nodes=8\n#SBATCH --nodes=1\nsrun x\n",
        dict(nodes=1),
    ),
    (
        "gres-plain-count",
        "#!/bin/bash\n#SBATCH --gres=gpu:4\npython x.py\n",
        dict(gpus_per_node=4, gpu_type=""),
    ),
    (
        "gres-typed",
        "#!/bin/bash\n#SBATCH --gres=gpu:a100:2\npython x.py\n",
        dict(gpus_per_node=2, gpu_type="a100"),
    ),
    (
        "gres-bare-gpu-is-one",
        "#!/bin/bash\n#SBATCH --gres=gpu\npython x.py\n",
        dict(gpus_per_node=1),
    ),
    (
        "gres-with-other-resources",
        "#!/bin/bash\n#SBATCH --gres=gpu:h100:8,nvme:1\npython x.py\n",
        dict(gpus_per_node=8, gpu_type="h100"),
    ),
    (
        "gpus-per-node-typed",
        "#!/bin/bash\n#SBATCH --gpus-per-node=h100:4\npython x.py\n",
        dict(gpus_per_node=4, gpu_type="h100"),
    ),
    (
        "gpus-per-task-times-tasks",
        "#!/bin/bash\n#SBATCH --ntasks-per-node=4\n#SBATCH --gpus-per-task=1\nsrun x\n",
        dict(gpus_per_node=4, tasks_per_node=4),
    ),
    (
        "gpus-total-over-nodes",
        "#!/bin/bash\n#SBATCH -N 2\n#SBATCH -G 8\nsrun x\n",
        dict(nodes=2, gpus_per_node=4),
    ),
    (
        "gpus-agreeing-two-ways",
        "#!/bin/bash\n#SBATCH --gpus-per-node=4\n#SBATCH --gres=gpu:4\nsrun x\n",
        dict(gpus_per_node=4),
    ),
    (
        "cpus-per-gpu",
        "#!/bin/bash\n#SBATCH --gpus-per-node=2\n#SBATCH --cpus-per-gpu=6\nsrun x\n",
        dict(gpus_per_node=2, cpus_per_task=12, per_node=Resources(2000, 12000, 12 * 1024)),
    ),
    (
        "mem-per-cpu",
        "#!/bin/bash\n#SBATCH --ntasks=4\n#SBATCH --cpus-per-task=2\n#SBATCH --mem-per-cpu=2G\nsrun x\n",
        dict(memory_mib=4 * 2 * 2048, per_node=Resources(0, 8000, 16384)),
    ),
    (
        "mem-per-gpu",
        "#!/bin/bash\n#SBATCH --gpus-per-node=4\n#SBATCH --mem-per-gpu=80G\nsrun x\n",
        dict(memory_mib=4 * 80 * 1024),
    ),
    (
        "mem-units",
        "#!/bin/bash\n#SBATCH --mem=2t\nsrun x\n",
        dict(memory_mib=2 * 1024 * 1024),
    ),
    (
        "mem-gigabytes-with-b",
        "#!/bin/bash\n#SBATCH --mem=16GB\nsrun x\n",
        dict(memory_mib=16 * 1024),
    ),
    (
        "mem-default-unit-is-megabytes",
        "#!/bin/bash\n#SBATCH --mem=1500\nsrun x\n",
        dict(memory_mib=1500),
    ),
    (
        "mem-kilobytes-round-up",
        "#!/bin/bash\n#SBATCH --mem=1025K\nsrun x\n",
        dict(memory_mib=2),
    ),
    ("time-minutes", "#!/bin/bash\n#SBATCH --time=30\nx\n", dict(time_s=1800)),
    ("time-minutes-seconds", "#!/bin/bash\n#SBATCH --time=30:15\nx\n", dict(time_s=1815)),
    ("time-hms", "#!/bin/bash\n#SBATCH --time=12:00:00\nx\n", dict(time_s=43200)),
    ("time-days-hours", "#!/bin/bash\n#SBATCH --time=1-12\nx\n", dict(time_s=86400 + 12 * 3600)),
    ("time-days-hours-minutes", "#!/bin/bash\n#SBATCH --time=2-03:30\nx\n", dict(time_s=2 * 86400 + 12600)),
    ("time-days-hms", "#!/bin/bash\n#SBATCH -t 0-00:05:30\nx\n", dict(time_s=330)),
    (
        "exclusive-whole-node",
        "#!/bin/bash\n#SBATCH --exclusive\n#SBATCH -N 2\nsrun x\n",
        dict(exclusive=True, nodes=2, per_node=Resources(8000, 32000, 64000)),
    ),
    (
        "array-with-throttle",
        "#!/bin/bash\n#SBATCH --array=0-99%10\n#SBATCH -o logs/%A_%a.out\npython sweep.py $SLURM_ARRAY_TASK_ID\n",
        dict(array="0-99%10", output="logs/%A_%a.out"),
    ),
    ("array-list-and-step", "#!/bin/bash\n#SBATCH -a 1,3,5-11:2\nx\n", dict(array="1,3,5-11:2")),
    (
        "quoted-job-name",
        "#!/bin/bash\n#SBATCH --job-name=\"bert-large\"\n#SBATCH --comment='nightly run'\nx\n",
        dict(job_name="bert-large"),
    ),
    (
        "qos-constraint-reservation",
        "#!/bin/bash\n#SBATCH --qos=high\n#SBATCH -C a100&ib\n#SBATCH --reservation=maint\nx\n",
        dict(forceable={"qos": "high", "constraint": "a100&ib", "reservation": "maint"}),
    ),
    (
        "last-value-wins",
        "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --nodes=3\nx\n",
        dict(nodes=3),
    ),
    (
        "node-range-plans-with-the-most",
        "#!/bin/bash\n#SBATCH --nodes=2-4\nx\n",
        dict(nodes=4),
    ),
    (
        "mail-and-misc-pass-through",
        script("""
            #!/bin/bash
            #SBATCH --mail-type=END,FAIL
            #SBATCH --mail-user=someone@example.test
            #SBATCH --requeue
            #SBATCH --signal=B:USR1@300
            #SBATCH --open-mode=append
            #SBATCH --export=ALL
            x
            """),
        dict(nodes=1, time_s=None),
    ),
    (
        "crlf-line-ends",
        "#!/bin/bash\r\n#SBATCH --nodes=2\r\n#SBATCH --time=10\r\nsrun x\r\n",
        dict(nodes=2, time_s=600),
    ),
    (
        "python-interpreter",
        "#!/usr/bin/env python3\n#SBATCH --cpus-per-task=4\nimport os\nprint(os.environ['SLURM_JOB_ID'])\n",
        dict(cpus_per_task=4),
    ),
]


@pytest.mark.parametrize(("name", "text", "expected"), CASES, ids=[c[0] for c in CASES])
def test_reads_what_the_script_asks_for(name: str, text: str, expected: dict[str, Any]) -> None:
    read = directives.read(text)
    expected = dict(expected)
    per_node = expected.pop("per_node", None)
    for key, value in expected.items():
        assert getattr(read, key) == value, key
    if per_node is not None:
        assert read.per_node(node=Resources(8000, 32000, 64000)) == per_node


def test_the_table_is_large_enough() -> None:
    assert len(CASES) >= 30


# (id, script, the line named, words the message carries)
ERRORS: list[tuple[str, str, int, str]] = [
    ("no-shebang", "#SBATCH --nodes=1\nsrun x\n", 1, "#!"),
    ("unknown-long-option", "#!/bin/bash\n#SBATCH --nodes=1\n#SBATCH --gpus-per-nod3=2\nx\n", 3, "--gpus-per-nod3"),
    ("unknown-short-option", "#!/bin/bash\n#SBATCH -Z 2\nx\n", 2, "-Z"),
    ("ambiguous-prefix", "#!/bin/bash\n#SBATCH --mem-per=2G\nx\n", 2, "ambiguous"),
    ("missing-value", "#!/bin/bash\n#SBATCH --nodes\nx\n", 2, "needs a value"),
    (
        "gpus-contradict",
        "#!/bin/bash\n#SBATCH --gpus-per-node=8\n#SBATCH --gres=gpu:4\nx\n",
        3,
        "--gpus-per-node=8 (line 2)",
    ),
    ("gpu-types-contradict", "#!/bin/bash\n#SBATCH --gres=gpu:a100:2\n#SBATCH --gpus-per-node=h100:2\nx\n", 3, "GPUs"),
    ("bad-memory-unit", "#!/bin/bash\n#SBATCH --mem=16Q\nx\n", 2, "--mem=16Q"),
    ("bytes-are-no-unit", "#!/bin/bash\n#SBATCH --mem=16B\nx\n", 2, "--mem=16B"),
    ("memory-words", "#!/bin/bash\n#SBATCH --mem=lots\nx\n", 2, "size"),
    ("two-memory-options", "#!/bin/bash\n#SBATCH --mem=4G\n#SBATCH --mem-per-cpu=1G\nx\n", 3, "give one"),
    ("mem-zero", "#!/bin/bash\n#SBATCH --mem=0\nx\n", 2, "--mem=0"),
    ("bad-time", "#!/bin/bash\n#SBATCH --time=1h\nx\n", 2, "--time=1h"),
    ("infinite-time", "#!/bin/bash\n#SBATCH --time=UNLIMITED\nx\n", 2, "time limit"),
    ("dependency-refused", "#!/bin/bash\n#SBATCH --dependency=afterok:123\nx\n", 2, "another Slurm job"),
    ("dependency-short", "#!/bin/bash\n#SBATCH -d singleton\nx\n", 2, "--dependency"),
    ("bad-array", "#!/bin/bash\n#SBATCH --array=a-b\nx\n", 2, "--array"),
    ("bad-node-count", "#!/bin/bash\n#SBATCH -N 0\nx\n", 2, "--nodes"),
    ("bad-cpus", "#!/bin/bash\n#SBATCH -c two\nx\n", 2, "--cpus-per-task"),
    ("unmatched-quote", "#!/bin/bash\n#SBATCH --job-name='open\nx\n", 2, "quote"),
    ("stray-argument", "#!/bin/bash\n#SBATCH --nodes=1 extra\nx\n", 2, "'extra'"),
    ("flag-with-value", "#!/bin/bash\n#SBATCH --requeue=yes\nx\n", 2, "takes no value"),
    ("uneven-gpus", "#!/bin/bash\n#SBATCH -N 3\n#SBATCH --gpus=4\nx\n", 3, "evenly"),
    ("mem-per-gpu-without-gpus", "#!/bin/bash\n#SBATCH --mem-per-gpu=10G\nx\n", 2, "without GPUs"),
    ("wrap-refused", "#!/bin/bash\n#SBATCH --wrap=hostname\nx\n", 2, "--wrap"),
]


@pytest.mark.parametrize(("name", "text", "line", "words"), ERRORS, ids=[e[0] for e in ERRORS])
def test_refuses_naming_the_line(name: str, text: str, line: int, words: str) -> None:
    with pytest.raises(DirectiveError) as caught:
        directives.read(text)
    assert caught.value.line == line
    assert str(caught.value).startswith(f"line {line}: ")
    assert words in str(caught.value)


def test_keeps_every_directive_with_its_line() -> None:
    read = directives.read(WRITEUP)
    assert [(d.line, d.option, d.value) for d in read.directives][:3] == [
        (2, "job-name", "multinode-example"),
        (3, "nodes", "2"),
        (4, "ntasks-per-node", "8"),
    ]
    mem = read.given("mem")
    assert mem is not None
    assert mem.text == "#SBATCH --mem=1000G"


def test_memory_defaults_per_cpu_when_the_script_gives_none() -> None:
    read = directives.read("#!/bin/bash\n#SBATCH -c 4\nx\n")
    assert read.per_node(default_mem_per_cpu_mib=256) == Resources(0, 4000, 1024)


def test_queue_policy_names_the_forbidden_line() -> None:
    read = directives.read("#!/bin/bash\n#SBATCH -N 1\n#SBATCH --partition=debug\nx\n")
    with pytest.raises(DirectiveError, match=r"^line 3: --partition"):
        directives.check_policy(read.directives, allowed=None, forbidden=["partition"])
    with pytest.raises(DirectiveError, match=r"^line 2: --nodes"):
        directives.check_policy(read.directives, allowed=["partition"], forbidden=[])
    directives.check_policy(read.directives, allowed=["nodes", "partition"], forbidden=["qos"])

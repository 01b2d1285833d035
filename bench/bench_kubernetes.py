"""Jobs created per second: Gridlane's Kubernetes fabric on the worker's dispatch path vs a direct loop.

Both sides use the same official client against the same API double (tests/k8s_double, over HTTP on
127.0.0.1, its simulated kubelet off so only the API is measured), each round on a fresh double.

    gridlane  what portal/worker/dispatch.py does per batch of admitted work: render each job for the
              record, find_many (one LIST by label selector), then submit_many (render, create)
    direct    a loop of create_namespaced_job over manifests built before the clock starts (the same
              manifests Gridlane renders), as a script using the client by hand would

The ratio is gridlane / direct in Jobs per second (>= 0.9 is the goal): what Gridlane's bookkeeping
costs on top of the bare API calls.

Arrays, side by side on the same path: ELEMENTS elements of one array, admitted BATCH at a time, placed as
the worker places them (render, place_many), once as an array (an Indexed Job and its Secret per admitted
batch) and once as ordinary workloads (a Job each): objects created and elements placed per CPU-second.

Client and double share one process, so on a quiet machine a round's rate is JOBS over the process's CPU
time; that is the headline, because on a busy machine the clock mostly measures the neighbours. The
clock's ratio is printed alongside.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import uuid
from dataclasses import replace
from pathlib import Path
from typing import Any

from fabrics.base import FabricConfig, JobSpec, Resources, find_many, place_many, submit_many
from fabrics.kubernetes.render import render
from fabrics.kubernetes.settings import KubeSettings
from fabrics.registry import connect
from tests.k8s_double import ApiDouble

JOBS = 300
BATCH = 50  # workloads one dispatch hands a fabric at once
ROUNDS = 9
NAMESPACE = "bench"
TEMPLATE = """\
spec:
  containers:
  - name: main
    image: registry.example.org/ml/pytorch:24.05
    command: ["/bin/bash", "-lc"]
"""


def specs(n: int) -> list[JobSpec]:
    return [
        JobSpec(
            workload_id=uuid.uuid4(),
            name=f"bench-{i}",
            kind="training",
            owner="alice",
            group="vision",
            queue="k8s-train",
            command=f"python train.py --seed {i}",
            per_node=Resources(1000, 4000, 16384),
            runtime_limit_s=3600,
            template=TEMPLATE,
        )
        for i in range(n)
    ]


def gridlane_round(kubeconfig: Path) -> tuple[float, float]:
    """Wall and CPU seconds to dispatch JOBS workloads through the adapter, as the worker does."""
    settings = {"kubeconfig": str(kubeconfig), "namespace": NAMESPACE, "gpu_flavor": "h100"}
    fabric = connect(FabricConfig("bench", "kubernetes", Resources(10**6, 10**6, 10**9), settings))
    fabric.find(uuid.uuid4())  # connect and warm up outside the clock, as a worker between cycles is
    jobs = specs(JOBS)
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(0, JOBS, BATCH):
        batch = jobs[i : i + BATCH]
        for job in batch:
            fabric.render(job)  # 1. record intent: the manifest is stored on the workload
        placed = find_many(fabric, [job.workload_id for job in batch])  # 2. find what a crash left
        results = submit_many(fabric, [job for job in batch if job.workload_id not in placed])  # 3. submit
        if not all(isinstance(r, str) for r in results.values()):
            raise RuntimeError(f"Gridlane failed to create jobs: {results}")
    return time.perf_counter() - started, time.process_time() - cpu


def direct_round(kubeconfig: Path) -> tuple[float, float]:
    """Wall and CPU seconds for a loop of create_namespaced_job with the same client, manifests made beforehand."""
    from kubernetes import client
    from kubernetes import config as kube_config

    config: Any = kube_config  # its loaders carry no annotations
    configuration = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration, persist_config=False)
    batch_api: Any = client.BatchV1Api(client.ApiClient(configuration))  # takes manifests as dicts too
    batch_api.list_namespaced_job(NAMESPACE, limit=1)  # connect and warm up outside the clock
    settings = KubeSettings.parse({"gpu_flavor": "h100"})
    bodies = [render(job, settings, NAMESPACE).job for job in specs(JOBS)]
    started, cpu = time.perf_counter(), time.process_time()
    for body in bodies:
        batch_api.create_namespaced_job(NAMESPACE, body)
    return time.perf_counter() - started, time.process_time() - cpu


def one_round(kind: str) -> tuple[float, float]:
    with ApiDouble(namespaces=(NAMESPACE,), simulate=False) as double, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = double.kubeconfig(Path(tmp) / "kubeconfig", namespace=NAMESPACE)
        seconds = gridlane_round(kubeconfig) if kind == "gridlane" else direct_round(kubeconfig)
        created = len(double.objects("jobs", NAMESPACE))
        if created != JOBS:
            raise RuntimeError(f"{kind}: {created} Jobs on the double, expected {JOBS}")
        return seconds


ELEMENTS = 300


def array_round(as_array: bool) -> tuple[float, int]:
    """CPU seconds to place ELEMENTS elements of one array BATCH at a time, and the objects made on the cluster."""
    with ApiDouble(namespaces=(NAMESPACE,), simulate=False) as double, tempfile.TemporaryDirectory() as tmp:
        kubeconfig = double.kubeconfig(Path(tmp) / "kubeconfig", namespace=NAMESPACE)
        settings = {"kubeconfig": str(kubeconfig), "namespace": NAMESPACE, "gpu_flavor": "h100"}
        fabric = connect(FabricConfig("bench", "kubernetes", Resources(10**6, 10**6, 10**9), settings))
        fabric.find(uuid.uuid4())  # connect and warm up outside the clock
        array_id = str(uuid.uuid4())
        jobs = [  # one array: the same command, each element its own index
            replace(
                job,
                command="python train.py --seed $GRIDLANE_ARRAY_INDEX",
                array=str(i),
                array_id=array_id if as_array else "",
                env={"GRIDLANE_ARRAY_INDEX": str(i)},
            )
            for i, job in enumerate(specs(ELEMENTS))
        ]
        cpu = time.process_time()
        for i in range(0, ELEMENTS, BATCH):
            batch = jobs[i : i + BATCH]
            for job in batch:
                fabric.render(job)  # 1. record intent
            placed = place_many(fabric, batch, fresh={job.workload_id for job in batch})  # 2. and 3.
            if not all(isinstance(r, str) for r in placed.values()):
                raise RuntimeError(f"Gridlane failed to place elements: {placed}")
        seconds = time.process_time() - cpu
        return seconds, len(double.objects("jobs", NAMESPACE)) + len(double.objects("secrets", NAMESPACE))


def run_arrays() -> dict[str, Any]:
    cpu: dict[bool, list[float]] = {True: [], False: []}
    made: dict[bool, int] = {}
    for _ in range(5):
        for as_array in (False, True):
            seconds, made[as_array] = array_round(as_array)
            cpu[as_array].append(seconds)
    per_cpu_s = {kind: ELEMENTS / statistics.median(seconds) for kind, seconds in cpu.items()}
    print(f"{ELEMENTS} elements of one array, admitted {BATCH} at a time, medians of 5 interleaved rounds")
    print(f"  {'':34} {'objects made':>12} {'elements/CPU-s':>15}")
    for kind, label in ((True, "as an array (Indexed Job + Secret)"), (False, "a Job per element")):
        print(f"  {label:34} {made[kind]:12d} {per_cpu_s[kind]:15.0f}")
    print(f"  ratio array/per element: {per_cpu_s[True] / per_cpu_s[False]:.2f}x elements per CPU-second")
    return {
        "array_elements": ELEMENTS,
        "array_objects": made[True],
        "per_element_objects": made[False],
        "array_elements_per_cpu_s": round(per_cpu_s[True], 1),
        "per_element_elements_per_cpu_s": round(per_cpu_s[False], 1),
        "array_ratio": round(per_cpu_s[True] / per_cpu_s[False], 3),
    }


def run() -> dict[str, Any]:
    one_round("direct")  # the first use of the client imports its models: keep that out of both sides
    wall: dict[str, list[float]] = {"gridlane": [], "direct": []}
    cpu: dict[str, list[float]] = {"gridlane": [], "direct": []}
    for _ in range(ROUNDS):  # interleaved, so load from elsewhere on the machine falls on both alike
        for kind in ("direct", "gridlane"):
            seconds, cpu_seconds = one_round(kind)
            wall[kind].append(seconds)
            cpu[kind].append(cpu_seconds)
    per_s = {kind: JOBS / statistics.median(seconds) for kind, seconds in wall.items()}
    per_cpu_s = {kind: JOBS / statistics.median(seconds) for kind, seconds in cpu.items()}
    ratio = per_cpu_s["gridlane"] / per_cpu_s["direct"]
    wall_ratio = per_s["gridlane"] / per_s["direct"]
    print(f"{JOBS} Jobs per round, batches of {BATCH}, medians of {ROUNDS} interleaved rounds")
    print(f"  {'':44} {'Jobs/s':>8} {'Jobs/CPU-s':>11}")
    for kind, label in (("gridlane", "gridlane (render, find_many, submit_many)"), ("direct", "direct create loop")):
        print(f"  {label:44} {per_s[kind]:8.0f} {per_cpu_s[kind]:11.0f}")
    print(f"  ratio gridlane/direct: {ratio:.2f}x by CPU time, {wall_ratio:.2f}x by the clock (goal >= 0.9x)")
    return {
        "jobs": JOBS,
        "batch": BATCH,
        "rounds": ROUNDS,
        "gridlane_jobs_per_s": round(per_s["gridlane"], 1),
        "direct_jobs_per_s": round(per_s["direct"], 1),
        "gridlane_jobs_per_cpu_s": round(per_cpu_s["gridlane"], 1),
        "direct_jobs_per_cpu_s": round(per_cpu_s["direct"], 1),
        "ratio": round(ratio, 3),
        "wall_ratio": round(wall_ratio, 3),
    } | run_arrays()


if __name__ == "__main__":
    run()

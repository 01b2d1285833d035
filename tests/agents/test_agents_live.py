"""Two agents as real processes against a live Gridlane: order, contention, cancel, limits, lost hosts."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from portal.agents import services as agents
from portal.agents.models import AgentHost, Claim
from portal.queues.models import Fabric
from portal.usage.models import UsageSample
from portal.workloads import services
from portal.workloads.models import Workload
from portal.workloads.states import State
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# The job's bash is its process group's leader: its pid names the group, for cleanup after a SIGKILLed agent.
RECORD_GROUP = 'echo $$ > "$GRIDLANE_JOB_DIR/job.pid"; '


def state_of(w: Workload) -> str:
    w.refresh_from_db()
    return w.state


def reach(w: Workload, *states: State, timeout: float = 120) -> Workload:
    wait_until(lambda: state_of(w) in states, timeout=timeout, every=0.05)
    return w


def all_claimable(workloads: list[Workload]) -> bool:
    return Claim.objects.filter(workload__in=workloads, state="claimable").count() == len(workloads)


def online_already(hosts: dict, name: str = "host-1") -> None:
    """The pool counts a host before its agent process starts: an empty pool admits nothing."""
    agents.register(hosts["fabric"], name, {"queues": ["gpu-a", "gpu-b"], "cpus": 16, "memory_mib": 64 * 1024})


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    status = Path(f"/proc/{pid}/status")
    return not (status.exists() and "\nState:\tZ" in status.read_text())


def test_an_agent_serves_its_queues_in_order_and_reports_output_exit_and_usage(
    alice, submit, hosts, cycling, start_agent
):
    online_already(hosts)
    later = [submit(alice, queue="gpu-b", name=f"b{i}", command=f"echo from b{i}") for i in range(3)]
    first = [
        submit(alice, queue="gpu-a", name=f"a{i}", command=f"echo from a{i}; sleep 0.5; exit {i}") for i in range(3)
    ]
    wait_until(lambda: all_claimable(later + first))

    agent = start_agent("host-1", "gpu-a", "gpu-b")
    for w in first + later:
        reach(w, State.SUCCEEDED, State.FAILED)

    ran = agent.ran()
    assert ran == [str(w.run_id) for w in first + later]
    assert [w.exit_code for w in first] == [0, 1, 2]
    assert [w.state for w in first] == [State.SUCCEEDED, State.FAILED, State.FAILED]
    assert "from a1" in first[1].log_tail
    assert all(w.host == "host-1" for w in first + later)
    assert UsageSample.objects.filter(workload=first[0]).exists()  # it ran 0.5 s, sampled every 0.2 s
    assert UsageSample.objects.filter(workload=first[0], gpu_utilisation__isnull=False).count() == 0  # no GPUs here
    assert "no GPUs: nvidia-smi is missing or reports none; reporting none" in agent.output()
    host = AgentHost.objects.get(name="host-1")
    assert (host.gpus, host.queues, host.state) == (0, ["gpu-a", "gpu-b"], "online")


def test_two_agents_never_claim_the_same_workload(alice, submit, hosts, cycling, start_agent):
    workloads = [submit(alice, queue="gpu-a", name=f"w{i}", command="echo ok") for i in range(200)]
    one = start_agent("host-1", "gpu-a", slots=6)
    two = start_agent("host-2", "gpu-a", slots=6)

    def all_done() -> bool:
        return Workload.objects.filter(pk__in=[w.pk for w in workloads], state=State.SUCCEEDED).count() == 200

    wait_until(all_done, timeout=600, every=0.2)  # about 15 s here; a busy machine may take many times that
    ran = one.ran() + two.ran()
    assert len(ran) == 200
    assert set(ran) == {str(w.run_id) for w in workloads}
    assert one.ran()  # both took a share
    assert two.ran()
    hosts_by_claim = dict(Claim.objects.values_list("run_id", "host__name"))
    assert {hosts_by_claim[w.run_id] for w in workloads} == {"host-1", "host-2"}


def test_cancel_stops_the_whole_process_group(alice, submit, hosts, cycling, start_agent, tmp_path):
    pids = tmp_path / "children"
    w = submit(alice, queue="gpu-a", command=f"{RECORD_GROUP} sleep 300 & echo $! > {pids}; sleep 300")
    start_agent("host-1", "gpu-a")
    reach(w, State.RUNNING)
    wait_until(pids.exists)
    child = int(pids.read_text())

    services.do_cancel(alice, w)
    reach(w, State.CANCELLED)
    assert w.exit_code == 128 + signal.SIGTERM
    wait_until(lambda: not pid_alive(child))


def test_cancel_before_any_agent_takes_it(alice, submit, hosts, cycling):
    online_already(hosts)
    w = submit(alice, queue="gpu-a", command="sleep 300")
    wait_until(lambda: all_claimable([w]))
    services.do_cancel(alice, w)
    reach(w, State.CANCELLED)
    assert Claim.objects.get(workload=w).state == "cancelled"


def test_the_runtime_limit_stops_the_job(alice, submit, hosts, cycling, start_agent):
    w = submit(alice, queue="gpu-a", command=f"{RECORD_GROUP} echo started; sleep 300")
    Workload.objects.filter(pk=w.pk).update(runtime_limit_s=1)  # the API's floor is a minute
    start_agent("host-1", "gpu-a")
    reach(w, State.EXPIRED)
    assert w.exit_code == 128 + signal.SIGTERM
    assert "started" in w.log_tail


def test_a_sigkilled_agent_is_lost_and_its_work_fails_or_goes_back_in_line(alice, submit, hosts, cycling, start_agent):
    strict = submit(alice, queue="gpu-a", name="strict", command=f"{RECORD_GROUP} sleep 300")
    spare = submit(alice, queue="spare", name="spare", command=f"{RECORD_GROUP} sleep 300")
    doomed = start_agent("host-1", "gpu-a", "spare", slots=2)
    reach(strict, State.RUNNING)
    reach(spare, State.RUNNING)
    doomed.proc.send_signal(signal.SIGKILL)
    doomed.proc.wait()
    # Only now is a host lost after 2 s of silence: a live agent on a busy machine may go quiet that long.
    lost_soon = {**hosts["fabric"].settings, "lost_after_s": 2}
    Fabric.objects.filter(pk=hosts["fabric"].pk).update(settings=lost_soon)

    reach(strict, State.FAILED)
    assert "agent host host-1 stopped heartbeating" in strict.events.last().reason
    wait_until(lambda: state_of(spare) == State.PENDING or spare.attempt > 0, timeout=120)
    assert AgentHost.objects.get(name="host-1").state == "lost"
    Fabric.objects.filter(pk=hosts["fabric"].pk).update(settings=hosts["fabric"].settings)

    start_agent("host-2", "spare")  # the requeued run goes to a live host
    reach(spare, State.RUNNING)
    assert spare.host == "host-2"
    assert spare.attempt == 1
    assert list(spare.events.values_list("to_state", flat=True)).count("preempted") == 1


def test_a_notebook_on_an_agent_host_reports_its_jupyter_and_opens_through_the_portal(
    alice, charlie, submit, hosts, cycling, start_agent, asgi_portal, live_server, settings
):
    from portal.queues.models import Queue
    from portal.workloads import notebook_endpoint
    from tests.connect.client import call
    from tests.connect.serving import session_cookie

    settings.GRIDLANE_PUBLIC_URL = live_server.url  # where the job reports (the agent's own server)
    # The test's agent hosts all run on this machine, so their servers are on loopback: IT lists it, as a site
    # lists its compute network (an agent host's name is no address the portal can resolve here).
    settings.GRIDLANE_CONNECT_NETWORKS = ["127.0.0.0/8"]
    Queue.objects.filter(slug="gpu-a").update(kinds=["notebook", "training"])
    online_already(hosts)
    notebook = submit(alice, queue="gpu-a", kind="notebook", name="on-a-host", command="")
    start_agent("host-1", "gpu-a")
    reach(notebook, State.RUNNING)
    server = wait_until(lambda: notebook_endpoint.stored(Workload.objects.get(pk=notebook.pk)), timeout=120)
    assert server.path == f"/connect/{notebook.pk}/"
    status = call(asgi_portal, "GET", f"/connect/{notebook.pk}/api/status", Cookie=session_cookie(alice))
    assert status.status == 200, status.text
    assert "started" in status.json()
    assert server.token not in status.text
    assert call(asgi_portal, "GET", f"/connect/{notebook.pk}/api/status", Cookie=session_cookie(charlie)).status == 404
    services.do_cancel(alice, Workload.objects.get(pk=notebook.pk))
    reach(notebook, State.CANCELLED)

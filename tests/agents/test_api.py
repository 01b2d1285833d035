"""The agent API's trust boundary: only an agent enrolled for a fabric speaks for it, and only about its work."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from portal.agents import services
from portal.agents.models import Claim, LeaseKey
from portal.queues.models import Fabric
from portal.usage.models import UsageSample

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyBodyForTests alice@laptop"


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


@pytest.fixture
def other_agent(hosts, it_admin):
    """An agent enrolled for a second agent fabric, `lab`."""
    from portal.accounts.models import ResourceGroup

    lab = Fabric.objects.create(name="lab", kind="agent", gpus_milli=1000, cpus_milli=8000, memory_mib=8192)
    _, token = services.enroll(lab, "lab-agent", ResourceGroup.objects.get(slug="fraud"), by=it_admin)
    client = bearer(token)
    client.post("/api/v1/agent/register/", {"host": "lab-1", "queues": ["gpu-a"]}, format="json")
    return client


def test_a_persons_token_is_no_agent(api_as, alice):
    answer = api_as(alice).post("/api/v1/agent/register/", {"host": "h"}, format="json")
    assert answer.status_code == 403
    assert "errors" in answer.json()


def test_an_ai_agent_not_enrolled_for_a_fabric_is_no_agent(agent):
    from portal.accounts import tokens

    _, token = tokens.issue(agent.user, "t", expires_at=None, by=None)
    assert bearer(token).post("/api/v1/agent/register/", {"host": "h"}, format="json").status_code == 403


def test_a_claim_answers_204_when_nothing_is_claimable(hosts):
    client = bearer(hosts["token"])
    client.post("/api/v1/agent/register/", {"host": "host-1", "queues": ["gpu-a"]}, format="json")
    assert client.post("/api/v1/agent/claim/", {"host": "host-1", "wait": 0}, format="json").status_code == 204


def test_an_unregistered_host_cannot_claim(hosts):
    answer = bearer(hosts["token"]).post("/api/v1/agent/claim/", {"host": "nobody", "wait": 0}, format="json")
    assert answer.status_code == 404


def test_another_fabrics_agent_never_sees_or_reports_this_fabrics_work(claimed, other_agent):
    _, job = claimed
    run = f"/api/v1/agent/runs/{job['run_id']}"
    assert other_agent.post(f"{run}/status/", {"state": "succeeded", "exit_code": 0}, format="json").status_code == 404
    assert other_agent.post(f"{run}/log/", {"chunk": "forged"}, format="json").status_code == 404
    assert other_agent.post(f"{run}/usage/", {"samples": [{}]}, format="json").status_code == 404
    assert other_agent.post("/api/v1/agent/claim/", {"host": "lab-1", "wait": 0}, format="json").status_code == 204
    claim = Claim.objects.get(run_id=job["run_id"])
    assert (claim.state, claim.log) == ("running", "")


def test_the_agent_reports_log_usage_and_exit(claimed):
    client, job = claimed
    run = f"/api/v1/agent/runs/{job['run_id']}"
    assert client.post(f"{run}/log/", {"chunk": "hi\n"}, format="json").json() == {"cancel": False}
    sample = {"at": "2026-11-30T10:00:00+00:00", "gpu_utilisation": 55.5, "gpu_memory_mib": 1000, "memory_mib": 12}
    assert client.post(f"{run}/usage/", {"samples": [sample]}, format="json").json() == {"recorded": 1}
    assert client.post(f"{run}/status/", {"state": "succeeded", "exit_code": 0}, format="json").status_code == 200
    bad = client.post(f"{run}/status/", {"state": "exploded"}, format="json")
    assert bad.status_code == 400
    assert "state" in bad.json()["errors"]
    claim = Claim.objects.get(run_id=job["run_id"])
    assert (claim.state, claim.exit_code, claim.log) == ("succeeded", 0, "hi\n")
    assert UsageSample.objects.get(workload=claim.workload).gpu_utilisation == 55.5


def test_only_who_may_manage_a_vm_lease_sets_its_key(alice, charlie, api_as, submit, hosts):
    from decimal import Decimal

    w = submit(alice, queue="gpu-a", kind="vm", command="lease", lease_hours=Decimal("1"))
    url = f"/api/v1/agent/leases/{w.pk}/key/"
    assert api_as(charlie).put(url, {"public_key": KEY}, format="json").status_code == 404
    assert api_as(alice).put(url, {"public_key": "not a key"}, format="json").status_code == 400
    answer = api_as(alice).put(url, {"public_key": KEY, "from": "127.0.0.1"}, format="json")
    assert answer.status_code == 200
    assert LeaseKey.objects.get(workload=w).from_addresses == "127.0.0.1"


def test_it_enrols_an_agent_and_gets_its_token_once(hosts, capsys):
    from django.core.management import call_command

    call_command("enroll_agent", "hosts", "more-hosts", "--group", "vision")
    token = capsys.readouterr().out.strip()
    answer = bearer(token).post("/api/v1/agent/register/", {"host": "h2", "queues": ["gpu-a"]}, format="json")
    assert answer.json()["fabric"] == "hosts"


def test_many_ends_go_in_one_request_with_their_last_readings_and_another_fabrics_runs_are_left_alone(
    claimed, other_agent
):
    import uuid

    client, job = claimed
    sample = {"at": "2026-11-30T10:00:00+00:00", "cpu_utilisation": 12.5, "memory_mib": 40}
    stranger = str(uuid.uuid4())
    runs = [
        {"run_id": job["run_id"], "state": "failed", "exit_code": 3, "reason": "", "samples": [sample]},
        {"run_id": stranger, "state": "succeeded", "exit_code": 0},
    ]
    # Another fabric's agent naming this fabric's run: nothing happens to it.
    assert other_agent.post("/api/v1/agent/ends/", {"runs": runs[:1]}, format="json").json() == {
        "recorded": 0, "unknown": [job["run_id"]],
    }  # fmt: skip
    assert Claim.objects.get(run_id=job["run_id"]).state == "running"
    answer = client.post("/api/v1/agent/ends/", {"host": "host-1", "runs": runs}, format="json")
    assert answer.json() == {"recorded": 1, "unknown": [stranger]}
    claim = Claim.objects.get(run_id=job["run_id"])
    assert (claim.state, claim.exit_code) == ("failed", 3)
    assert UsageSample.objects.get(workload=claim.workload).cpu_utilisation == 12.5


def test_one_bad_end_in_a_batch_is_named_by_its_index_and_nothing_is_recorded(claimed):
    client, job = claimed
    good = {"run_id": job["run_id"], "state": "succeeded", "exit_code": 0}
    for bad, field in (
        ({"run_id": "nope", "state": "succeeded"}, "run_id"),
        ({"run_id": job["run_id"], "state": "exploded"}, "state"),
        ({"run_id": job["run_id"], "state": "failed", "exit_code": "3"}, "exit_code"),
        ({"run_id": job["run_id"], "state": "failed", "samples": {"at": 1}}, "samples"),
        ("not an object", "run"),
    ):
        answer = client.post("/api/v1/agent/ends/", {"runs": [good, bad]}, format="json")
        assert answer.status_code == 400
        assert list(answer.json()["errors"]) == [f"runs.1.{field}"]
    for runs in ([], [good] * 1001, "all of them"):
        assert client.post("/api/v1/agent/ends/", {"runs": runs}, format="json").status_code == 400
    bad_reading = {**good, "samples": [{"memory_mib": -5}]}
    assert client.post("/api/v1/agent/ends/", {"runs": [bad_reading]}, format="json").status_code == 400
    assert Claim.objects.get(run_id=job["run_id"]).state == "running"
    assert not UsageSample.objects.exists()

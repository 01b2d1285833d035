"""The agent API refuses unknown fields by name, as every write endpoint does: an agent's typo is a 400 naming
it (with the close name when there is one), never a register with no GPUs or an end with no exit code."""

from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from portal.agents.models import AgentHost, Claim, LeaseKey

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFakeKeyBodyForTests alice@laptop"


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


def test_register_names_a_typo_and_registers_nothing(hosts):
    answer = bearer(hosts["token"]).post("/api/v1/agent/register/", {"host": "h-1", "gpu": 4}, format="json")
    assert answer.status_code == 400
    assert answer.json() == {"errors": {"gpu": ["Unknown field; did you mean gpus?"]}}
    assert not AgentHost.objects.filter(name="h-1").exists()


def test_heartbeat_and_claim_name_unknown_fields(hosts):
    client = bearer(hosts["token"])
    assert (
        client.post("/api/v1/agent/register/", {"host": "host-1", "queues": ["gpu-a"]}, format="json").status_code
        == 200
    )
    beat = client.post("/api/v1/agent/heartbeat/", {"host": "host-1", "colour": "red"}, format="json")
    assert beat.status_code == 400
    assert list(beat.json()["errors"]) == ["colour"]
    claim = client.post("/api/v1/agent/claim/", {"host": "host-1", "wait": 0, "maximum": 2}, format="json")
    assert claim.status_code == 400
    assert claim.json()["errors"] == {"maximum": ["Unknown field; this body takes host, max, queues, wait."]}


def test_status_log_and_usage_name_unknown_fields_and_record_nothing(claimed):
    client, job = claimed
    run = f"/api/v1/agent/runs/{job['run_id']}"
    status = client.post(f"{run}/status/", {"state": "failed", "exitcode": 3}, format="json")
    assert status.json() == {"errors": {"exitcode": ["Unknown field; did you mean exit_code?"]}}
    log = client.post(f"{run}/log/", {"chunk": "hi", "stream": "stderr"}, format="json")
    assert (log.status_code, list(log.json()["errors"])) == (400, ["stream"])
    sample = {"at": "2026-11-30T10:00:00+00:00", "gpu_utilization": 55.5}
    usage = client.post(f"{run}/usage/", {"samples": [sample]}, format="json")
    assert usage.status_code == 400
    assert usage.json() == {"errors": {"samples.0.gpu_utilization": ["Unknown field; did you mean gpu_utilisation?"]}}
    claim = Claim.objects.get(run_id=job["run_id"])
    assert (claim.state, claim.log) == ("running", "")


def test_ends_names_unknown_fields_of_the_body_of_each_run_and_of_its_samples(claimed):
    client, job = claimed
    end = {"run_id": job["run_id"], "state": "succeeded", "exit_code": 0}
    top = client.post("/api/v1/agent/ends/", {"host": "host-1", "runs": [end], "batch": 1}, format="json")
    assert (top.status_code, list(top.json()["errors"])) == (400, ["batch"])
    bad_run = client.post("/api/v1/agent/ends/", {"runs": [end | {"why": "x"}]}, format="json")
    assert bad_run.json()["errors"]["runs.0.why"][0].startswith("Unknown field")
    bad_sample = client.post("/api/v1/agent/ends/", {"runs": [end | {"samples": [{"mem": 1}]}]}, format="json")
    assert list(bad_sample.json()["errors"]) == ["runs.0.samples.0.mem"]
    assert Claim.objects.get(run_id=job["run_id"]).state == "running"
    good = client.post("/api/v1/agent/ends/", {"host": "host-1", "runs": [end]}, format="json")
    assert good.json() == {"recorded": 1, "unknown": []}


def test_a_lease_key_with_an_unknown_field_is_refused(api_as, alice, submit, hosts):
    from decimal import Decimal

    workload = submit(alice, queue="gpu-a", kind="vm", command="lease", lease_hours=Decimal("1"))
    answer = api_as(alice).put(
        f"/api/v1/agent/leases/{workload.pk}/key/", {"public_key": KEY, "from_address": "10.0.0.1"}, format="json"
    )
    assert answer.status_code == 400
    assert answer.json() == {"errors": {"from_address": ["Unknown field; this body takes from, public_key."]}}
    assert not LeaseKey.objects.filter(workload=workload).exists()


@pytest.mark.django_db
def test_enrollment_names_an_unknown_field_before_looking_at_the_token():
    answer = APIClient().post("/api/v1/agent/enroll/", {"token": "t", "host": "h", "hots": "h"}, format="json")
    assert answer.status_code == 400
    assert answer.json() == {"errors": {"hots": ["Unknown field; did you mean host?"]}}

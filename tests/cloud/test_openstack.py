"""The OpenStack provider over real HTTP against Keystone v3 and Nova v2.1 doubles: metadata tags, launches that
never happen twice, "no valid host" as a capacity error, and what each error means for the autoscaler."""

from __future__ import annotations

import base64
import re
from dataclasses import replace

import pytest

from fabrics.cloud import openstack, registry
from fabrics.cloud.base import CloudError, Credentials, ErrorKind, InstanceState, LaunchRequest, resolve
from fabrics.cloud.openstack import keystone_v3
from tests.cloud.conftest import APP_CREDENTIAL, OS_IMAGE, openstack_config
from tests.cloud.ec2_double import free_port
from tests.cloud.openstack_double import Rule, nova_error


@pytest.fixture(autouse=True)
def quick_polls(monkeypatch):
    monkeypatch.setattr(openstack, "SCHEDULE_POLL_S", 0.01)


def request(pool: str = "burst", launch_id: str = "launch-1", flavor: str = "gpu.a10-1", **kw) -> LaunchRequest:
    values = {"pool": pool, "launch_id": launch_id, "client_token": f"{launch_id}.0", "instance_type": flavor,
              "zone": "az1", "image": OS_IMAGE, "user_data": "#!/bin/sh\necho hello\n",
              "name": "burst-1"} | kw  # fmt: skip
    return LaunchRequest(**values)


def test_a_launch_is_tagged_with_its_pool_and_launch_id_and_found_by_them(nova):
    provider = registry.connect(openstack_config(nova, "burst"))
    launched = provider.launch(request())
    registry.connect(openstack_config(nova, "elsewhere")).launch(request("elsewhere", launch_id="launch-2"))

    sent = nova.bodies[0]
    assert sent == {
        "name": "burst-1", "imageRef": OS_IMAGE, "flavorRef": "101", "availability_zone": "az1",
        "user_data": base64.b64encode(b"#!/bin/sh\necho hello\n").decode(),
        "metadata": {"gridlane:pool": "burst", "gridlane:launch-id": "launch-1"},
    }  # fmt: skip
    assert launched.state == InstanceState.PENDING  # scheduled, spawning
    found = provider.describe("burst")
    assert [(i.id, i.launch_id, i.pool, i.instance_type, i.zone, i.state) for i in found] == [
        (launched.id, "launch-1", "burst", "gpu.a10-1", "az1", InstanceState.RUNNING)
    ]
    assert found[0].launched_at is not None
    assert found[0].launched_at.tzinfo is not None
    assert nova.user_data[launched.id] == "#!/bin/sh\necho hello\n"


def test_the_same_launch_never_creates_a_second_server(nova):
    provider = registry.connect(openstack_config(nova, "burst"))
    first = provider.launch(request())
    again = provider.launch(request(client_token="launch-1.1"))
    assert again.id == first.id
    assert len(provider.describe("burst")) == 1
    assert len(nova.calls("POST", r"/servers$")) == 1


def test_a_create_whose_answer_was_lost_is_found_by_its_launch_id_on_the_retry(nova):
    nova.rules.append(Rule("POST", r"^/servers$", delay=2.5, times=1))  # Nova creates it; the client gives up first
    provider = registry.connect(replace(openstack_config(nova, "burst"), timeout_s=1))
    with pytest.raises(CloudError) as lost:
        provider.launch(request())
    assert lost.value.kind == ErrorKind.UNAVAILABLE
    again = registry.connect(openstack_config(nova, "burst")).launch(request(client_token="launch-1.1"))
    assert list(nova.states("burst")) == [again.id]
    assert len(nova.calls("POST", r"/servers$")) == 1


def test_terminate_deletes_servers_and_ids_already_gone_are_not_an_error(nova):
    provider = registry.connect(openstack_config(nova, "burst"))
    one = provider.launch(request(launch_id="a"))
    two = provider.launch(request(launch_id="b"))
    provider.terminate([one.id])
    provider.terminate([one.id, two.id, "0b7e5f1c-0000-4000-8000-000000000000"])
    assert {i.id: i.state for i in provider.describe("burst")} == {
        one.id: InstanceState.STOPPING,  # listed once more while Nova deletes it
        two.id: InstanceState.STOPPING,
    }
    assert provider.describe("burst") == []


def test_describe_reads_every_page_of_the_project(nova, monkeypatch):
    monkeypatch.setattr(openstack, "PAGE", 2)
    provider = registry.connect(openstack_config(nova, "burst"))
    ids = {provider.launch(request(launch_id=f"l{i}")).id for i in range(5)}
    nova.add_server("someone-elses", "m1.small", {"owner": "another team"})
    assert {i.id for i in provider.describe("burst")} == ids
    assert len(nova.calls("GET", r"/servers/detail$")) >= 3 + 5  # three pages now, one per launch before


def test_no_valid_host_is_a_capacity_error_and_the_failed_server_is_deleted(nova):
    nova.no_host.add(("gpu.a10-1", "az1"))
    provider = registry.connect(openstack_config(nova, "burst"))
    with pytest.raises(CloudError) as raised:
        provider.launch(request())
    assert (raised.value.kind, raised.value.code, raised.value.retryable) == (ErrorKind.CAPACITY, "NoValidHost", True)
    assert "No valid host was found" in str(raised.value)
    assert all(i.state.gone for i in provider.describe("burst"))  # deleting: nothing left behind
    elsewhere = provider.launch(request(zone="az2"))  # the same launch, in the next zone
    assert [i.id for i in provider.describe("burst")] == [elsewhere.id]


def test_a_project_over_its_instance_quota_is_out_of_capacity(nova):
    nova.quota_instances = 1
    provider = registry.connect(openstack_config(nova, "burst"))
    provider.launch(request(launch_id="a"))
    with pytest.raises(CloudError) as raised:
        provider.launch(request(launch_id="b"))
    assert (raised.value.kind, raised.value.code) == (ErrorKind.CAPACITY, "QuotaExceeded")
    assert "Quota exceeded for instances" in str(raised.value)


@pytest.mark.parametrize(
    ("status", "body", "headers", "kind", "code"),
    [
        (400, nova_error(400, "Invalid key_name provided."), {}, ErrorKind.INVALID, "BadRequest"),
        (403, nova_error(403, "Policy doesn't allow os_compute_api:servers:create to be performed."), {},
         ErrorKind.CREDENTIALS, "Forbidden"),
        (403, nova_error(403, "Quota exceeded for cores: Requested 48, but already used 16 of 40 cores"), {},
         ErrorKind.CAPACITY, "QuotaExceeded"),
        (413, nova_error(413, "This request was rate-limited."), {"Retry-After": "7"}, ErrorKind.THROTTLED,
         "OverLimit"),
        (429, {"message": "Too Many Requests"}, {"Retry-After": "30"}, ErrorKind.THROTTLED, "TooManyRequests"),
        (500, nova_error(500, "Unexpected API Error."), {}, ErrorKind.UNAVAILABLE, "HTTP500"),
        (503, {}, {}, ErrorKind.UNAVAILABLE, "HTTP503"),
    ],
)  # fmt: skip
def test_each_nova_error_says_what_failed_and_whether_a_retry_helps(nova, status, body, headers, kind, code):
    nova.rules.append(Rule("POST", r"^/servers$", status=status, body=body, headers=headers))
    provider = registry.connect(openstack_config(nova, "burst"))
    with pytest.raises(CloudError) as raised:
        provider.launch(request())
    assert (raised.value.kind, raised.value.code) == (kind, code)
    assert raised.value.retryable == (kind in (ErrorKind.CAPACITY, ErrorKind.THROTTLED, ErrorKind.UNAVAILABLE))
    if "Retry-After" in headers:
        assert f"retry after {headers['Retry-After']} s" in str(raised.value)
    assert provider.describe("burst") == []


@pytest.mark.parametrize(
    ("change", "code", "words"),
    [
        ({"flavor": "gpu.h100-8"}, "FlavorNotFound", "no flavor 'gpu.h100-8' (the instance type)"),
        ({"image": "0a0a0a0a-0000-4000-8000-000000000000"}, "BadRequest", "Can not find requested image"),
        ({"zone": "az9"}, "BadRequest", "The requested availability zone is not available"),
        ({"spot": True}, "NoSpot", "OpenStack has no spot market"),
    ],
)
def test_a_bad_request_is_invalid_and_not_worth_retrying(nova, change, code, words):
    provider = registry.connect(openstack_config(nova, "burst"))
    with pytest.raises(CloudError, match=re.escape(words)) as raised:
        provider.launch(request(**change))
    assert (raised.value.kind, raised.value.code, raised.value.retryable) == (ErrorKind.INVALID, code, False)


def test_a_wrong_secret_is_a_credentials_error_that_never_shows_the_secret(nova):
    wrong = Credentials(APP_CREDENTIAL.key_id, "not-the-secret")
    with pytest.raises(CloudError) as raised:
        registry.connect(openstack_config(nova, "burst", wrong)).describe("burst")
    assert (raised.value.kind, raised.value.code) == (ErrorKind.CREDENTIALS, "Unauthorized")
    assert str(raised.value) == "Keystone 401 Unauthorized: The request you have made requires authentication."
    assert "not-the-secret" not in str(raised.value)
    assert nova.calls("GET", r"/servers") == []


def test_a_region_missing_from_the_catalog_is_named_with_the_regions_there_are(nova):
    config = replace(openstack_config(nova, "burst"), region="RegionTwo")
    with pytest.raises(CloudError) as raised:
        registry.connect(config).describe("burst")
    assert (
        str(raised.value)
        == "Keystone's catalog has no public compute endpoint in region 'RegionTwo' (it has RegionOne)"
    )
    assert raised.value.kind == ErrorKind.INVALID


def test_an_expired_token_is_replaced_once_and_the_call_goes_through(nova):
    provider = registry.connect(openstack_config(nova, "burst"))
    provider.describe("burst")
    nova.expire_tokens()
    assert provider.describe("burst") == []
    assert len(nova.calls("POST", r"/auth/tokens$")) == 2


def test_a_cloud_that_does_not_answer_is_unavailable_and_worth_retrying(nova):
    config = replace(openstack_config(nova, "burst"), endpoint_url=f"http://127.0.0.1:{free_port()}/v3")
    with pytest.raises(CloudError) as refused:
        registry.connect(config).describe("burst")
    assert (refused.value.kind, refused.value.retryable) == (ErrorKind.UNAVAILABLE, True)
    assert str(refused.value).startswith("Keystone did not answer")

    nova.rules.append(Rule("GET", r"^/servers/detail$", delay=2.5))
    slow = replace(openstack_config(nova, "burst"), timeout_s=1)
    with pytest.raises(CloudError) as timed_out:
        registry.connect(slow).describe("burst")
    assert (timed_out.value.kind, timed_out.value.retryable) == (ErrorKind.UNAVAILABLE, True)


def test_a_launch_waits_while_nova_schedules_and_no_longer(nova):
    """The launch polls the server while its task state is "scheduling", and no longer."""
    provider = registry.connect(openstack_config(nova, "burst"))
    launched = provider.launch(request())
    shows = nova.calls("GET", rf"/servers/{launched.id}$")
    assert len(shows) == 2  # the first look finds it scheduling, the second spawning: then it stops
    assert (launched.state, launched.zone) == (InstanceState.PENDING, "az1")


@pytest.mark.parametrize(
    ("raw", "state"),
    [
        ({"status": "BUILD", "OS-EXT-STS:task_state": "spawning"}, InstanceState.PENDING),
        ({"status": "ACTIVE", "OS-EXT-STS:task_state": None}, InstanceState.RUNNING),
        ({"status": "ACTIVE", "OS-EXT-STS:task_state": "deleting"}, InstanceState.STOPPING),
        ({"status": "HARD_REBOOT"}, InstanceState.RUNNING),
        ({"status": "SHUTOFF"}, InstanceState.STOPPING),
        ({"status": "SHELVED_OFFLOADED"}, InstanceState.STOPPING),
        ({"status": "ERROR", "fault": {"code": 500, "message": "No valid host was found."}}, InstanceState.STOPPING),
        ({"status": "DELETED"}, InstanceState.TERMINATED),
        ({"status": "PAUSED"}, InstanceState.UNDETERMINED),
        ({"status": "SOMETHING_NEW"}, InstanceState.UNDETERMINED),
    ],
)
def test_nova_statuses_map_to_ours_with_a_safe_default(raw, state):
    instance = openstack._instance({"id": "s-1", "metadata": {}, **raw}, "burst", {})
    assert instance.state == state
    if "fault" in raw:
        assert instance.reason == "No valid host was found."


@pytest.mark.parametrize(
    ("given", "root"),
    [
        ("https://keystone.example:5000/v3", "https://keystone.example:5000/v3"),
        ("https://keystone.example:5000/v3/", "https://keystone.example:5000/v3"),
        ("https://keystone.example:5000", "https://keystone.example:5000/v3"),
        ("https://cloud.example/identity", "https://cloud.example/identity/v3"),
        ("https://cloud.example/identity/v3/auth/tokens", "https://cloud.example/identity/v3"),
    ],
)
def test_an_auth_url_as_an_openrc_gives_it_becomes_keystones_v3_root(given, root):
    assert keystone_v3(given) == root


@pytest.mark.parametrize(
    ("given", "words"),
    [
        ("keystone.example:5000/v3", "Give Keystone's auth URL"),
        ("ftp://keystone.example/v3", "Give Keystone's auth URL"),
        ("https://admin:s3cret@keystone.example/v3", "must not carry a user or password"),
        ("https://keystone.example:5000/v2.0", "v2.0 API is gone"),
        ("https://keystone.example/v3?project=x", "no query or fragment"),
        ("https://keystone.example:port/v3", "is not a URL"),
    ],
)
def test_a_bad_auth_url_says_what_is_wrong(given, words):
    with pytest.raises(ValueError, match=words):
        keystone_v3(given)


def test_application_credentials_come_from_a_reference_with_openrcs_names(tmp_path):
    env = {"OS_APPLICATION_CREDENTIAL_ID": "ac-id", "OS_APPLICATION_CREDENTIAL_SECRET": "very-secret"}
    creds = resolve("env:OS", env, kind="openstack")
    assert (creds.key_id, creds.secret) == ("ac-id", "very-secret")
    assert "very-secret" not in repr(creds)
    (tmp_path / "onprem").write_text("application_credential_id = ac-file\napplication_credential_secret = s\n")
    creds = resolve("file:onprem", {"GRIDLANE_CREDENTIALS_DIR": str(tmp_path)}, kind="openstack")
    assert (creds.key_id, creds.secret) == ("ac-file", "s")
    with pytest.raises(CloudError, match="OS_APPLICATION_CREDENTIAL_ID and OS_APPLICATION_CREDENTIAL_SECRET"):
        resolve("env:OS", {"OS_ACCESS_KEY_ID": "x", "OS_SECRET_ACCESS_KEY": "y"}, kind="openstack")

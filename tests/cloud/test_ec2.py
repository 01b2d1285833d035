"""The EC2 provider through real boto3 over HTTP against moto: tags, idempotent launches, and what each error
means for the autoscaler."""

from __future__ import annotations

import pytest

from fabrics.cloud import registry
from fabrics.cloud.base import (
    CloudError,
    Credentials,
    ErrorKind,
    InstanceState,
    LaunchRequest,
    ProviderConfig,
    check_reference,
    resolve,
)
from tests.cloud.conftest import IMAGE, REGION, provider_config
from tests.cloud.ec2_double import Rule, free_port


def request(pool: str, launch_id: str = "launch-1", instance_type: str = "g5.xlarge", **kw) -> LaunchRequest:
    values = {"pool": pool, "launch_id": launch_id, "client_token": f"{launch_id}.0", "instance_type": instance_type,
              "zone": f"{REGION}a", "image": IMAGE, "user_data": "#!/bin/sh\necho hello\n"} | kw  # fmt: skip
    return LaunchRequest(**values)


def test_a_launch_is_tagged_with_its_pool_and_launch_id_and_found_by_them(ec2, pool_name):
    provider = registry.connect(provider_config(ec2, pool_name))
    other = registry.connect(provider_config(ec2, pool="elsewhere"))
    launched = provider.launch(request(pool_name))
    other.launch(request("elsewhere", launch_id="launch-2"))

    found = provider.describe(pool_name)
    assert [(i.id, i.launch_id, i.pool, i.instance_type, i.zone) for i in found] == [
        (launched.id, "launch-1", pool_name, "g5.xlarge", f"{REGION}a")
    ]
    assert found[0].state in (InstanceState.PENDING, InstanceState.RUNNING)
    assert provider.user_data(launched.id) == "#!/bin/sh\necho hello\n"  # type: ignore[attr-defined]


def test_the_same_launch_never_launches_a_second_instance(ec2, pool_name):
    provider = registry.connect(provider_config(ec2, pool_name))
    first = provider.launch(request(pool_name))
    again = provider.launch(request(pool_name))
    assert again.id == first.id
    assert len(provider.describe(pool_name)) == 1
    assert [form["ClientToken"] for form in ec2.actions("RunInstances")] == ["launch-1.0"]  # EC2's own guard too


def test_terminate_ends_instances_and_ids_already_gone_are_not_an_error(ec2, pool_name):
    provider = registry.connect(provider_config(ec2, pool_name))
    one = provider.launch(request(pool_name, launch_id="a"))
    two = provider.launch(request(pool_name, launch_id="b"))
    provider.terminate([one.id])
    provider.terminate([one.id, two.id, "i-0123456789abcdef0"])
    states = {i.id: i.state for i in provider.describe(pool_name)}
    assert states == {one.id: InstanceState.TERMINATED, two.id: InstanceState.TERMINATED}


def test_a_spot_launch_asks_for_the_spot_market(ec2, pool_name):
    provider = registry.connect(provider_config(ec2, pool_name))
    provider.launch(request(pool_name, spot=True))
    (form,) = ec2.actions("RunInstances")
    assert form["InstanceMarketOptions.MarketType"] == "spot"


@pytest.mark.parametrize(
    ("code", "kind", "retryable"),
    [
        ("InsufficientInstanceCapacity", ErrorKind.CAPACITY, True),
        ("Unsupported", ErrorKind.CAPACITY, True),
        ("RequestLimitExceeded", ErrorKind.THROTTLED, True),
        ("AuthFailure", ErrorKind.CREDENTIALS, False),
        ("UnauthorizedOperation", ErrorKind.CREDENTIALS, False),
        ("InvalidAMIID.Malformed", ErrorKind.INVALID, False),
    ],
)
def test_each_ec2_error_says_what_failed_and_whether_a_retry_helps(ec2, pool_name, code, kind, retryable):
    ec2.rules.append(Rule({"Action": "RunInstances"}, code=code))
    provider = registry.connect(provider_config(ec2, pool_name))
    with pytest.raises(CloudError) as raised:
        provider.launch(request(pool_name))
    assert (raised.value.kind, raised.value.retryable, raised.value.code) == (kind, retryable, code)
    assert provider.describe(pool_name) == []


def test_an_unknown_instance_type_is_a_bad_request_not_a_capacity_problem(ec2, pool_name):
    provider = registry.connect(provider_config(ec2, pool_name))
    with pytest.raises(CloudError) as raised:
        provider.launch(request(pool_name, instance_type="g99.imaginary"))
    assert raised.value.kind == ErrorKind.INVALID
    assert not raised.value.retryable


def test_a_provider_that_does_not_answer_is_unavailable_and_worth_retrying():
    config = ProviderConfig("ec2", "burst", REGION, Credentials("AKIA", "s"), endpoint_url=f"http://127.0.0.1:{free_port()}",
                            timeout_s=2)  # fmt: skip
    with pytest.raises(CloudError) as raised:
        registry.connect(config).describe("burst")
    assert raised.value.kind == ErrorKind.UNAVAILABLE
    assert raised.value.retryable


def test_credentials_come_from_a_reference_and_never_show(tmp_path):
    env = {"BURST_ACCESS_KEY_ID": "AKIAEXAMPLE", "BURST_SECRET_ACCESS_KEY": "very-secret"}
    creds = resolve("env:BURST", env)
    assert (creds.key_id, creds.secret) == ("AKIAEXAMPLE", "very-secret")
    assert "very-secret" not in repr(creds)

    (tmp_path / "aws-burst").write_text("access_key_id = AKIAFILE\nsecret_access_key = from-file\n")
    creds = resolve("file:aws-burst", {"GRIDLANE_CREDENTIALS_DIR": str(tmp_path)})
    assert (creds.key_id, creds.secret) == ("AKIAFILE", "from-file")

    with pytest.raises(CloudError, match="BURST_ACCESS_KEY_ID and BURST_SECRET_ACCESS_KEY") as missing:
        resolve("env:BURST", {"BURST_ACCESS_KEY_ID": "AKIAEXAMPLE"})
    assert missing.value.kind == ErrorKind.CREDENTIALS
    with pytest.raises(CloudError, match="cannot be read"):
        resolve("file:absent", {"GRIDLANE_CREDENTIALS_DIR": str(tmp_path)})


@pytest.mark.parametrize("reference", ["AKIAEXAMPLE", "env:lower", "file:../etc/passwd", "file:/abs", "env:", ""])
def test_a_reference_that_could_be_a_key_or_a_path_is_refused(reference):
    with pytest.raises(ValueError, match="never the key itself"):
        check_reference(reference)

"""moto's EC2 on loopback for every test here (one server per test process), with a fault proxy in front of
it. Tests share the server and keep apart by pool: each gets a pool name of its own (the tag describe filters
on), so nothing needs resetting (moto's reset reloads every region: seconds per test)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from fabrics.cloud.base import Credentials, ProviderConfig
from tests.cloud.ec2_double import Proxy, fault_proxy, moto_server

REGION = "eu-west-1"
KEYS = Credentials("AKIATESTGRIDLANE0001", "test-secret-never-shown")
IMAGE = "ami-0a1b2c3d4e5f60718"  # moto launches any well-formed image id


@pytest.fixture(scope="session")
def moto_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with moto_server(Path(tmp_path_factory.mktemp("moto")) / "moto.log") as url:
        # moto builds a region's backend on its first launch there (seconds): once, here, not in a test.
        client = boto3.client("ec2", region_name=REGION, endpoint_url=url, aws_access_key_id=KEYS.key_id,
                              aws_secret_access_key=KEYS.secret)  # fmt: skip
        warm = client.run_instances(ImageId=IMAGE, InstanceType="t3.micro", MinCount=1, MaxCount=1)
        client.terminate_instances(InstanceIds=[warm["Instances"][0]["InstanceId"]])
        yield url


@pytest.fixture
def ec2(moto_url: str) -> Iterator[Proxy]:
    """EC2 behind the fault proxy: provider configs point at `ec2.url`."""
    with fault_proxy(moto_url) as proxy:
        yield proxy


@pytest.fixture
def pool_name() -> str:
    return f"burst-{uuid.uuid4().hex[:8]}"


def provider_config(ec2: Proxy, pool: str, credentials: Credentials = KEYS) -> ProviderConfig:
    return ProviderConfig(kind="ec2", pool=pool, region=REGION, credentials=credentials, endpoint_url=ec2.url,
                          timeout_s=10)  # fmt: skip

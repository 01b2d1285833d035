"""moto's EC2 on loopback for every test here (one server per test process), with a fault proxy in front of
it. Tests share the server and keep apart by pool: each gets a pool name of its own (the tag describe filters
on), so nothing needs resetting (moto's reset reloads every region: seconds per test). OpenStack's Keystone and
Nova run in process, one per test (starting one takes milliseconds)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from fabrics.cloud.base import Credentials, ProviderConfig
from tests.cloud.ec2_double import Proxy, fault_proxy, moto_server
from tests.cloud.openstack_double import REGION as OS_REGION
from tests.cloud.openstack_double import Cloud, openstack_cloud

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


# -- OpenStack: Keystone and Nova in process (tests/cloud/openstack_double.py) -------------------------------
APP_CREDENTIAL = Credentials("3f1c0d9e8b7a4c2d9e6f5a4b3c2d1e0f", "app-secret-never-shown")
OS_IMAGE = "7b2e9f4c-1d3a-4e5b-8c6d-0f1a2b3c4d5e"
OS_FLAVORS = {"gpu.a10-1": "101", "gpu.a10-1-large": "102", "gpu.a10-4": "104", "m1.small": "2"}


@pytest.fixture
def nova() -> Iterator[Cloud]:
    """A fresh Keystone and Nova for each test: two zones, a GPU flavor family, one image."""
    with openstack_cloud(credentials={APP_CREDENTIAL.key_id: APP_CREDENTIAL.secret}, flavors=dict(OS_FLAVORS),
                         images={OS_IMAGE}, zones={"az1", "az2"}) as cloud:  # fmt: skip
        yield cloud


def openstack_config(cloud: Cloud, pool: str, credentials: Credentials = APP_CREDENTIAL) -> ProviderConfig:
    return ProviderConfig(kind="openstack", pool=pool, region=OS_REGION, credentials=credentials,
                          endpoint_url=cloud.auth_url, timeout_s=5)  # fmt: skip

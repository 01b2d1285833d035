"""A Slurm or PBS fabric's settings are checked when IT saves them, with the first problem named."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from fabrics.base import CANNOT_EXTEND, FabricConfig, FabricError, Resources, can_extend
from fabrics.local.fabric import LocalFabric
from fabrics.pbs.fabric import PbsFabric
from fabrics.registry import fabric_class
from fabrics.slurm.fabric import SlurmFabric

KNOWN = "[login1.hpc.example.org]:2222 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIH5Bqzh9U0brhqlUVoQXJoMAlmuxeQ26Ijqi+gXRs9Oe"
GOOD: dict[str, Any] = {
    "host": "login1.hpc.example.org",
    "port": 2222,
    "user": "gridlane",
    "known_hosts": KNOWN,
    "key_file": "/etc/gridlane/hpc_ed25519",
}


def test_the_registry_names_both_script_fabrics():
    assert fabric_class("slurm") is SlurmFabric
    assert fabric_class("pbs") is PbsFabric


def test_good_settings_pass_for_both():
    SlurmFabric.check_settings(GOOD | {"partition": "cpu", "gpu_partition": "gpu", "gpu_type": "a100"})
    PbsFabric.check_settings(GOOD | {"flavor": "torque", "queue": "batch"})


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"host": ""}, "settings.host"),
        ({"host": "login; rm -rf /"}, "settings.host"),
        ({"user": "-oProxyCommand=x"}, "settings.user"),
        ({"port": "22"}, "settings.port"),
        ({"known_hosts": ""}, "settings.known_hosts"),
        ({"known_hosts": "login1 ssh-ed25519 not-base64!"}, "known_hosts line 1"),
        ({"key_file": ""}, "settings.key_file"),
        ({"partition": "cpu gpu"}, "settings.partition"),
        ({"gpu_request": "gpus"}, "settings.gpu_request"),
        ({"workdir": "../elsewhere"}, "settings.workdir"),
        ({"workdir": "my jobs"}, "settings.workdir"),
        ({"submit_parallelism": 0}, "settings.submit_parallelism"),
        ({"accounting": "yes"}, "settings.accounting"),
        ({"extend_time_limit": "yes"}, "settings.extend_time_limit"),
    ],
)
def test_slurm_settings_name_what_is_wrong(change, complaint):
    with pytest.raises(ValueError, match=complaint):
        SlurmFabric.check_settings(GOOD | change)


@pytest.mark.parametrize(
    ("change", "complaint"),
    [
        ({"flavor": "lsf"}, "settings.flavor"),
        ({"queue": "a b"}, "settings.queue"),
        ({"bin_dir": "/opt/pbs bin"}, "bin_dir"),
    ],
)
def test_pbs_settings_name_what_is_wrong(change, complaint):
    with pytest.raises(ValueError, match=complaint):
        PbsFabric.check_settings(GOOD | change)


def test_a_slurm_fabric_extends_a_lease_only_when_its_account_is_an_operator():
    assert not can_extend(SlurmFabric)
    assert not can_extend(SlurmFabric, GOOD)
    assert can_extend(SlurmFabric, GOOD | {"extend_time_limit": True})
    assert not can_extend(PbsFabric, GOOD | {"extend_time_limit": True})
    assert can_extend(LocalFabric, {})  # the others decide by their class alone, as before


def test_without_the_setting_a_slurm_fabric_refuses_before_asking_the_cluster():
    fabric = SlurmFabric(FabricConfig("hpc", "slurm", Resources(0, 1000, 1024), GOOD))  # never connects
    assert not can_extend(fabric)
    with pytest.raises(FabricError, match=CANNOT_EXTEND) as refused:
        fabric.extend("42", datetime(2026, 5, 4, 14, 0, tzinfo=UTC))
    assert not refused.value.retryable
    operator = SlurmFabric(FabricConfig("hpc", "slurm", Resources(0, 1000, 1024), GOOD | {"extend_time_limit": True}))
    assert can_extend(operator)

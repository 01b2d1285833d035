"""A Slurm or PBS fabric's settings are checked when IT saves them, with the first problem named."""

from __future__ import annotations

from typing import Any

import pytest

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
